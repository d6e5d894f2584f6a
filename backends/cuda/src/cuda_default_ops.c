#include <stdio.h>
#include <string.h>

#include "cuda_backend.h"

/* The default native ops of the CUDA backend: their CUDA C++ sources (backends/cuda/kernels,
 * embedded at build time) found by register_default_ops in this library
 * (dataflow_handle_default_ops_library), next to their launch functions (cuda_default_launch.c). */

const Cuda_Source *cuda_find_source(const char *name)
{
	for (int i = 0; i < cuda_num_kernel_sources; i++)
		if (!strcmp(cuda_kernel_sources[i].name, name))
			return &cuda_kernel_sources[i];
	return NULL;
}

/* The source of op `nickname` is kernels/<p>.cu for the longest prefix p of the nickname that
 * ends at a '_' or at its end (rope_bwd -> rope.cu, rms_norm_bwd_w_partials -> rms_norm_bwd_w.cu),
 * so an op's forward and backward kernels share a file, as on the host. */
int dataflow_cuda_kernel_source(const char *op_nickname, const char **name, const char **text)
{
	char file[96];
	for (size_t n = strlen(op_nickname); n > 0; n--) {
		if (op_nickname[n] != '\0' && op_nickname[n] != '_')
			continue;
		if (n + 4 > sizeof(file))
			continue;
		snprintf(file, sizeof(file), "%.*s.cu", (int)n, op_nickname);
		const Cuda_Source *s = cuda_find_source(file);
		if (s) {
			*name = s->name;
			*text = s->text;
			return 1;
		}
	}
	return 0;
}
