#ifndef DATAFLOW_OP_SIGNATURE_H
#define DATAFLOW_OP_SIGNATURE_H

/* What an op's arguments must satisfy, beyond their datatypes: which tensors are read and
 * written, how many elements each must hold (in terms of the scalar arguments), which may be
 * NULL or alias each other, and requirements on the scalars. An op may be registered with a
 * signature (the signatures argument of dataflow_register_native_code / _external_code /
 * _external_func, dataflow/handle.h), compiled once there; dataflow_submit_op checks every
 * submission of the op against it, with the handle's memory (its allocations, registered host
 * ranges, enabled peers) as the range check, before the backend sees it, so kernels can trust
 * their arguments. Nothing here knows any particular op; compile and check are also public for
 * tools and tests.
 *
 * Grammar (whitespace, newlines included, may separate any two tokens):
 *
 *   signature   := clause { ';' clause } [ ';' ]
 *   clause      := NAME                                          a scalar argument
 *                | NAME ':' role [ '?' ] '[' expr ']' [ alias ]  a tensor argument
 *                | 'require' expr                                a requirement
 *   role        := 'in' | 'out' | 'inout'
 *   alias       := 'alias' NAME { ',' NAME }
 *   expr        := or;   or := and { '||' and };   and := cmp { '&&' cmp }
 *   cmp         := sum [ ( '==' | '!=' | '<' | '<=' | '>' | '>=' ) sum ]
 *   sum         := product { ( '+' | '-' ) product }
 *   product     := unary { ( '*' | '/' | '%' ) unary }
 *   unary       := ( '-' | '!' ) unary | primary
 *   primary     := INTEGER | FLOAT | NAME | '(' expr ')'
 *                | ( 'cdiv' | 'min' | 'max' ) '(' expr ',' expr ')'
 *                | 'finite' '(' expr ')' | 'present' '(' NAME ')' | 'dtype' '(' NAME ')'
 *
 * One clause per argument, in the skeleton's order, then the requirements. A scalar clause
 * must name a scalar argument and a tensor clause a tensor argument. For example:
 *
 *   rows; hidden; eps; x: in[rows*hidden]; w: in[hidden];
 *   y: out[rows*hidden] alias x; rstd: out[rows];
 *   require rows > 0; require hidden > 0; require eps >= 0; require finite(eps)
 *
 * Tensors: `in` is read, `out` written, `inout` both. `?` makes a tensor nullable (NULL is
 * then allowed and skips its checks; present(t) tells whether it was given). The extent is
 * the number of elements of the tensor's datatype the op may touch: a non-NULL tensor must
 * lie, for that many elements, in memory the range check accepts (an extent of 0 checks
 * nothing). An output (out or inout) must not overlap any other tensor argument, except that
 * it may be exactly (the same pointer as) one of the arguments its alias clause names.
 *
 * Expressions: names are scalar arguments (integers: int32, int64, uint64, bool; floats:
 * fp32, fp64), tensor names only inside present() and dtype(), and datatype names (fp32,
 * bf16, ...) stand for their DataflowDatatype value, to compare with dtype(arg). Integer
 * literals are decimal; a literal with '.' or an exponent is a float. Integer arithmetic is
 * int64 as in C (/ and % truncate) and fails on overflow or division by zero; a float operand
 * makes the operation double (IEEE, no failure). Comparisons, &&, || (both short-circuit) and
 * ! give 0 or 1; && || ! % cdiv want integers. cdiv(a, b) is the ceiling of a / b;
 * finite(x) is 0 for NaN and infinities. Extents and requirements must be integer
 * expressions; a requirement holds when it is non-zero.
 *
 * Checking order: requirements (in order), then each tensor (NULL, extent, range), then
 * overlaps. Messages name the op, the argument and the values, e.g.
 *   "rms_norm: rows must be > 0, got 0"
 *   "attention: requires num_q_heads % num_kv_heads == 0, got num_q_heads = 6, num_kv_heads = 4"
 *   "rms_norm: x (4096 fp32 elements = rows*hidden): <the range check's reason>"
 *   "rms_norm: x is NULL"
 *   "cross_entropy: logits [0x..., +800 bytes) and dlogits [0x..., +800 bytes) overlap; dlogits
 *    may only be exactly logits"
 *
 * Limits (hostile text fails cleanly): names of at most 63 characters, nesting depth 32,
 * 4096 instructions per signature. */

#include <stdint.h>

#include "dataflow/op.h"
#include "dataflow/status.h"

typedef struct Dataflow_Op_Signature Dataflow_Op_Signature;

/* OK if [ptr, ptr + size_bytes) is memory the op may use; otherwise sets the error (naming
 * `what`) and returns its status. */
typedef Dataflow_Status (*Dataflow_Range_Check_Fn)(void *ctx, const void *ptr, uint64_t size_bytes,
						   const char *what);

/* Compiles text for the op described by skeleton. A parse error, a clause count that differs
 * from the skeleton's argument count, or a clause whose kind (scalar or tensor) disagrees
 * with the argument's datatype fails with DATAFLOW_ERR_INVALID_ARGUMENT and a message naming
 * the op and the offending text. */
Dataflow_Status dataflow_op_signature_compile(const char *text, const Op_Skeleton *skeleton,
					      Dataflow_Op_Signature **signature);
void dataflow_op_signature_destroy(Dataflow_Op_Signature *signature);

/* Checks op (whose skeleton is the compiled one's) against the signature: requirements,
 * every tensor non-NULL unless nullable and accepted by check_range for its extent, and no
 * overlap between an output and another tensor argument other than a declared exact alias. */
Dataflow_Status dataflow_op_signature_check(const Dataflow_Op_Signature *signature, const Op *op,
					    Dataflow_Range_Check_Fn check_range, void *ctx);

#endif
