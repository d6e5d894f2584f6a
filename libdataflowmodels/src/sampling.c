/* The batch sampler (sampling.h): penalties, temperature, top-k, top-p, min-p and a seeded
 * draw per row, in double, in the order the header gives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/sampling.h"

/* splitmix64: the next draw of *state as a double in [0, 1) */
static double next_uniform(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53;
}

typedef struct {
	double z;
	int32_t id;
} Candidate;

static int by_z_then_id(const void *a, const void *b)
{
	const Candidate *x = a, *y = b;
	if (x->z != y->z)
		return x->z > y->z ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static Dataflow_Status check_row(int64_t r, int64_t vocab, const float *logits, const Dataflow_Sampling_Params *p,
				 const int32_t *history, int64_t history_len, int64_t prompt_len)
{
	const char *op = "sample_batch";
	if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: params[%lld].temperature must be finite and >= 0, got %g", op, (long long)r,
					  (double)p->temperature);
	if (p->top_k < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: params[%lld].top_k must be >= 0, got %d", op,
					  (long long)r, p->top_k);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: params[%lld].top_p must be in (0, 1], got %g", op,
					  (long long)r, (double)p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: params[%lld].min_p must be in [0, 1], got %g", op,
					  (long long)r, (double)p->min_p);
	if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: params[%lld].repetition_penalty must be finite and > 0, got %g", op,
					  (long long)r, (double)p->repetition_penalty);
	if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: params[%lld].presence_penalty and frequency_penalty must be finite, got %g, %g",
					  op, (long long)r, (double)p->presence_penalty, (double)p->frequency_penalty);
	if (history_len < 0 || prompt_len < 0 || prompt_len > history_len || (history_len && !history))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: row %lld: need 0 <= prompt_lens (%lld) <= history_lens (%lld) and a history",
					  op, (long long)r, (long long)prompt_len, (long long)history_len);
	for (int64_t i = 0; i < history_len; i++)
		if (history[i] < 0 || history[i] >= vocab)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "%s: histories[%lld][%lld] = %d is outside the vocabulary [0, %lld)", op,
						  (long long)r, (long long)i, history[i], (long long)vocab);
	for (int64_t v = 0; v < vocab; v++)
		if (!isfinite(logits[v]))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: logits[%lld][%lld] is not finite (%g)", op,
						  (long long)r, (long long)v, (double)logits[v]);
	return DATAFLOW_OK;
}

/* Steps 1-6 of the header for one row; z and c are vocab-sized scratch. */
static int32_t sample_row(int64_t vocab, const float *logits, const Dataflow_Sampling_Params *p, const int32_t *history,
			  int64_t history_len, int64_t prompt_len, uint64_t *state, double *z, Candidate *c,
			  int32_t *count)
{
	for (int64_t v = 0; v < vocab; v++) {
		z[v] = logits[v];
		count[v] = 0;
	}
	if (p->repetition_penalty != 1.0f) {
		for (int64_t i = 0; i < history_len; i++)
			count[history[i]] = 1;
		for (int64_t v = 0; v < vocab; v++)
			if (count[v])
				z[v] = z[v] > 0 ? z[v] / p->repetition_penalty : z[v] * p->repetition_penalty;
		memset(count, 0, (size_t)vocab * sizeof(int32_t));
	}
	if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
		for (int64_t i = prompt_len; i < history_len; i++)
			count[history[i]]++;
		for (int64_t v = 0; v < vocab; v++)
			if (count[v])
				z[v] -= (double)p->frequency_penalty * count[v] + (double)p->presence_penalty;
	}
	if (p->temperature == 0.0f) {
		int64_t best = 0;
		for (int64_t v = 1; v < vocab; v++)
			best = z[v] > z[best] ? v : best;
		return (int32_t)best;
	}
	for (int64_t v = 0; v < vocab; v++)
		c[v] = (Candidate){z[v] / p->temperature, (int32_t)v};
	qsort(c, (size_t)vocab, sizeof(Candidate), by_z_then_id);
	int64_t n = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
	double sum = 0; /* p = exp(z - z_max) / sum, kept in z */
	for (int64_t i = 0; i < n; i++) {
		z[i] = exp(c[i].z - c[0].z);
		sum += z[i];
	}
	for (int64_t i = 0; i < n; i++)
		z[i] /= sum;
	if (p->top_p < 1.0f) {
		double run = 0;
		int64_t keep = 0;
		while (keep < n && run < p->top_p)
			run += z[keep++];
		n = keep;
	}
	if (p->min_p > 0.0f) {
		int64_t keep = 0;
		while (keep < n && z[keep] >= p->min_p * z[0])
			keep++;
		n = keep;
	}
	double total = 0;
	for (int64_t i = 0; i < n; i++)
		total += z[i];
	double s = next_uniform(state) * total, run = 0;
	for (int64_t i = 0; i < n; i++) {
		run += z[i];
		if (run > s)
			return c[i].id;
	}
	return c[n - 1].id;
}

static float log_softmax_at(int64_t vocab, const float *logits, int32_t token)
{
	double max = logits[0], sum = 0;
	for (int64_t v = 1; v < vocab; v++)
		max = logits[v] > max ? logits[v] : max;
	for (int64_t v = 0; v < vocab; v++)
		sum += exp((double)logits[v] - max);
	return (float)((double)logits[token] - max - log(sum));
}

Dataflow_Status dataflow_sample_batch(int64_t rows, int64_t vocab, const float *logits,
				      const Dataflow_Sampling_Params *params, const int32_t *const *histories,
				      const int64_t *history_lens, const int64_t *prompt_lens, uint64_t *states,
				      int32_t *tokens, float *logprobs)
{
	if (rows < 1 || vocab < 1 || vocab > INT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "sample_batch: rows must be >= 1 and vocab in [1, 2^31), got %lld, %lld",
					  (long long)rows, (long long)vocab);
	if (!logits || !params || !histories || !history_lens || !prompt_lens || !states || !tokens)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "sample_batch: logits, params, histories, history_lens, prompt_lens, states and "
					  "tokens are required");
	for (int64_t r = 0; r < rows; r++) {
		Dataflow_Status st = check_row(r, vocab, logits + r * vocab, &params[r], histories[r], history_lens[r],
					       prompt_lens[r]);
		if (st != DATAFLOW_OK)
			return st;
	}
	double *z = malloc((size_t)vocab * sizeof(double));
	Candidate *c = malloc((size_t)vocab * sizeof(Candidate));
	int32_t *count = malloc((size_t)vocab * sizeof(int32_t));
	if (!z || !c || !count) {
		free(z), free(c), free(count);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "sample_batch: no memory for %lld candidates",
					  (long long)vocab);
	}
	for (int64_t r = 0; r < rows; r++) {
		const float *row = logits + r * vocab;
		tokens[r] = sample_row(vocab, row, &params[r], histories[r], history_lens[r], prompt_lens[r], &states[r], z,
				       c, count);
		if (logprobs)
			logprobs[r] = log_softmax_at(vocab, row, tokens[r]);
	}
	free(z), free(c), free(count);
	return DATAFLOW_OK;
}
