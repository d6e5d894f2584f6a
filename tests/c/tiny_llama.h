#ifndef DATAFLOW_TINY_LLAMA_H
#define DATAFLOW_TINY_LLAMA_H

/* The tiny fp32 Llama the C tests build (2 layers, hidden 24, GQA 4:2, vocab 37). */

#include "dataflow/models.h"

static inline Dataflow_Llama_Config tiny_llama_config(void)
{
	return (Dataflow_Llama_Config){.vocab_size = 37, .hidden_size = 24, .intermediate_size = 40, .num_layers = 2,
				       .num_heads = 4, .num_kv_heads = 2, .rms_eps = 1e-5f, .rope = {.theta = 10000.0f},
				       .dtype = DATAFLOW_FP32};
}

#endif
