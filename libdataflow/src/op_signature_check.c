/* Checks an op against its compiled signature (dataflow/op_signature.h): requirements, then
 * each tensor's NULL, extent and range, then overlaps of outputs. Integer arithmetic is
 * checked for overflow with the compiler's __builtin_*_overflow, never left to undefined
 * behaviour; messages are only formatted on failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_signature_program.h"

enum { EVAL_OK, EVAL_OVERFLOW, EVAL_DIV0, EVAL_UINT64 };

static int load_scalar(const Op *op, int i, Value *v)
{
	const void *p = op->op_args[i];
	switch (op->skeleton.arg_dtypes[i]) {
	case DATAFLOW_INT32_SCALAR:
	case DATAFLOW_BOOL_SCALAR: {
		int32_t x;
		memcpy(&x, p, sizeof(x));
		v->i = x;
		return EVAL_OK;
	}
	case DATAFLOW_INT64_SCALAR:
		memcpy(&v->i, p, sizeof(v->i));
		return EVAL_OK;
	case DATAFLOW_UINT64_SCALAR: {
		uint64_t x;
		memcpy(&x, p, sizeof(x));
		v->i = (int64_t)x;
		return x > (uint64_t)INT64_MAX ? EVAL_UINT64 : EVAL_OK;
	}
	case DATAFLOW_FP32_SCALAR: {
		float x;
		memcpy(&x, p, sizeof(x));
		v->f = x;
		return EVAL_OK;
	}
	default: /* fp64: compile typed every other scalar */
		memcpy(&v->f, p, sizeof(v->f));
		return EVAL_OK;
	}
}

static int int_divide(int op, int64_t a, int64_t b, int64_t *r)
{
	if (b == 0)
		return EVAL_DIV0;
	if (a == INT64_MIN && b == -1)
		return EVAL_OVERFLOW;
	if (op == I_MOD) {
		*r = a % b;
	} else {
		*r = a / b;
		if (op == I_CDIV && a % b != 0 && (a < 0) == (b < 0))
			(*r)++;
	}
	return EVAL_OK;
}

/* The outcome (a CMP_* bit) of comparing a and b, given a < b, a > b and a == b. */
static int32_t compare(int lt, int gt, int eq)
{
	return lt ? CMP_LT : gt ? CMP_GT : eq ? CMP_EQ : CMP_UNORDERED;
}

