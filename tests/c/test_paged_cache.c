/* C-level check of the paged KV cache and the batch sampler through the public API (run under
 * ASan+UBSan by tests/c/test_c_api.py): sequences join and take pages as they grow, a step of
 * ragged sequences runs (zero weights: every logit is exactly 0), an exhausted pool fails
 * clearly and changes nothing, pages come back when sequences are freed; the sampler's greedy
 * choice, seeded draws and errors. tests/models/test_batch_engine.py and tests/ops/test_sampling.py check
 * the numbers against references. */
#include <math.h>

#include "c_test.h"
#include "tiny_llama.h"
#include "dataflow/models.h"
#include "dataflow/ops.h"
#include "dataflow/sampling.h"

static void expect_error(Dataflow_Status st, Dataflow_Status want, const char *part)
{
	Outcome o;
	outcome_keep(&o, st);
	expect_outcome(__FILE__, __LINE__, &o, want, part);
}

int main(void)
{
	Dataflow_Handle *h = open_host(1, 256u << 20, NULL);
	CHECK(dataflow_register_default_ops(h));
	Dataflow_Llama_Config c = tiny_llama_config();
	Dataflow_Llama *m;
	CHECK(dataflow_llama_create(h, &c, &m));
	Dataflow_Llama_Paged_Cache *pc;
	expect_error(dataflow_llama_paged_cache_create(m, 0, 4, 2, 16, 16, &pc), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "num_pages must be in [1,");
	CHECK(dataflow_llama_paged_cache_create(m, 5, 4, 2, 16, 16, &pc));
	int64_t s0, s1, s2;
	CHECK(dataflow_llama_paged_cache_add_sequence(pc, &s0));
	CHECK(dataflow_llama_paged_cache_add_sequence(pc, &s1));
	expect_error(dataflow_llama_paged_cache_add_sequence(pc, &s2), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "all 2 sequences (max_seqs) are alive");

	float *logits;
	CHECK(dataflow_alloc_mem(h, 2 * 37 * 4, (void **)&logits));
	int32_t tokens[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
	int64_t seqs[2] = {s1, s0}, news[2] = {6, 3};
	CHECK(dataflow_llama_forward_paged(m, 0, pc, 2, seqs, news, tokens, logits));
	float host[2 * 37];
	CHECK(dataflow_submit_outbound_transfer(h, 0, host, logits, sizeof(host)));
	CHECK(dataflow_sync_stream(h, 0));
	for (int i = 0; i < 2 * 37; i++)
		EXPECT(host[i] == 0.0f);
	EXPECT(dataflow_llama_paged_cache_length(pc, s1) == 6 && dataflow_llama_paged_cache_length(pc, s0) == 3);
	EXPECT(dataflow_llama_paged_cache_free_pages(pc) == 2);
	/* s0 needs 2 more pages for 6 tokens, s1 1 for 3: 3 > 2 free */
	int64_t more[2] = {3, 6};
	expect_error(dataflow_llama_forward_paged(m, 0, pc, 2, seqs, more, tokens, logits), DATAFLOW_ERR_OUT_OF_MEMORY,
		     "the step needs 3 new pages of 4 tokens, 2 of 5 are free");
	EXPECT(dataflow_llama_paged_cache_length(pc, s1) == 6 && dataflow_llama_paged_cache_free_pages(pc) == 2);
	int64_t dup[2] = {s0, s0};
	expect_error(dataflow_llama_forward_paged(m, 0, pc, 2, dup, news, tokens, logits), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "are both sequence");
	CHECK(dataflow_llama_paged_cache_free_sequence(pc, s1));
	EXPECT(dataflow_llama_paged_cache_free_pages(pc) == 4 && dataflow_llama_paged_cache_length(pc, s1) == -1);
	expect_error(dataflow_llama_paged_cache_free_sequence(pc, s1), DATAFLOW_ERR_INVALID_ARGUMENT, "is not alive");
	CHECK(dataflow_llama_forward_paged(m, 0, pc, 1, &s0, &more[1], tokens, logits));
	EXPECT(dataflow_llama_paged_cache_length(pc, s0) == 9 && dataflow_llama_paged_cache_free_pages(pc) == 2);
	dataflow_llama_paged_cache_destroy(pc);
	dataflow_free_mem(h, logits);

	/* sampler: greedy takes the lowest id of the maxima and leaves the state; draws advance it */
	float row[2][5] = {{0, 3, 3, 1, -2}, {0.5f, 0.25f, 0, 0, 0}};
	Dataflow_Sampling_Params p[2] = {{.temperature = 0, .top_p = 1, .repetition_penalty = 1},
					 {.temperature = 1, .top_k = 2, .top_p = 1, .repetition_penalty = 1.5f}};
	const int32_t hist1[2] = {0, 4};
	const int32_t *hists[2] = {NULL, hist1};
	int64_t hlens[2] = {0, 2}, plens[2] = {0, 1};
	uint64_t states[2] = {11, 12};
	int32_t out[2];
	float lp[2];
	CHECK(dataflow_sample_batch(2, 5, &row[0][0], p, hists, hlens, plens, states, out, lp));
	EXPECT(out[0] == 1 && states[0] == 11 && states[1] != 12 && (out[1] == 0 || out[1] == 1));
	EXPECT(fabsf(lp[0] - (3.0f - logf(expf(0) + 2 * expf(3) + expf(1) + expf(-2)))) < 1e-5f);
	p[1].top_p = 0;
	expect_error(dataflow_sample_batch(2, 5, &row[0][0], p, hists, hlens, plens, states, out, lp),
		     DATAFLOW_ERR_INVALID_ARGUMENT, "params[1].top_p must be in (0, 1]");

	dataflow_llama_destroy(m);
	dataflow_handle_destroy(h);
	printf("c_paged_cache: ok\n");
	return 0;
}
