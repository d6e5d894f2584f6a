/* Host matmul on oneDNN (the 2.x C API of Debian's libdnnl-dev, or the 3.x API of pip's
 * onednn-cpu-gomp wheel; the few calls that differ are marked ONEDNN_V3):
 *
 *   D = alpha * op(A) @ op(B) + beta * D_in,  D_in = C (copied into D first when C != D)
 *
 * alpha is the primitive's output scale (2.x; in 3.x, which dropped output scales, an eltwise
 * linear post-op: the same fp32 product), beta a sum post-op (which reads D before writing
 * it), transposes are strides on plain 2-D memory descriptors, and fpmath mode is strict so
 * fp32 stays fp32; oneDNN accumulates bf16 products in fp32. Primitives are cached per
 * (M, N, K, transposes, dtypes, alpha, beta), including "unimplemented" (fp16 without
 * AVX512-FP16), so the caller can fall back without asking oneDNN again.
 *
 * Threads: the Debian build uses the OpenMP CPU runtime (DNNL_CPU_RUNTIME == OMP, libgomp),
 * so each calling stream worker is an OpenMP initial thread with its own team, sized here to
 * the handle's thread count before each execution. Streams that run matmuls concurrently
 * each bring a full team, oversubscribing the cores.
 *
 * Concurrency: the cache is guarded by a mutex (primitives are created outside it); each
 * stream id owns a oneDNN stream and a user-mode scratchpad, so concurrent executions of one
 * primitive never share scratch memory. */

#ifdef DATAFLOW_HAVE_ONEDNN

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>
#include <dnnl_debug.h>
#include <dnnl_version.h>
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

/* 3.x memory descriptors are handles created and destroyed by the library; 2.x ones are structs. */
#define ONEDNN_V3 (DNNL_VERSION_MAJOR >= 3)
#if ONEDNN_V3
typedef const_dnnl_memory_desc_t Md_Ref;
#define MD(md) (md)
#else
typedef const dnnl_memory_desc_t *Md_Ref;
#define MD(md) (&(md))
#endif

#include "dataflow/handle.h"
#include "matmul.h"

/* Everything that selects a primitive; no padding, so it compares with memcmp. */
typedef struct {
	int64_t M, N, K; /* DNNL_RUNTIME_DIM_VAL for M and K when Matmul_Args.runtime_mk */
	int32_t trans_a, trans_b, in_dtype, out_dtype;
	float alpha, beta;
} Key;

typedef struct Entry {
	struct Entry *next;
	Key key;
	dnnl_primitive_t primitive; /* NULL: oneDNN has no implementation, use the fallback */
	dnnl_memory_desc_t src_md, weights_md, dst_md, scratchpad_md; /* 3.x: scratchpad_md NULL when none */
} Entry;

typedef struct {
	dnnl_stream_t stream;
	void *scratchpad;
	size_t scratchpad_bytes;
} Stream_Slot;

struct Matmul_Onednn {
	dnnl_engine_t engine;
	pthread_mutex_t lock; /* guards entries */
	Entry *entries;
	Stream_Slot slots[DATAFLOW_MAX_STREAMS]; /* each touched only by its stream's worker */
};

static Dataflow_Status onednn_error(dnnl_status_t s, const char *what)
{
	return dataflow_set_error(s == dnnl_out_of_memory ? DATAFLOW_ERR_OUT_OF_MEMORY : DATAFLOW_ERR_BACKEND,
				  "host matmul: oneDNN %s failed: %s", what, dnnl_status2str(s));
}

static dnnl_data_type_t onednn_dtype(int32_t dtype)
{
	return dtype == DATAFLOW_BF16 ? dnnl_bf16 : dtype == DATAFLOW_FP16 ? dnnl_f16 : dnnl_f32;
}

/* Row-major rows x cols matrix, or its transpose in storage when trans is set; a dimension may
 * be DNNL_RUNTIME_DIM_VAL (so is then the stride it sets). */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, int32_t dtype)
{
	dnnl_dims_t dims = {rows, cols};
	dnnl_dims_t strides = {trans ? 1 : cols, trans ? rows : 1};
#if ONEDNN_V3
	return dnnl_memory_desc_create_with_strides(md, 2, dims, onednn_dtype(dtype), strides);
#else
	return dnnl_memory_desc_init_by_strides(md, 2, dims, onednn_dtype(dtype), strides);
#endif
}

