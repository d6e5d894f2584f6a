/* Layouts of the buffers the per-block calls carve: a block's activations (split into the part
 * a save level keeps and the part it recomputes), its dacts and a call's workspace. Each array
 * starts at a multiple of 64 bytes; a layout depends only on the model, the level and T. */
#include <string.h>

#include "blocked_internal.h"

typedef struct {
	int64_t per_token;  /* bytes per token */
	int64_t fixed;      /* bytes independent of T */
	int min_level;      /* saved from this level up (activations only) */
} Array_Spec;

static int64_t align64(int64_t n)
{
	return (n + 63) / 64 * 64;
}

/* The arrays of a block's activations, in carving order (enum ACT_* / HEAD_*). */
static int acts_specs(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, Array_Spec *spec)
{
	const Dataflow_Llama_Config *c = &m->config;
	int64_t es = llama_dtype_size(c->dtype), H = c->hidden_size, F = c->intermediate_size;
	int64_t qd = c->num_heads * c->head_dim, kvd = c->num_kv_heads * c->head_dim;
	if (role == DATAFLOW_BLOCK_HEAD) {
		spec[HEAD_XNF] = (Array_Spec){H * es, 0, DATAFLOW_SAVE_INPUT};
		spec[HEAD_RSTD] = (Array_Spec){4, 0, DATAFLOW_SAVE_INPUT};
		spec[HEAD_LOGITS] = (Array_Spec){c->vocab_size * es, 0, DATAFLOW_SAVE_INPUT};
		return HEAD_ACTS;
	}
	if (role != DATAFLOW_BLOCK_LAYER)
		return 0;
	int64_t qkn = c->qk_norm != 0, E = c->num_experts, k = E ? c->num_experts_per_tok : 0;
	if (E) /* the feed-forward's rows: T * top-k routed ones */
		F = k * c->moe_intermediate_size;
	const int64_t per_token[LAYER_ACTS] = {
		[ACT_ATT] = qd * es, [ACT_LSE] = c->num_heads * 4, [ACT_XN1] = H * es,   [ACT_Q] = qd * es,
		[ACT_K] = kvd * es,  [ACT_V] = kvd * es,          [ACT_HMID] = H * es,   [ACT_XN2] = H * es,
		[ACT_GATE] = F * es, [ACT_UP] = F * es,           [ACT_RSTD1] = 4,       [ACT_RSTD2] = 4,
		[ACT_QPRE] = qkn * qd * es, [ACT_KPRE] = qkn * kvd * es, [ACT_RSTDQ] = qkn * c->num_heads * 4,
		[ACT_RSTDK] = qkn * c->num_kv_heads * 4, [ACT_RLOGITS] = E * 4, [ACT_PROBS] = E * 4,
		[ACT_TOPW] = k * 4,  [ACT_TOPI] = k * 4,          [ACT_ROWS] = k * 4,    [ACT_SLOTS] = k * 4,
		[ACT_XPERM] = k * H * es,
		[ACT_YPERM] = k * H * es};
	for (int i = 0; i < LAYER_ACTS; i++)
		spec[i] = (Array_Spec){per_token[i], 0, i <= ACT_LSE ? DATAFLOW_SAVE_ATTENTION : DATAFLOW_SAVE_ALL};
	spec[ACT_OFFSETS].fixed = E ? (E + 1) * 4 : 0;
	return LAYER_ACTS;
}

