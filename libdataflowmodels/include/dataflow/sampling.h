#ifndef DATAFLOW_SAMPLING_H
#define DATAFLOW_SAMPLING_H

#include <stdint.h>

#include "dataflow/status.h"

/* Sampling the next token of a batch of requests from their logits, in C on the host (the
 * rows' logits are read back once per step). For each row, in this order, in double:
 *   1. penalties over the row's history (token ids; the first prompt_len are the prompt):
 *      repetition r (over the whole history, as Hugging Face / vLLM): z = z > 0 ? z / r : z * r;
 *      presence a and frequency f (over the generated part, as OpenAI / vLLM), with c the
 *      token's count there: z -= f c + a [c > 0]
 *   2. temperature 0: the argmax (the lowest id among equal maxima); else z /= temperature and
 *      the candidates are the ids sorted by z descending (ties: lower id first),
 *   3. top_k > 0: the first top_k candidates; p = softmax(z) over those left,
 *   4. top_p < 1: the shortest prefix whose p sums to >= top_p (at least one),
 *   5. min_p > 0: those with p >= min_p * (the largest p),
 *   6. u = the row's next uniform draw in [0, 1), s = u * (sum of p left): the first
 *      candidate whose running sum of p (in candidate order) exceeds s (the last otherwise).
 * The draws: splitmix64 over the row's 64-bit state (a request's seed to start with; state +=
 * 0x9E3779B97F4A7C15, then the mix), u = (x >> 11) * 2^-53: a request's tokens depend on its seed and its own logits only.
 * logprob: log_softmax of the raw logits (before 1-5) at the chosen token, as vLLM's default. */
typedef struct {
	float temperature;        /* >= 0; 0: greedy */
	int32_t top_k;            /* >= 0; 0: off */
	float top_p;              /* (0, 1]; 1: off */
	float min_p;              /* [0, 1]; 0: off */
	float repetition_penalty; /* > 0; 1: off */
	float presence_penalty;   /* finite; 0: off */
	float frequency_penalty;  /* finite; 0: off */
} Dataflow_Sampling_Params;

/* For rows r < rows: tokens[r] sampled from logits [rows][vocab] (fp32, host) with params[r],
 * history histories[r] of history_lens[r] ids (prompt_lens[r] of them the prompt; a NULL
 * history with length 0 is none) and draw state states[r] (advanced by one draw when the row
 * samples, untouched when greedy); logprobs[r] (NULL: not wanted). Bad parameters, ids outside
 * [0, vocab) in a history or non-finite logits name the row and the field; nothing is written
 * then. */
Dataflow_Status dataflow_sample_batch(int64_t rows, int64_t vocab, const float *logits,
				      const Dataflow_Sampling_Params *params, const int32_t *const *histories,
				      const int64_t *history_lens, const int64_t *prompt_lens, uint64_t *states,
				      int32_t *tokens, float *logprobs);

#endif