static int eval(const Dataflow_Op_Signature *s, const Expr *e, const Op *op, int64_t *result)
{
	Value st[MAX_STACK];
	int sp = 0, rc = EVAL_OK;
/* the two values on top of the stack; a binary operation leaves its result in NEXT */
#define TOP st[sp - 1]
#define NEXT st[sp - 2]
#define BINARY(code, stmt)  \
	case code:          \
		stmt;       \
		sp--;       \
		break
#define OVERFLOWS(f) (f(NEXT.i, TOP.i, &NEXT.i) ? EVAL_OVERFLOW : EVAL_OK)
	for (int pc = e->start; pc < e->end && rc == EVAL_OK; pc++) {
		const Insn *in = &s->code[pc];
		switch ((Opcode)in->op) {
		case I_CONST:
			st[sp++] = in->k;
			break;
		case I_ARG:
			rc = load_scalar(op, in->a, &st[sp++]);
			break;
		case I_PRESENT:
			st[sp++].i = *(void *const *)op->op_args[in->a] != NULL;
			break;
		case I_DTYPE:
			st[sp++].i = op->skeleton.arg_dtypes[in->a];
			break;
		case I_ITOF:
			TOP.f = (double)TOP.i;
			break;
		case I_ITOF2:
			NEXT.f = (double)NEXT.i;
			break;
		case I_NEG:
			rc = __builtin_sub_overflow((int64_t)0, TOP.i, &TOP.i) ? EVAL_OVERFLOW : EVAL_OK;
			break;
		case I_FNEG:
			TOP.f = -TOP.f;
			break;
		case I_NOT:
			TOP.i = !TOP.i;
			break;
		case I_FINITE:
			TOP.i = isfinite(TOP.f) != 0;
			break;
		case I_BOOL:
			TOP.i = TOP.i != 0;
			break;
		case I_JZ: /* keeps the 0 as the result of && */
			if (TOP.i == 0)
				pc = in->a - 1;
			else
				sp--;
			break;
		case I_JNZ: /* leaves 1 as the result of || */
			if (TOP.i != 0) {
				TOP.i = 1;
				pc = in->a - 1;
			} else {
				sp--;
			}
			break;
		BINARY(I_ADD, rc = OVERFLOWS(__builtin_add_overflow));
		BINARY(I_SUB, rc = OVERFLOWS(__builtin_sub_overflow));
		BINARY(I_MUL, rc = OVERFLOWS(__builtin_mul_overflow));
		BINARY(I_DIV, rc = int_divide(in->op, NEXT.i, TOP.i, &NEXT.i));
		BINARY(I_MOD, rc = int_divide(in->op, NEXT.i, TOP.i, &NEXT.i));
		BINARY(I_CDIV, rc = int_divide(in->op, NEXT.i, TOP.i, &NEXT.i));
		BINARY(I_MIN, NEXT.i = NEXT.i < TOP.i ? NEXT.i : TOP.i);
		BINARY(I_MAX, NEXT.i = NEXT.i > TOP.i ? NEXT.i : TOP.i);
		BINARY(I_FADD, NEXT.f += TOP.f);
		BINARY(I_FSUB, NEXT.f -= TOP.f);
		BINARY(I_FMUL, NEXT.f *= TOP.f);
		BINARY(I_FDIV, NEXT.f /= TOP.f);
		BINARY(I_FMIN, NEXT.f = fmin(NEXT.f, TOP.f));
		BINARY(I_FMAX, NEXT.f = fmax(NEXT.f, TOP.f));
		BINARY(I_CMP, NEXT.i = (in->a & compare(NEXT.i < TOP.i, NEXT.i > TOP.i, 1)) != 0);
		BINARY(I_FCMP, NEXT.i = (in->a & compare(NEXT.f < TOP.f, NEXT.f > TOP.f, NEXT.f == TOP.f)) != 0);
		}
	}
#undef TOP
#undef NEXT
#undef BINARY
#undef OVERFLOWS
	*result = st[0].i;
	return rc;
}

/* The shortest %g form that reads back as the same value (as fp32 for fp32 arguments). */
static void format_float(char *buf, size_t size, double v, int is_fp32)
{
	for (int prec = 6; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		double back = strtod(buf, NULL);
		if (isnan(v) || (is_fp32 ? (float)back == (float)v : back == v))
			return;
	}
}

static void format_scalar(char *buf, size_t size, const Op *op, int i)
{
	Value v;
	DataflowDatatype dt = op->skeleton.arg_dtypes[i];
	if (dt == DATAFLOW_UINT64_SCALAR) {
		uint64_t x;
		memcpy(&x, op->op_args[i], sizeof(x));
		snprintf(buf, size, "%llu", (unsigned long long)x);
		return;
	}
	load_scalar(op, i, &v);
	if (dt == DATAFLOW_FP32_SCALAR || dt == DATAFLOW_FP64_SCALAR)
		format_float(buf, size, v.f, dt == DATAFLOW_FP32_SCALAR);
	else
		snprintf(buf, size, "%lld", (long long)v.i);
}

static void append(char *buf, size_t size, size_t *pos, const char *fmt, const char *a, const char *b)
{
	if (*pos >= size)
		return;
	int n = snprintf(buf + *pos, size - *pos, fmt, a, b);
	*pos += n > 0 ? (size_t)n : 0;
}

