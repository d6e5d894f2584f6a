#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/ops.h"

/* Collects every default op variant with the symbol names the backend library provides
 * (see ops.h), then registers natives and externals in one call each. A backend may provide
 * a subset of the default ops (cuda: add, cast, set_mem, matmul so far): an op whose launch
 * (native) or init (external) symbol its library lacks is left out; a provided op must then
 * provide every variant, or registration fails as before. */

#define MAX_VARIANTS 256
#define SYMBOL_LEN 160

typedef struct {
	int count, overflow;
	Op_Skeleton skeletons[MAX_VARIANTS];
	char names[MAX_VARIANTS][2][SYMBOL_LEN]; /* kernel or function, launch or init */
	const char *first[MAX_VARIANTS], *second[MAX_VARIANTS];
} Variant_List;

static const DataflowDatatype float_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16, DATAFLOW_FP8E4M3,
						DATAFLOW_FP8E5M2};

static void add_variant(Variant_List *v, const Op_Skeleton *s, const char *backend, const char *variant,
			const char *second_suffix)
{
	if (v->count == MAX_VARIANTS) {
		v->overflow = 1;
		return;
	}
	int i = v->count++;
	v->skeletons[i] = *s;
	if (variant)
		snprintf(v->names[i][0], SYMBOL_LEN, "dataflow_%s_%s_%s", backend, s->nickname, variant);
	else
		snprintf(v->names[i][0], SYMBOL_LEN, "dataflow_%s_%s", backend, s->nickname);
	snprintf(v->names[i][1], SYMBOL_LEN, "dataflow_%s_%s_%s", backend, s->nickname, second_suffix);
	v->first[i] = v->names[i][0];
	v->second[i] = v->names[i][1];
}

/* Drops the variants whose second symbol (launch or init) lib does not export. */
static void keep_provided(Variant_List *v, void *lib)
{
	int kept = 0;
	for (int i = 0; i < v->count; i++) {
		if (!dlsym(lib, v->names[i][1]))
			continue;
		if (kept != i) {
			v->skeletons[kept] = v->skeletons[i];
			memcpy(v->names[kept], v->names[i], sizeof(v->names[i]));
		}
		v->first[kept] = v->names[kept][0];
		v->second[kept] = v->names[kept][1];
		kept++;
	}
	v->count = kept;
}

Dataflow_Status dataflow_register_default_ops(Dataflow_Handle *handle)
{
	if (!handle)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register_default_ops: handle is NULL");
	const char *library = dataflow_handle_default_ops_library(handle);
	if (!library)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "register_default_ops: backend '%s' names no default ops library",
					  dataflow_handle_backend_name(handle));
	Variant_List *nat = calloc(1, sizeof(*nat)), *ext = calloc(1, sizeof(*ext));
	if (!nat || !ext) {
		free(nat);
		free(ext);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register_default_ops: no memory");
	}
	const char *b = dataflow_handle_backend_name(handle);
	Op_Skeleton s;

	for (int i = 0; i < 3; i++) {
		DataflowDatatype in = float_dtypes[i];
		dataflow_matmul_skeleton(&s, in, DATAFLOW_FP32);
		add_variant(ext, &s, b, NULL, "init");
		if (in != DATAFLOW_FP32) {
			dataflow_matmul_skeleton(&s, in, in);
			add_variant(ext, &s, b, NULL, "init");
		}
		const char *name = dataflow_datatype_name(in);
		dataflow_add_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_set_mem_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_rope_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_rope_bwd_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		for (int k = 0; k < 2; k++) {
			DataflowDatatype id = k ? DATAFLOW_INT64 : DATAFLOW_INT32;
			char variant[48];
			snprintf(variant, sizeof(variant), "%s_%s", name, dataflow_datatype_name(id));
			dataflow_embedding_skeleton(&s, id, in);
			add_variant(nat, &s, b, variant, "launch");
			snprintf(variant, sizeof(variant), "%s_%s_fp32", name, dataflow_datatype_name(id));
			dataflow_embedding_bwd_w_skeleton(&s, id, in, DATAFLOW_FP32);
			add_variant(nat, &s, b, variant, "launch");
		}
		dataflow_cross_entropy_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_attention_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_attention_kv_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_attention_bwd_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_attention_bwd_delta_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_rms_norm_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_rms_norm_bwd_x_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_rms_norm_bwd_w_partials_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_rms_norm_bwd_w_reduce_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_swiglu_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
		dataflow_swiglu_bwd_skeleton(&s, in);
		add_variant(nat, &s, b, name, "launch");
	}
	for (int i = 0; i < 5; i++) {
		for (int j = 0; j < 5; j++) {
			if (i == j)
				continue;
			char variant[48];
			snprintf(variant, sizeof(variant), "%s_to_%s", dataflow_datatype_name(float_dtypes[i]),
				 dataflow_datatype_name(float_dtypes[j]));
			dataflow_cast_skeleton(&s, float_dtypes[i], float_dtypes[j]);
			add_variant(nat, &s, b, variant, "launch");
		}
	}

	static const DataflowDatatype opt_dtypes[] = {DATAFLOW_FP32, DATAFLOW_BF16};
	static const DataflowDatatype sum_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP64};
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 2; j++) {
			char variant[48];
			snprintf(variant, sizeof(variant), "%s_%s", dataflow_datatype_name(opt_dtypes[i]),
				 dataflow_datatype_name(opt_dtypes[j]));
			dataflow_adamw_step_skeleton(&s, opt_dtypes[i], opt_dtypes[j]);
			add_variant(nat, &s, b, variant, "launch");
		}
		dataflow_grad_norm_sq_partials_skeleton(&s, opt_dtypes[i]);
		add_variant(nat, &s, b, dataflow_datatype_name(opt_dtypes[i]), "launch");
		dataflow_grad_norm_sq_reduce_skeleton(&s, sum_dtypes[i]);
		add_variant(nat, &s, b, dataflow_datatype_name(sum_dtypes[i]), "launch");
		dataflow_clip_by_global_norm_skeleton(&s, sum_dtypes[i]);
		add_variant(nat, &s, b, dataflow_datatype_name(sum_dtypes[i]), "launch");
	}

	Dataflow_Status st = DATAFLOW_OK;
	if (nat->overflow || ext->overflow)
		st = dataflow_set_error(DATAFLOW_ERR_INTERNAL, "register_default_ops: more than %d variants; raise MAX_VARIANTS",
					MAX_VARIANTS);
	void *lib = st == DATAFLOW_OK ? dlopen(library, RTLD_NOW | RTLD_LOCAL) : NULL;
	if (st == DATAFLOW_OK && !lib)
		st = dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register_default_ops: cannot load %s: %s",
					library, dlerror());
	if (lib) {
		keep_provided(nat, lib);
		keep_provided(ext, lib);
		dlclose(lib);
	}
	if (st == DATAFLOW_OK && nat->count)
		st = dataflow_register_native_code(handle, library, NULL, nat->count, nat->skeletons,
						  nat->first, nat->second, NULL, 0);
	if (st == DATAFLOW_OK && ext->count)
		st = dataflow_register_external_code(handle, library, ext->count, ext->skeletons,
						    ext->first, ext->second, 0);
	free(nat);
	free(ext);
	return st;
}
