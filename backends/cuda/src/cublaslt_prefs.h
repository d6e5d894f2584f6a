#ifndef DATAFLOW_CUBLASLT_PREFS_H
#define DATAFLOW_CUBLASLT_PREFS_H

#include <stdint.h>

/* What cuBLASLt's heuristics may assume about one matmul call (cublaslt_matmul.c), apart from
 * the shape. Pure: tests/c/test_cublaslt_prefs.c.
 * - Alignment: unless told, the heuristics assume 256-byte-aligned operands and may pick a
 *   kernel that faults or fails on less; the model's activations are carved at 64 bytes. Each
 *   operand's alignment is the largest power of two dividing its address, capped at 256.
 * - Split-K reduction: the in-place and output-type schemes sum the partial products in the
 *   output dtype; for 16-bit outputs only the compute-type (fp32) scheme is allowed, so a
 *   matmul rounds once, as the op's contract says. */
typedef struct {
	uint32_t align[4]; /* bytes: cuBLASLt's A (our B), B (our A), C, D */
	uint32_t reduction_mask; /* CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK */
} Cublaslt_Prefs;

Cublaslt_Prefs cublaslt_prefs(const void *lt_a, const void *lt_b, const void *c, const void *d, int out_type);

#endif
