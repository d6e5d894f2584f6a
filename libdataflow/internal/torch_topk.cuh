#ifndef DATAFLOW_TORCH_TOPK_CUH
#define DATAFLOW_TORCH_TOPK_CUH

/* torch.topk(x, k) (largest, sorted) on CPU, tie order included. ATen's CPU kernel fills
 * (value, index) pairs in index order and runs libstdc++'s std::partial_sort over them when
 * k * 64 <= n, else std::nth_element at k - 1 then std::sort of the first k - 1, with the
 * comparator "x is NaN and y is not, or x > y". Neither algorithm is stable, so equal values
 * come out in the order these algorithms leave them (not by index): the steps below are
 * libstdc++'s (introselect, median-of-three pivot, heap select, insertion sort), so the same
 * inputs give torch's indices. std::sort of at most 16 elements is an insertion sort, the only
 * case here (k <= DATAFLOW_MOE_MAX_TOP_K).
 *
 * One text for the host kernels (C), the CUDA kernels (embedded for NVRTC, hence .cuh) and the
 * Vulkan shaders (GLSL), so every backend orders ties alike. GLSL has no pointers: there the
 * pairs are the shader's private array q (TOPK_Q / TOPK_Q_ declare the array parameter in C and
 * CUDA and nothing in GLSL; TOPK_PASS_ passes it); every range is (q, base + offsets). Plain
 * int indices: n <= DATAFLOW_MOE_MAX_EXPERTS. */

#ifdef VULKAN
#define TOPK_FN
#define TOPK_Q_
#define TOPK_PASS_
struct Topk_Pair {
	float value;
	int index;
};
Topk_Pair q[DATAFLOW_MOE_MAX_EXPERTS];
#else
#ifdef __CUDACC__
#define TOPK_FN __device__ static inline
#else
#include <math.h>
#include <stdbool.h>
#define TOPK_FN static inline
#endif
#define TOPK_Q_ Topk_Pair *q,
#define TOPK_PASS_ q,
typedef struct Topk_Pair {
	float value;
	int index;
} Topk_Pair;
#endif

TOPK_FN bool topk_before(Topk_Pair x, Topk_Pair y)
{
	return (isnan(x.value) && !isnan(y.value)) || x.value > y.value;
}

TOPK_FN void topk_swap(TOPK_Q_ int a, int b)
{
	Topk_Pair t = q[a];
	q[a] = q[b];
	q[b] = t;
}

/* std::__adjust_heap then std::__push_heap on the heap q[base, base + len): value sinks from
 * hole (relative to base). */
TOPK_FN void topk_adjust_heap(TOPK_Q_ int base, int hole, int len, Topk_Pair value)
{
	int top = hole, child = hole;
	while (child < (len - 1) / 2) {
		child = 2 * (child + 1);
		if (topk_before(q[base + child], q[base + child - 1]))
			child--;
		q[base + hole] = q[base + child];
		hole = child;
	}
	if ((len & 1) == 0 && child == (len - 2) / 2) {
		child = 2 * (child + 1);
		q[base + hole] = q[base + child - 1];
		hole = child - 1;
	}
	for (int parent = (hole - 1) / 2; hole > top && topk_before(q[base + parent], value); parent = (hole - 1) / 2) {
		q[base + hole] = q[base + parent];
		hole = parent;
	}
	q[base + hole] = value;
}

/* std::__heap_select: q[base, base + middle) becomes a heap of the middle "largest" of
 * q[base, base + last). */
TOPK_FN void topk_heap_select(TOPK_Q_ int base, int middle, int last)
{
	if (middle >= 2)
		for (int parent = (middle - 2) / 2; parent >= 0; parent--)
			topk_adjust_heap(TOPK_PASS_ base, parent, middle, q[base + parent]);
	for (int i = middle; i < last; i++)
		if (topk_before(q[base + i], q[base])) {
			Topk_Pair v = q[base + i];
			q[base + i] = q[base];
			topk_adjust_heap(TOPK_PASS_ base, 0, middle, v);
		}
}

/* std::__insertion_sort of q[first, last) */
TOPK_FN void topk_insertion_sort(TOPK_Q_ int first, int last)
{
	for (int i = first + 1; i < last; i++) {
		Topk_Pair v = q[i];
		int j = i;
		if (topk_before(v, q[first])) {
			for (; j > first; j--)
				q[j] = q[j - 1];
		} else {
			for (; topk_before(v, q[j - 1]); j--)
				q[j] = q[j - 1];
		}
		q[j] = v;
	}
}

/* std::__unguarded_partition_pivot: the median of q[first + 1], the middle and q[last - 1]
 * moved to q[first], then Hoare's partition around it; returns the cut. */
TOPK_FN int topk_partition(TOPK_Q_ int first, int last)
{
	int a = first + 1, b = first + (last - first) / 2, c = last - 1, m;
	if (topk_before(q[a], q[b]))
		m = topk_before(q[b], q[c]) ? b : topk_before(q[a], q[c]) ? c : a;
	else
		m = topk_before(q[a], q[c]) ? a : topk_before(q[b], q[c]) ? c : b;
	topk_swap(TOPK_PASS_ first, m);
	int lo = first + 1, hi = last;
	while (true) {
		while (topk_before(q[lo], q[first]))
			lo++;
		hi--;
		while (topk_before(q[first], q[hi]))
			hi--;
		if (!(lo < hi))
			return lo;
		topk_swap(TOPK_PASS_ lo, hi);
		lo++;
	}
	return lo; /* not reached */
}

/* floor(log2(n)) for n >= 1 (std::__lg) */
TOPK_FN int topk_lg(int n)
{
	int l = 0;
	while ((n >>= 1) != 0)
		l++;
	return l;
}

/* The first k pairs of q[0, n) become torch.topk's result, in its order. 1 <= k <= n. */
TOPK_FN void torch_topk(TOPK_Q_ int n, int k)
{
	if (k * 64 <= n) { /* std::partial_sort: heap select, then std::__sort_heap */
		topk_heap_select(TOPK_PASS_ 0, k, n);
		for (int last = k - 1; last > 0; last--) {
			Topk_Pair v = q[last];
			q[last] = q[0];
			topk_adjust_heap(TOPK_PASS_ 0, 0, last, v);
		}
		return;
	}
	/* std::nth_element (std::__introselect) at k - 1 */
	int first = 0, last = n, nth = k - 1, depth = 2 * topk_lg(n);
	bool heap = false;
	while (last - first > 3 && !heap) {
		if (depth == 0) {
			topk_heap_select(TOPK_PASS_ first, nth + 1 - first, last - first);
			topk_swap(TOPK_PASS_ first, nth);
			heap = true;
		} else {
			depth--;
			int cut = topk_partition(TOPK_PASS_ first, last);
			if (cut <= nth)
				first = cut;
			else
				last = cut;
		}
	}
	if (!heap)
		topk_insertion_sort(TOPK_PASS_ first, last);
	topk_insertion_sort(TOPK_PASS_ 0, k - 1); /* std::sort of the first k - 1 */
}

#endif