/* Builds e->primitive for e->key; leaves it NULL when oneDNN has no implementation. */
static Dataflow_Status entry_build(Matmul_Onednn *o, Entry *e)
{
	const Key *k = &e->key;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t post_ops = NULL;
	dnnl_primitive_desc_t pd = NULL;
	const char *what = "memory descriptor setup";
	dnnl_status_t s;
	if ((s = matrix_md(&e->src_md, k->M, k->K, k->trans_a, k->in_dtype)) != dnnl_success ||
	    (s = matrix_md(&e->weights_md, k->K, k->N, k->trans_b, k->in_dtype)) != dnnl_success ||
	    (s = matrix_md(&e->dst_md, k->M, k->N, 0, k->out_dtype)) != dnnl_success)
		goto done;
	what = "matmul setup";
	if ((s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
	    (s = dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_strict)) != dnnl_success ||
	    (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success ||
	    (s = dnnl_post_ops_create(&post_ops)) != dnnl_success)
		goto done;
#if ONEDNN_V3
	if (k->alpha != 1.0f &&
	    (s = dnnl_post_ops_append_eltwise(post_ops, dnnl_eltwise_linear, k->alpha, 0.0f)) != dnnl_success)
		goto done;
	if (k->beta != 0.0f && (s = dnnl_post_ops_append_sum(post_ops, k->beta, 0, dnnl_data_type_undef)) != dnnl_success)
		goto done;
#else
	if (k->alpha != 1.0f && (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha)) != dnnl_success)
		goto done;
	if (k->beta != 0.0f && (s = dnnl_post_ops_append_sum(post_ops, k->beta)) != dnnl_success)
		goto done;
#endif
	if ((s = dnnl_primitive_attr_set_post_ops(attr, post_ops)) != dnnl_success)
		goto done;
	what = "primitive descriptor creation";
#if ONEDNN_V3
	s = dnnl_matmul_primitive_desc_create(&pd, o->engine, e->src_md, e->weights_md, NULL, e->dst_md, attr);
#else
	dnnl_matmul_desc_t desc;
	if ((s = dnnl_matmul_desc_init(&desc, &e->src_md, &e->weights_md, NULL, &e->dst_md)) == dnnl_success)
		s = dnnl_primitive_desc_create(&pd, &desc, attr, o->engine, NULL);
#endif
	if (s == dnnl_unimplemented) {
		s = dnnl_success;
		goto done;
	}
	if (s != dnnl_success)
		goto done;
	what = "scratchpad query";
	Md_Ref scratchpad_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
#if ONEDNN_V3
	if (scratchpad_md && dnnl_memory_desc_get_size(scratchpad_md) > 0 &&
	    (s = dnnl_memory_desc_clone(&e->scratchpad_md, scratchpad_md)) != dnnl_success)
		goto done;
#else
	if (scratchpad_md) /* else none is needed: the zeroed descriptor has size 0 */
		e->scratchpad_md = *scratchpad_md;
#endif
	what = "primitive creation";
	s = dnnl_primitive_create(&e->primitive, pd);
done:
	dnnl_primitive_desc_destroy(pd);
	dnnl_post_ops_destroy(post_ops);
	dnnl_primitive_attr_destroy(attr);
	return s == dnnl_success ? DATAFLOW_OK : onednn_error(s, what);
}

static Entry *entry_find(Matmul_Onednn *o, const Key *key)
{
	for (Entry *e = o->entries; e; e = e->next)
		if (memcmp(&e->key, key, sizeof(*key)) == 0)
			return e;
	return NULL;
}

static void entry_free(Entry *e)
{
	dnnl_primitive_destroy(e->primitive);
#if ONEDNN_V3
	dnnl_memory_desc_t mds[4] = {e->src_md, e->weights_md, e->dst_md, e->scratchpad_md};
	for (int i = 0; i < 4; i++)
		if (mds[i])
			dnnl_memory_desc_destroy(mds[i]);
#endif
	free(e);
}

/* The cached entry for key, built on first use. */
static Dataflow_Status entry_get(Matmul_Onednn *o, const Key *key, Entry **entry)
{
	pthread_mutex_lock(&o->lock);
	*entry = entry_find(o, key);
	pthread_mutex_unlock(&o->lock);
	if (*entry)
		return DATAFLOW_OK;

	/* Built outside the lock (milliseconds); a racing stream may insert the same key. */
	Entry *e = calloc(1, sizeof(*e));
	if (!e)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host matmul: out of host memory");
	e->key = *key;
	Dataflow_Status st = entry_build(o, e);
	if (st != DATAFLOW_OK) {
		entry_free(e);
		return st;
	}
	pthread_mutex_lock(&o->lock);
	*entry = entry_find(o, key);
	if (*entry) {
		entry_free(e);
	} else {
		e->next = o->entries;
		o->entries = *entry = e;
	}
	pthread_mutex_unlock(&o->lock);
	return DATAFLOW_OK;
}

/* The stream's oneDNN stream and a scratchpad of at least `bytes`, made on first use. */
static Dataflow_Status slot_prepare(Matmul_Onednn *o, Stream_Slot *slot, size_t bytes)
{
	dnnl_status_t s;
	if (!slot->stream && (s = dnnl_stream_create(&slot->stream, o->engine, dnnl_stream_default_flags)) != dnnl_success)
		return onednn_error(s, "stream creation");
	if (bytes > slot->scratchpad_bytes) {
		free(slot->scratchpad);
		slot->scratchpad_bytes = 0;
		slot->scratchpad = aligned_alloc(64, (bytes + 63) / 64 * 64);
		if (!slot->scratchpad)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
						  "host matmul: cannot allocate a %zu-byte oneDNN scratchpad", bytes);
		slot->scratchpad_bytes = bytes;
	}
	return DATAFLOW_OK;
}