/* "<lead>a = 1, C = NULL, dtype(p) = fp32": the values the expression reads */
static void format_values(char *buf, size_t size, const Dataflow_Op_Signature *s, const Expr *e, const Op *op,
			  const char *lead)
{
	size_t pos = 0;
	buf[0] = 0;
	for (int i = 0; i < s->num_args; i++) {
		char v[64] = "", label[MAX_NAME + 16];
		uint32_t bit = 1u << i;
		if (e->scalars & bit)
			format_scalar(v, sizeof(v), op, i);
		else if (e->present & bit)
			snprintf(v, sizeof(v), "%s", *(void *const *)op->op_args[i] ? "given" : "NULL");
		if (e->scalars & bit || e->present & bit) {
			append(buf, size, &pos, "%s", pos ? ", " : lead, NULL);
			append(buf, size, &pos, "%s = %s", s->args[i].name, v);
		}
		if (e->dtypes & bit) {
			const char *name = dataflow_datatype_name(op->skeleton.arg_dtypes[i]);
			snprintf(label, sizeof(label), "dtype(%s)", s->args[i].name);
			append(buf, size, &pos, "%s", pos ? ", " : lead, NULL);
			append(buf, size, &pos, "%s = %s", label, name ? name : "invalid");
		}
	}
}

static const char *eval_problem(int rc)
{
	return rc == EVAL_OVERFLOW ? "overflows int64" : rc == EVAL_DIV0 ? "divides by zero" : "reads a uint64 beyond int64";
}

static Dataflow_Status check_requires(const Dataflow_Op_Signature *s, const Op *op)
{
	for (int r = 0; r < s->num_requires; r++) {
		const Expr *e = &s->exprs[s->requires[r]];
		int64_t holds = 0;
		int rc = eval(s, e, op, &holds);
		if (rc == EVAL_OK && holds)
			continue;
		char values[512];
		const char *text = s->source + e->text;
		if (rc != EVAL_OK) {
			format_values(values, sizeof(values), s, e, op, ", with ");
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: requirement %.*s %s%s", s->op,
						  e->text_len, text, eval_problem(rc), values);
		}
		if (e->simple) {
			format_scalar(values, sizeof(values), op, e->simple_arg);
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s must be %.*s %.*s, got %s", s->op,
						  s->args[e->simple_arg].name, e->cmp_len, s->source + e->cmp_tok,
						  e->lit_len, s->source + e->lit_tok, values);
		}
		format_values(values, sizeof(values), s, e, op, ", got ");
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: requires %.*s%s", s->op, e->text_len, text,
					  values);
	}
	return DATAFLOW_OK;
}

/* Bytes of tensor i (0 when NULL and nullable), checked against check_range. */
static Dataflow_Status check_tensor(const Dataflow_Op_Signature *s, const Op *op, int i,
				    Dataflow_Range_Check_Fn check_range, void *ctx, uint64_t *bytes)
{
	const Sig_Arg *a = &s->args[i];
	const void *ptr = *(void *const *)op->op_args[i];
	*bytes = 0;
	if (!ptr)
		return a->nullable ? DATAFLOW_OK
				   : dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s is NULL", a->label);
	const Expr *e = &s->exprs[a->extent];
	const char *text = s->source + e->text;
	const char *dt = dataflow_datatype_name(op->skeleton.arg_dtypes[i]);
	int64_t n = 0;
	int rc = eval(s, e, op, &n);
	char values[512];
	if (rc != EVAL_OK || n < 0) {
		format_values(values, sizeof(values), s, e, op, ", with ");
		if (rc != EVAL_OK)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: extent %.*s %s%s", a->label,
						  e->text_len, text, eval_problem(rc), values);
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: extent %.*s = %lld is negative%s", a->label,
					  e->text_len, text, (long long)n, values);
	}
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[i]), total;
	if (__builtin_mul_overflow(n, size, &total)) {
		format_values(values, sizeof(values), s, e, op, ", with ");
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: extent %.*s = %lld %s elements overflows int64 bytes%s", a->label,
					  e->text_len, text, (long long)n, dt, values);
	}
	*bytes = (uint64_t)total;
	if (!total || !check_range)
		return DATAFLOW_OK;
	Dataflow_Status st = check_range(ctx, ptr, *bytes, a->label);
	if (st == DATAFLOW_OK)
		return st;
	/* again with the extent spelled out, for the message (only on failure: no formatting
	 * on the path every submit takes) */
	char what[sizeof(a->label) + 160];
	char count[24];
	snprintf(count, sizeof(count), "%lld", (long long)n);
	if ((size_t)e->text_len == strlen(count) && !strncmp(text, count, strlen(count)))
		snprintf(what, sizeof(what), "%s (%lld %s elements)", a->label, (long long)n, dt);
	else
		snprintf(what, sizeof(what), "%s (%lld %s elements = %.*s)", a->label, (long long)n, dt,
			 e->text_len > 100 ? 100 : e->text_len, text);
	Dataflow_Status again = check_range(ctx, ptr, *bytes, what);
	return again != DATAFLOW_OK ? again : st;
}

