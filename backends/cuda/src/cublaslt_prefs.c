#include "cublaslt_prefs.h"

#include "cublaslt.h"

static uint32_t alignment(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t bytes = 1;
	while (bytes < 256 && !(a & bytes))
		bytes <<= 1;
	return bytes;
}

/* (cublaslt_prefs.h) */
Cublaslt_Prefs cublaslt_prefs(const void *lt_a, const void *lt_b, const void *c, const void *d, int out_type)
{
	Cublaslt_Prefs p = {{alignment(lt_a), alignment(lt_b), alignment(c), alignment(d)},
			    out_type == CUDA_R_32F ? CUBLASLT_REDUCTION_SCHEME_MASK : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE};
	return p;
}