static int dacts_specs(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, Array_Spec *spec)
{
	const Dataflow_Llama_Config *c = &m->config;
	int64_t es = llama_dtype_size(c->dtype), H = c->hidden_size, F = c->intermediate_size;
	int64_t qd = c->num_heads * c->head_dim, kvd = c->num_kv_heads * c->head_dim;
	if (role == DATAFLOW_BLOCK_HEAD) {
		spec[HEAD_DXN] = (Array_Spec){H * es, 0, 0};
		return 1;
	}
	if (role != DATAFLOW_BLOCK_LAYER)
		return 0;
	int64_t qkn = c->qk_norm != 0, E = c->num_experts, k = E ? c->num_experts_per_tok : 0;
	if (E)
		F = k * c->moe_intermediate_size;
	const int64_t per_token[LAYER_DACTS] = {[DA_DXN2] = H * es, [DA_DGATE] = F * es, [DA_DUP] = F * es,
						[DA_DMID] = H * es, [DA_DQ] = qd * es,   [DA_DK] = kvd * es,
						[DA_DV] = kvd * es, [DA_DXN1] = H * es,  [DA_DQN] = qkn * qd * es,
						[DA_DKN] = qkn * kvd * es, [DA_DXPERM] = k * H * es,
						[DA_DYPERM] = k * H * es,  [DA_DLOGITS] = E * 4, [DA_DTOPW] = k * 4};
	for (int i = 0; i < LAYER_DACTS; i++)
		spec[i] = (Array_Spec){per_token[i], 0, 0};
	return LAYER_DACTS;
}

/* Carves spec[0..n) for T tokens: arrays saved at `level` from *saved, the others from
 * *recomputed (NULL bases: sizes only). */
static void carve(const Array_Spec *spec, int n, int level, int64_t T, void *saved, void *recomputed, void **ptrs,
		  int64_t *saved_bytes, int64_t *recomputed_bytes)
{
	int64_t used[2] = {0, 0};
	char *base[2] = {saved, recomputed};
	for (int i = 0; i < n; i++) {
		int which = level >= spec[i].min_level ? 0 : 1;
		if (ptrs)
			ptrs[i] = base[which] ? base[which] + used[which] : NULL;
		used[which] += align64(spec[i].per_token * T + spec[i].fixed);
	}
	if (saved_bytes)
		*saved_bytes = used[0];
	if (recomputed_bytes)
		*recomputed_bytes = used[1];
}

static int64_t per_token_sum(const Array_Spec *spec, int n, int level, int saved)
{
	int64_t sum = 0;
	for (int i = 0; i < n; i++)
		if ((level >= spec[i].min_level) == saved)
			sum += spec[i].per_token;
	return sum;
}

void llama_acts_layout(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, Dataflow_Save_Level level,
		       int64_t T, void *saved, void *recomputed, void **acts, int64_t *saved_bytes,
		       int64_t *recomputed_bytes)
{
	Array_Spec spec[LLAMA_MAX_ACTS] = {{0}};
	int n = acts_specs(m, role, spec);
	carve(spec, n, level, T, saved, recomputed, acts, saved_bytes, recomputed_bytes);
}

int64_t llama_dacts_layout(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, int64_t T, void *base,
			   void **dacts)
{
	Array_Spec spec[LAYER_DACTS] = {{0}};
	int64_t bytes;
	carve(spec, dacts_specs(m, role, spec), 0, T, base, NULL, dacts, &bytes, NULL);
	return bytes;
}