Dataflow_Status matmul_onednn_run(Matmul_Onednn *o, int stream_id, const Matmul_Args *x)
{
	if (stream_id < 0 || stream_id >= DATAFLOW_MAX_STREAMS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "host matmul: stream id %d outside [0, %d)",
					  stream_id, DATAFLOW_MAX_STREAMS);
	Key key = {x->runtime_mk ? DNNL_RUNTIME_DIM_VAL : x->M, x->N, x->runtime_mk ? DNNL_RUNTIME_DIM_VAL : x->K,
		   x->trans_a, x->trans_b, x->in_dtype, x->out_dtype, x->alpha, x->beta};
	Entry *e;
	Dataflow_Status st = entry_get(o, &key, &e);
	if (st != DATAFLOW_OK)
		return st;
	if (!e->primitive)
		return DATAFLOW_ERR_UNSUPPORTED;
	Stream_Slot *slot = &o->slots[stream_id];
#if ONEDNN_V3
	size_t scratchpad_bytes = e->scratchpad_md ? dnnl_memory_desc_get_size(e->scratchpad_md) : 0;
#else
	size_t scratchpad_bytes = dnnl_memory_desc_get_size(&e->scratchpad_md);
#endif
	if ((st = slot_prepare(o, slot, scratchpad_bytes)) != DATAFLOW_OK)
		return st;

	/* The sum post-op accumulates into D, so D must hold C first. */
	if (x->beta != 0.0f && x->C != x->D)
		memcpy(x->D, x->C, (size_t)(x->M * x->N) * dataflow_datatype_size(x->out_dtype));

	/* oneDNN takes non-const handles but only reads A and B; no scratchpad argument when none is needed. */
	Md_Ref mds[4] = {MD(e->src_md), MD(e->weights_md), MD(e->dst_md), MD(e->scratchpad_md)};
	/* A runtime-dimension primitive runs on memory of this call's dimensions (src, weights, dst). */
	const int64_t rows[3] = {x->M, x->K, x->M}, cols[3] = {x->K, x->N, x->N};
	const int trans[3] = {x->trans_a, x->trans_b, 0};
	const int32_t dtypes[3] = {x->in_dtype, x->in_dtype, x->out_dtype};
	dnnl_memory_desc_t call_mds[3];
	int concrete = 0; /* call_mds made */
	dnnl_status_t s = dnnl_success;
	while (x->runtime_mk && concrete < 3 &&
	       (s = matrix_md(&call_mds[concrete], rows[concrete], cols[concrete], trans[concrete], dtypes[concrete])) ==
		       dnnl_success) {
		mds[concrete] = MD(call_mds[concrete]);
		concrete++;
	}
	void *ptrs[4] = {(void *)x->A, (void *)x->B, x->D, slot->scratchpad};
	const int arg_ids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
	const int num_args = scratchpad_bytes ? 4 : 3;
	dnnl_exec_arg_t args[4];
	int made = 0;
	const char *what = s != dnnl_success ? "memory descriptor setup" : "memory creation";
	for (; made < num_args && s == dnnl_success; made++) {
		s = dnnl_memory_create(&args[made].memory, mds[made], o->engine, ptrs[made]);
		args[made].arg = arg_ids[made];
	}
	if (s == dnnl_success) {
		what = "matmul execution";
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
		omp_set_num_threads(x->num_threads); /* this worker's OpenMP team: the handle's thread count */
#endif
		s = dnnl_primitive_execute(e->primitive, slot->stream, num_args, args);
		if (s == dnnl_success)
			s = dnnl_stream_wait(slot->stream);
	}
	for (int i = 0; i < made; i++)
		dnnl_memory_destroy(args[i].memory);
#if ONEDNN_V3
	for (int i = 0; i < concrete; i++)
		dnnl_memory_desc_destroy(call_mds[i]);
#endif
	return s == dnnl_success ? DATAFLOW_OK : onednn_error(s, what);
}

Dataflow_Status matmul_onednn_create(Matmul_Onednn **onednn)
{
	Matmul_Onednn *o = calloc(1, sizeof(*o));
	if (!o)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host matmul: out of host memory");
	dnnl_status_t s = dnnl_engine_create(&o->engine, dnnl_cpu, 0);
	if (s != dnnl_success) {
		free(o);
		return onednn_error(s, "CPU engine creation");
	}
	pthread_mutex_init(&o->lock, NULL);
	*onednn = o;
	return DATAFLOW_OK;
}

const char *dataflow_host_onednn_isa(void)
{
	return dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
}

void matmul_onednn_destroy(Matmul_Onednn *o)
{
	if (!o)
		return;
	while (o->entries) {
		Entry *e = o->entries;
		o->entries = e->next;
		entry_free(e);
	}
	for (int i = 0; i < DATAFLOW_MAX_STREAMS; i++) {
		if (o->slots[i].stream)
			dnnl_stream_destroy(o->slots[i].stream);
		free(o->slots[i].scratchpad);
	}
	pthread_mutex_destroy(&o->lock);
	dnnl_engine_destroy(o->engine);
	free(o);
}

#else

const char *dataflow_host_onednn_isa(void)
{
	return "";
}

#endif
