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
 * One text for the host kernels (C) and the CUDA kernels (embedded for NVRTC, hence .cuh), so
 * both backends order ties alike: plain int indices (n <= DATAFLOW_MOE_MAX_EXPERTS). */

#ifdef __CUDACC__
#define TOPK_FN __device__ static inline
#else
#include <math.h>
#define TOPK_FN static inline
#endif

typedef struct {
	float value;
	int index;
} Topk_Pair;

TOPK_FN int topk_before(Topk_Pair x, Topk_Pair y)
{
	return (isnan(x.value) && !isnan(y.value)) || x.value > y.value;
}

TOPK_FN void topk_swap(Topk_Pair *q, int a, int b)
{
	Topk_Pair t = q[a];
	q[a] = q[b];
	q[b] = t;
}

/* std::__adjust_heap then std::__push_heap: value sinks from hole into the heap q[0, len). */
TOPK_FN void topk_adjust_heap(Topk_Pair *q, int hole, int len, Topk_Pair value)
{
	int top = hole, child = hole;
	while (child < (len - 1) / 2) {
		child = 2 * (child + 1);
		if (topk_before(q[child], q[child - 1]))
			child--;
		q[hole] = q[child];
		hole = child;
	}
	if ((len & 1) == 0 && child == (len - 2) / 2) {
		child = 2 * (child + 1);
		q[hole] = q[child - 1];
		hole = child - 1;
	}
	for (int parent = (hole - 1) / 2; hole > top && topk_before(q[parent], value); parent = (hole - 1) / 2) {
		q[hole] = q[parent];
		hole = parent;
	}
	q[hole] = value;
}

/* std::__heap_select: q[0, middle) becomes a heap of the middle "largest" of q[0, last). */
TOPK_FN void topk_heap_select(Topk_Pair *q, int middle, int last)
{
	if (middle >= 2)
		for (int parent = (middle - 2) / 2;; parent--) {
			topk_adjust_heap(q, parent, middle, q[parent]);
			if (parent == 0)
				break;
		}
	for (int i = middle; i < last; i++)
		if (topk_before(q[i], q[0])) {
			Topk_Pair v = q[i];
			q[i] = q[0];
			topk_adjust_heap(q, 0, middle, v);
		}
}

/* std::__insertion_sort of q[first, last) */
TOPK_FN void topk_insertion_sort(Topk_Pair *q, int first, int last)
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
TOPK_FN int topk_partition(Topk_Pair *q, int first, int last)
{
	int a = first + 1, b = first + (last - first) / 2, c = last - 1, m;
	if (topk_before(q[a], q[b]))
		m = topk_before(q[b], q[c]) ? b : topk_before(q[a], q[c]) ? c : a;
	else
		m = topk_before(q[a], q[c]) ? a : topk_before(q[b], q[c]) ? c : b;
	topk_swap(q, first, m);
	int lo = first + 1, hi = last;
	for (;;) {
		while (topk_before(q[lo], q[first]))
			lo++;
		hi--;
		while (topk_before(q[first], q[hi]))
			hi--;
		if (!(lo < hi))
			return lo;
		topk_swap(q, lo, hi);
		lo++;
	}
}

/* floor(log2(n)) for n >= 1 (std::__lg) */
TOPK_FN int topk_lg(int n)
{
	int l = 0;
	while (n >>= 1)
		l++;
	return l;
}

/* The first k pairs of q[0, n) become torch.topk's result, in its order. 1 <= k <= n. */
TOPK_FN void torch_topk(Topk_Pair *q, int n, int k)
{
	if (k * 64 <= n) { /* std::partial_sort: heap select, then std::__sort_heap */
		topk_heap_select(q, k, n);
		for (int last = k - 1; last > 0; last--) {
			Topk_Pair v = q[last];
			q[last] = q[0];
			topk_adjust_heap(q, 0, last, v);
		}
		return;
	}
	/* std::nth_element (std::__introselect) at k - 1 */
	int first = 0, last = n, nth = k - 1, depth = 2 * topk_lg(n);
	while (last - first > 3) {
		if (depth == 0) {
			topk_heap_select(q + first, nth + 1 - first, last - first);
			topk_swap(q, first, nth);
			break;
		}
		depth--;
		int cut = topk_partition(q, first, last);
		if (cut <= nth)
			first = cut;
		else
			last = cut;
	}
	if (last - first <= 3)
		topk_insertion_sort(q, first, last);
	topk_insertion_sort(q, 0, k - 1); /* std::sort of the first k - 1 */
}

#endif
