/* What the cuda matmul tells cuBLASLt's heuristics (backends/cuda/src/cublaslt_prefs.c): each
 * operand's alignment, and split-K reductions in fp32 only for 16-bit outputs. No GPU. */
#include "cublaslt.h"
#include "cublaslt_prefs.h"

#include "c_test.h"

int main(void)
{
	const char *base = (const char *)(uintptr_t)0x7f0000000000ull; /* 256-byte aligned and more */
	Cublaslt_Prefs p = cublaslt_prefs(base, base + 64, base + 2, base + 4096 + 16, CUDA_R_16BF);
	EXPECT_TRUE(p.align[0] == 256); /* capped: cuBLASLt's own default */
	EXPECT_TRUE(p.align[1] == 64);  /* an activation carved at 64 bytes */
	EXPECT_TRUE(p.align[2] == 2);
	EXPECT_TRUE(p.align[3] == 16);
	EXPECT_TRUE(p.reduction_mask == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE); /* never sum in bf16 */
	EXPECT_TRUE(cublaslt_prefs(base + 1, base, base, base, CUDA_R_16F).align[0] == 1);
	EXPECT_TRUE(cublaslt_prefs(base + 1, base, base, base, CUDA_R_16F).reduction_mask ==
		    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
	EXPECT_TRUE(cublaslt_prefs(base, base, base, base + 128, CUDA_R_32F).reduction_mask ==
		    CUBLASLT_REDUCTION_SCHEME_MASK); /* fp32 out: any scheme sums in fp32 */
	EXPECT_TRUE(cublaslt_prefs(base, base, base, base + 128, CUDA_R_32F).align[3] == 128);
	return *c_test_failures() != 0;
}