static void format_aliases(char *buf, size_t size, const Dataflow_Op_Signature *s, uint32_t aliases)
{
	size_t pos = 0;
	int left = __builtin_popcount(aliases);
	buf[0] = 0;
	for (int j = 0; j < s->num_args && pos < size; j++) {
		if (!(aliases & (1u << j)))
			continue;
		left--;
		int n = snprintf(buf + pos, size - pos, "%s%s", s->args[j].name, left > 1 ? ", " : left == 1 ? " or " : "");
		pos += (size_t)(n > 0 ? n : 0);
	}
}

static Dataflow_Status check_overlaps(const Dataflow_Op_Signature *s, const Op *op, const uint64_t *bytes)
{
	for (int i = 0; i < s->num_args; i++) {
		if (!bytes[i])
			continue;
		uintptr_t pi = (uintptr_t) * (void *const *)op->op_args[i];
		for (int j = i + 1; j < s->num_args; j++) {
			const Sig_Arg *a = &s->args[i], *b = &s->args[j];
			int a_out = a->role == ROLE_OUT || a->role == ROLE_INOUT;
			int b_out = b->role == ROLE_OUT || b->role == ROLE_INOUT;
			if (!bytes[j] || (!a_out && !b_out))
				continue;
			uintptr_t pj = (uintptr_t) * (void *const *)op->op_args[j];
			/* [pi, pi + bytes[i]) and [pj, pj + bytes[j]) share a byte; written without
			 * forming an end that could wrap */
			int overlap = pi <= pj ? pj - pi < bytes[i] : pi - pj < bytes[j];
			if (!overlap)
				continue;
			int same = pi == pj;
			if (same && ((a_out && (a->aliases >> j & 1)) || (b_out && (b->aliases >> i & 1))))
				continue;
			const Sig_Arg *out = b_out ? b : a;
			char rule[512], aliases[200];
			format_aliases(aliases, sizeof(aliases), s, out->aliases);
			if (out->aliases)
				snprintf(rule, sizeof(rule), "%s may only be exactly %s", out->name, aliases);
			else
				snprintf(rule, sizeof(rule), "%s may not overlap another tensor", out->name);
			if (same)
				return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s and %s are the same buffer; %s",
							  s->op, a->name, b->name, rule);
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "%s: %s [%p, +%llu bytes) and %s [%p, +%llu bytes) overlap; %s", s->op,
						  a->name, (void *)pi, (unsigned long long)bytes[i], b->name, (void *)pj,
						  (unsigned long long)bytes[j], rule);
		}
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_op_signature_check(const Dataflow_Op_Signature *signature, const Op *op,
					    Dataflow_Range_Check_Fn check_range, void *ctx)
{
	const Dataflow_Op_Signature *s = signature;
	if (!s || !op)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op_signature_check: %s is NULL",
					  s ? "op" : "signature");
	if (op->skeleton.num_args != s->num_args ||
	    memcmp(op->skeleton.arg_dtypes, s->dtypes, (size_t)s->num_args * sizeof(s->dtypes[0])))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: the op's skeleton (%s, %d arguments) is not the signature's", s->op,
					  op->skeleton.nickname, op->skeleton.num_args);
	for (int i = 0; i < s->num_args; i++)
		if (!op->op_args[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: op_args[%d] (%s) is NULL", s->op, i,
						  s->args[i].name);
	Dataflow_Status st = check_requires(s, op);
	uint64_t bytes[DATAFLOW_MAX_OP_ARGS] = {0};
	for (int i = 0; i < s->num_args && st == DATAFLOW_OK; i++)
		if (s->args[i].role != ROLE_NONE)
			st = check_tensor(s, op, i, check_range, ctx, &bytes[i]);
	return st == DATAFLOW_OK ? check_overlaps(s, op, bytes) : st;
}