int64_t llama_workspace_layout(const Dataflow_Blocked_Model *m, int64_t T, void *base, void **ws)
{
	const Dataflow_Llama_Config *c = &m->config;
	int64_t es = llama_dtype_size(c->dtype), H = c->hidden_size, hd = c->head_dim;
	int64_t largest = m->layer_numel > m->embed_numel ? m->layer_numel : m->embed_numel;
	if (m->head_numel > largest)
		largest = m->head_numel;
	Array_Spec spec[WS_COUNT] = {[WS_GRAD_NORM] = {0, dataflow_grad_norm_sq_workspace_bytes(largest), 0}};
	int n = 1;
	if (T > 0) {
		int64_t attn = dataflow_attention_bwd_workspace_bytes(T, T, c->num_heads, c->num_kv_heads, hd);
		int64_t ffn = c->num_experts ? c->num_experts_per_tok * c->moe_intermediate_size : c->intermediate_size;
		spec[WS_ACT] = (Array_Spec){ffn * es, 0, 0};
		spec[WS_DTMP] = (Array_Spec){H * es, 0, 0};
		spec[WS_DATT] = (Array_Spec){c->num_heads * hd * es, 0, 0};
		/* norm weight gradients: the layer norms (rows T, width H) and, with qk_norm, the
		 * per-head norms (rows up to T * num_heads, width head_dim) */
		int64_t rms = dataflow_rms_norm_bwd_w_workspace_bytes(T, H);
		int64_t rms_heads = c->qk_norm ? dataflow_rms_norm_bwd_w_workspace_bytes(T * c->num_heads, hd) : 0;
		int has_bias = c->qkv_bias || c->o_bias;
		spec[WS_DW] = (Array_Spec){0, (c->qk_norm && hd > H ? hd : H) * 4, 0};
		spec[WS_RMS] = (Array_Spec){0, rms > rms_heads ? rms : rms_heads, 0};
		spec[WS_ONES] = (Array_Spec){has_bias ? es : 0, 0, 0};
		int64_t experts = c->num_experts;
		spec[WS_EXPERT_TMP] = (Array_Spec){experts ? c->num_experts_per_tok * H * es : 0, 0, 0};
		spec[WS_ROUTER] = (Array_Spec){experts * es, 0, 0};
		/* attention's backward workspace for up to T documents (the most a chunk holds) */
		spec[WS_ATTN] = (Array_Spec){0, attn > 0 ? attn : 0, 0};
		n = WS_COUNT;
	}
	int64_t bytes;
	carve(spec, n, 0, T, base, NULL, ws, &bytes, NULL);
	return bytes;
}

Dataflow_Status dataflow_block_acts_bytes(const Dataflow_Blocked_Model *m, int block, Dataflow_Save_Level level,
					  int64_t num_tokens, int64_t *saved, int64_t *recomputed, int64_t *dacts)
{
	if (saved)
		*saved = -1;
	if (recomputed)
		*recomputed = -1;
	if (dacts)
		*dacts = -1;
	if (!m || block < 0 || block >= m->num_blocks || (int)level < 0 || level >= DATAFLOW_NUM_SAVE_LEVELS ||
	    num_tokens <= 0 || num_tokens > ((int64_t)1 << 31))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "block acts_bytes: need a model, block in [0, %d), level in [0, %d) and "
					  "num_tokens in [1, 2^31]; got block %d, level %d, num_tokens %lld",
					  m ? m->num_blocks : 0, DATAFLOW_NUM_SAVE_LEVELS, block, (int)level,
					  (long long)num_tokens);
	Dataflow_Block_Role role = llama_block_role(m, block);
	llama_acts_layout(m, role, level, num_tokens, NULL, NULL, NULL, saved, recomputed);
	if (dacts)
		*dacts = llama_dacts_layout(m, role, num_tokens, NULL, NULL);
	return DATAFLOW_OK;
}

int64_t dataflow_blocked_model_workspace_bytes(const Dataflow_Blocked_Model *m, int64_t num_tokens)
{
	if (!m || num_tokens < 0 || num_tokens > ((int64_t)1 << 31))
		return -1;
	return llama_workspace_layout(m, num_tokens, NULL, NULL);
}

void llama_acts_per_token(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, Dataflow_Block_Sizes *sizes)
{
	Array_Spec spec[LLAMA_MAX_ACTS] = {{0}};
	int n = acts_specs(m, role, spec);
	for (int level = 0; level < DATAFLOW_NUM_SAVE_LEVELS; level++) {
		sizes->saved_bytes_per_token[level] = per_token_sum(spec, n, level, 1);
		sizes->recomputed_bytes_per_token[level] = per_token_sum(spec, n, level, 0);
	}
	n = dacts_specs(m, role, spec);
	sizes->dacts_bytes_per_token = per_token_sum(spec, n, 0, 1);
}
