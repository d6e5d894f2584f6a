// moe_permute_index: the routed slots, ordered by expert, then token, then j (as the host):
// one block; thread e (striding over the experts) counts expert e's assignments, thread 0 forms
// the offsets, then thread e walks the ids in order handing out its slots, so the order within
// an expert is the token order without sorting. Reads every id twice per thread (experts are
// few): a single-pass scan is left for when routing shows up in profiles.
#include "convert.cuh"
#include "op_params.cuh"

extern "C" __global__ void dataflow_cuda_moe_permute_index_int32(DATAFLOW_MOE_PERMUTE_INDEX_PARAMS(int))
{
	const long long n = tokens * top_k;
	for (long long e = threadIdx.x; e < experts; e += blockDim.x) {
		int count = 0;
		for (long long i = 0; i < n; i++)
			count += topk_ids[i] == e;
		expert_offsets[e + 1] = count;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		expert_offsets[0] = 0;
		for (long long e = 0; e < experts; e++)
			expert_offsets[e + 1] += expert_offsets[e];
	}
	__syncthreads();
	for (long long e = threadIdx.x; e < experts; e += blockDim.x) {
		int next = expert_offsets[e];
		for (long long i = 0; i < n; i++)
			if (topk_ids[i] == e) {
				slot_of[i] = next;
				row_map[next++] = (int)(i / top_k);
			}
	}
	for (long long i = threadIdx.x; i < n; i += blockDim.x) {
		if (topk_ids[i] < 0 || topk_ids[i] >= experts)
			slot_of[i] = -1;
		if (i >= expert_offsets[experts])
			row_map[i] = -1;
	}
}
