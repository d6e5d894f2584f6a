/* Op signatures (libdataflow/include/dataflow/op_signature.h), without a handle: compile and
 * check against a fake range check over a few "allocations", every message compared with the
 * expected text, compile errors, and hostile text (random and mutated signatures, deep
 * nesting, long chains) that must fail cleanly; run under ASan + UBSan by the tests too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_test.h"
#include "dataflow/dataflow.h"


/* ---- a fake memory: two allocations, as a ledger would see them ---- */

static _Alignas(64) char mem_a[4096], mem_b[4096];

static Dataflow_Status fake_range(void *ctx, const void *ptr, uint64_t size, const char *what)
{
	int *calls = ctx;
	(*calls)++;
	const char *p = ptr;
	const char *bases[] = {mem_a, mem_b};
	for (int i = 0; i < 2; i++) {
		if (p >= bases[i] && p < bases[i] + 4096) {
			uint64_t room = (uint64_t)(bases[i] + 4096 - p);
			if (size <= room)
				return DATAFLOW_OK;
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: runs %llu bytes past the end", what,
						  (unsigned long long)(size - room));
		}
	}
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: not device memory", what);
}

static Op_Skeleton skeleton(const char *name, int n, const DataflowDatatype *dtypes)
{
	Op_Skeleton s;
	if (dataflow_op_skeleton_init(&s, name, n, dtypes) != DATAFLOW_OK) {
		fprintf(stderr, "skeleton %s: %s\n", name, dataflow_last_error());
		exit(1);
	}
	return s;
}

static Dataflow_Op_Signature *compile_ok(const char *text, const Op_Skeleton *s)
{
	Dataflow_Op_Signature *sig = NULL;
	Dataflow_Status st = dataflow_op_signature_compile(text, s, &sig);
	EXPECT_THAT(st == DATAFLOW_OK && sig, "compiled, got %s", dataflow_last_error());
	if (!sig)
		exit(1);
	return sig;
}

static void expect_compile_error(const char *text, const Op_Skeleton *s, const char *want)
{
	Dataflow_Op_Signature *sig = (Dataflow_Op_Signature *)1;
	Dataflow_Status st = dataflow_op_signature_compile(text, s, &sig);
	EXPECT_THAT(st == DATAFLOW_ERR_INVALID_ARGUMENT && !sig, "a compile error for '%.60s'", text);
	EXPECT_THAT(strstr(dataflow_last_error(), want), "'%s' in '%s' (text '%.60s')", want, dataflow_last_error(), text);
}

/* checks and compares the message: want NULL means OK expected */
static void expect_check(const Dataflow_Op_Signature *sig, const Op *op, const char *want)
{
	int calls = 0;
	dataflow_clear_error();
	Dataflow_Status st = dataflow_op_signature_check(sig, op, fake_range, &calls);
	if (!want) {
		EXPECT_THAT(st == DATAFLOW_OK, "OK, got '%s'", dataflow_last_error());
		return;
	}
	EXPECT_THAT(st == DATAFLOW_ERR_INVALID_ARGUMENT, "an error containing '%s'", want);
	EXPECT_THAT(strstr(dataflow_last_error(), want), "'%s' in '%s'", want, dataflow_last_error());
}

/* ---- rms_norm: scalars, extents, aliases, messages ---- */

typedef struct {
	int64_t rows, hidden;
	float eps;
	void *x, *w, *y, *rstd;
	Op op;
} Rms;

static void rms_init(Rms *r, const Op_Skeleton *s)
{
	r->rows = 3;
	r->hidden = 4;
	r->eps = 1e-6f;
	r->x = mem_a;
	r->w = mem_a + 1024;
	r->y = mem_b;
	r->rstd = mem_b + 2048;
	r->op.skeleton = *s;
	void *args[] = {&r->rows, &r->hidden, &r->eps, &r->x, &r->w, &r->y, &r->rstd};
	memcpy(r->op.op_args, args, sizeof(args));
}

static void test_rms_norm(void)
{
	const DataflowDatatype f = DATAFLOW_FP32;
	DataflowDatatype dt[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR, f, f, f, f};
	Op_Skeleton s = skeleton("rms_norm", 7, dt);
	Dataflow_Op_Signature *sig = compile_ok("rows; hidden; eps; x: in[rows*hidden]; w: in[hidden];\n"
						"y: out[rows*hidden] alias x; rstd: out[rows];\n"
						"require rows > 0; require hidden > 0; require eps >= 0; require finite(eps)",
						&s);
	Rms r;
	rms_init(&r, &s);
	expect_check(sig, &r.op, NULL);
	r.y = r.x; /* a declared exact alias */
	expect_check(sig, &r.op, NULL);
	r.y = mem_b;
	r.w = mem_a + 8; /* two inputs may overlap */
	expect_check(sig, &r.op, NULL);

	rms_init(&r, &s);
	r.rows = 0;
	expect_check(sig, &r.op, "rms_norm: rows must be > 0, got 0");
	rms_init(&r, &s);
	r.eps = -1.0f;
	expect_check(sig, &r.op, "rms_norm: eps must be >= 0, got -1");
	r.eps = NAN;
	expect_check(sig, &r.op, "rms_norm: eps must be >= 0, got nan");
	r.eps = INFINITY;
	expect_check(sig, &r.op, "rms_norm: requires finite(eps), got eps = inf");
	r.eps = 0.1f; /* values print as the shortest text that reads back as the fp32 */
	expect_check(sig, &r.op, NULL);

	rms_init(&r, &s);
	r.x = NULL;
	expect_check(sig, &r.op, "rms_norm: x is NULL");
	rms_init(&r, &s);
	r.x = mem_a + 4090;
	expect_check(sig, &r.op, "rms_norm: x (12 fp32 elements = rows*hidden): runs 42 bytes past the end");
	rms_init(&r, &s);
	r.w = (void *)(uintptr_t)0x1000; /* no allocation */
	expect_check(sig, &r.op, "rms_norm: w (4 fp32 elements = hidden): not device memory");

	rms_init(&r, &s);
	r.y = mem_a + 4; /* partly over x */
	expect_check(sig, &r.op, "rms_norm: x [");
	expect_check(sig, &r.op, "overlap; y may only be exactly x");
	rms_init(&r, &s);
	r.rstd = mem_a + 1024; /* rstd on w: an output over an input it does not alias */
	expect_check(sig, &r.op, "rms_norm: w and rstd are the same buffer; rstd may not overlap another tensor");
	rms_init(&r, &s);
	r.rstd = (char *)r.y + 44; /* overlaps y's last element: two outputs */
	expect_check(sig, &r.op, "overlap; rstd may not overlap another tensor");
	r.rstd = (char *)r.y + 48; /* adjacent: fine */
	expect_check(sig, &r.op, NULL);

	rms_init(&r, &s);
	r.rows = INT64_C(1) << 62;
	expect_check(sig, &r.op, "rms_norm: x: extent rows*hidden overflows int64, with rows = 4611686018427387904, hidden = 4");
	r.hidden = 1;
	expect_check(sig, &r.op, "rms_norm: x: extent rows*hidden = 4611686018427387904 fp32 elements overflows int64 bytes");

	/* a checker that is told the skeleton differs */
	rms_init(&r, &s);
	r.op.skeleton.arg_dtypes[3] = DATAFLOW_BF16;
	expect_check(sig, &r.op, "is not the signature's");
	rms_init(&r, &s);
	r.op.op_args[2] = NULL;
	expect_check(sig, &r.op, "rms_norm: op_args[2] (eps) is NULL");
	EXPECT_THAT(dataflow_op_signature_check(NULL, &r.op, fake_range, NULL) == DATAFLOW_ERR_INVALID_ARGUMENT, "NULL");

	/* the range check runs once per non-empty tensor on success (no second call) */
	rms_init(&r, &s);
	int calls = 0;
	EXPECT_THAT(dataflow_op_signature_check(sig, &r.op, fake_range, &calls) == DATAFLOW_OK && calls == 4, "%d calls",
	       calls);
	dataflow_op_signature_destroy(sig);
}

/* ---- matmul-like: nullable, present(), general requirement messages, dtype() ---- */

static void test_nullable_and_dtype(void)
{
	DataflowDatatype dt[] = {DATAFLOW_BF16, DATAFLOW_FP32, DATAFLOW_FP32, DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR};
	Op_Skeleton s = skeleton("opt", 5, dt);
	Dataflow_Op_Signature *sig =
		compile_ok("p: inout[n]; master: inout?[n]; scale: in?[1]; n; beta;"
			   "require n > 0; require !present(master) || dtype(p) == bf16;"
			   "require beta == 0 || present(scale);",
			   &s);
	int64_t n = 8;
	float beta = 0.0f;
	void *p = mem_a, *master = NULL, *scale = NULL;
	Op op = {.skeleton = s, .op_args = {&p, &master, &scale, &n, &beta}};
	expect_check(sig, &op, NULL);
	master = mem_b;
	expect_check(sig, &op, NULL);
	beta = 0.5f;
	expect_check(sig, &op, "opt: requires beta == 0 || present(scale), got scale = NULL, beta = 0.5");
	scale = mem_b + 64;
	expect_check(sig, &op, NULL);
	dataflow_op_signature_destroy(sig);

	dt[0] = DATAFLOW_FP32;
	s = skeleton("opt", 5, dt);
	sig = compile_ok("p: inout[n]; master: inout?[n]; scale: in?[1]; n; beta;"
			 "require !present(master) || dtype(p) == bf16",
			 &s);
	op.skeleton = s;
	expect_check(sig, &op, "opt: requires !present(master) || dtype(p) == bf16, got dtype(p) = fp32, master = given");
	master = NULL;
	expect_check(sig, &op, NULL);
	dataflow_op_signature_destroy(sig);
}

/* ---- expressions: arithmetic, functions, overflow, division, short circuits ---- */

static void test_expressions(void)
{
	DataflowDatatype dt[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_FP64_SCALAR,
				 DATAFLOW_UINT64_SCALAR, DATAFLOW_BOOL_SCALAR, DATAFLOW_INT32_SCALAR, DATAFLOW_FP32};
	Op_Skeleton s = skeleton("expr", 7, dt);
	int64_t a = 10, b = 3;
	double x = 0.5;
	uint64_t u = 7;
	int32_t flag = 1, i32 = -4;
	void *t = mem_a;
	Op op = {.skeleton = s, .op_args = {&a, &b, &x, &u, &flag, &i32, &t}};
	static const struct {
		const char *req;
		int holds;
	} cases[] = {
		{"a / b == 3", 1},	      {"a % b == 1", 1},	   {"cdiv(a, b) == 4", 1},
		{"cdiv(-a, b) == -3", 1},    {"cdiv(a, -b) == -3", 1},   {"cdiv(9, b) == 3", 1},
		{"min(a, b) == 3", 1},	      {"max(a, x) == 10", 1},	   {"min(x, 1) == 0.5", 1},
		{"a * x == 5", 1},	      {"x * 2 < 1.5", 1},	   {"-a + 2 * b == -4", 1},
		{"(a - b) * (a + b) == 91", 1}, {"!(a < b) && flag", 1}, {"a < b || u == 7", 1},
		{"i32 == -4 && u > 6", 1},   {"finite(x) && finite(a)", 1}, {"a / 4 == 2", 1},
		{"-7 / 2 == -3 && -7 % 2 == -1", 1}, {"1e1 == a", 1},	{"2.5e-1 * 4 == 1", 1},
		{"a == 0 || 100 / (a - 10) > 0", 0}, /* evaluated: a - 10 == 0 ... see below */
		{"b == 3 || 1 / 0", 1},	      {"b == 4 && 1 / 0", 0},	   {"dtype(t) == fp32", 1},
		{"dtype(a) == int64_scalar", 1}, {"present(t)", 1},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char text[256];
		snprintf(text, sizeof(text), "a; b; x; u; flag; i32; t: in[1]; require %s", cases[k].req);
		Dataflow_Op_Signature *sig = compile_ok(text, &s);
		int calls = 0;
		Dataflow_Status st = dataflow_op_signature_check(sig, &op, fake_range, &calls);
		if (k == 21) /* the division runs into a zero */
			EXPECT_THAT(strstr(dataflow_last_error(), "expr: requirement a == 0 || 100 / (a - 10) > 0 divides by zero, with a = 10"),
			       "'%s'", dataflow_last_error());
		else
			EXPECT_THAT((st == DATAFLOW_OK) == cases[k].holds, "'%s' %s, got '%s'", cases[k].req,
			       cases[k].holds ? "holds" : "fails", st == DATAFLOW_OK ? "OK" : dataflow_last_error());
		dataflow_op_signature_destroy(sig);
	}

	/* int64 edges: overflow is a clean error, never UB */
	static const struct {
		const char *req, *want;
		int64_t a, b;
	} edges[] = {
		{"a * b > 0", "requirement a * b > 0 overflows int64, with a = 4611686018427387904, b = 2", INT64_C(1) << 62, 2},
		{"a + b > 0", "overflows int64", INT64_MAX, 1},
		{"a - b < 0", "overflows int64", INT64_MIN, 1},
		{"a / b != 0", "overflows int64", INT64_MIN, -1},
		{"a % b != 0", "overflows int64", INT64_MIN, -1},
		{"cdiv(a, b) != 0", "overflows int64", INT64_MIN, -1},
		{"-a < 0", "overflows int64", INT64_MIN, 1},
		{"a % b == 0", "divides by zero", 5, 0},
		{"cdiv(a, b) == 0", "divides by zero", 5, 0},
		{"u > 0", "reads a uint64 beyond int64, with u = 18446744073709551615", 1, 1},
	};
	for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]); k++) {
		char text[256];
		snprintf(text, sizeof(text), "a; b; x; u; flag; i32; t: in[1]; require %s", edges[k].req);
		Dataflow_Op_Signature *sig = compile_ok(text, &s);
		a = edges[k].a;
		b = edges[k].b;
		u = k == 9 ? UINT64_MAX : 7;
		expect_check(sig, &op, edges[k].want);
		dataflow_op_signature_destroy(sig);
	}

	/* extents: negative, from a failing division, and an extent of 0 checks no range */
	a = -2;
	Dataflow_Op_Signature *sig = compile_ok("a; b; x; u; flag; i32; t: in[a * 2]", &s);
	expect_check(sig, &op, "expr: t: extent a * 2 = -4 is negative, with a = -2");
	dataflow_op_signature_destroy(sig);
	sig = compile_ok("a; b; x; u; flag; i32; t: in[b / a]", &s);
	a = 0;
	b = 3;
	expect_check(sig, &op, "expr: t: extent b / a divides by zero, with a = 0, b = 3");
	b = 0;
	a = 1;
	t = (void *)(uintptr_t)0x1000; /* not memory, but nothing is touched */
	expect_check(sig, &op, NULL);
	dataflow_op_signature_destroy(sig);
}

/* ---- compile errors ---- */

static void test_compile_errors(void)
{
	DataflowDatatype dt[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR, DATAFLOW_FP32, DATAFLOW_FP32};
	Op_Skeleton s = skeleton("op", 4, dt);
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"n; eps; a: in[n]", "3 argument clauses for 4 arguments"},
		{"n; eps; a: in[n]; b: out[n]; c: out[n]", "more argument clauses than the skeleton's 4 arguments"},
		{"n; eps; a; b: out[n]", "argument is a tensor (fp32)"},
		{"n: in[1]; eps; a: in[n]; b: out[n]", "argument is a scalar (int64_scalar)"},
		{"n; eps; a: in[m]; b: out[n]", "unknown name 'm'"},
		{"n; eps; a: in[eps]; b: out[n]", "an extent must be an integer expression"},
		{"n; eps; a: in[n % eps]; b: out[n]", "% wants integer operands"},
		{"n; eps; a: in[n; b: out[n]", "expected ']'"},
		{"n; eps; a: in[n]; a: out[n]", "argument name a used twice"},
		{"n; eps; a: in[n]; b: out[n] alias n", "an alias must name another tensor argument"},
		{"n; eps; a: in[n]; b: out[n] alias b", "an alias must name another tensor argument"},
		{"n; eps; a: in[n] alias b; b: out[n]", "only out and inout tensors declare aliases"},
		{"n; require n > 0; eps; a: in[n]; b: out[n]", "argument clauses come before the requirements"},
		{"n;; eps; a: in[n]; b: out[n]", "empty clause"},
		{";", "empty clause"},
		{"n; eps; a: io[n]; b: out[n]", "expected in, out or inout"},
		{"n; eps; a: in(n); b: out[n]", "expected '[' and the extent"},
		{"n; eps; a: in[n] b; b: out[n]", "expected ';'"},
		{"n; eps; a: in[n]; b: out[n]; require eps", "a requirement must be an integer expression"},
		{"n; eps; a: in[n]; b: out[n]; require n > 0 n", "expected ';' after a requirement"},
		{"n; eps; a: in[n]; b: out[n]; require a > 0", "tensor a may only appear in present() or dtype()"},
		{"n; eps; a: in[n]; b: out[n]; require present(n)", "present() wants a tensor, n is a scalar"},
		{"n; eps; a: in[n]; b: out[n]; require present(3)", "present() wants an argument name"},
		{"n; eps; a: in[n]; b: out[n]; require cdiv(n eps)", "expected ',' in cdiv()"},
		{"n; eps; a: in[n]; b: out[n]; require cdiv(n, eps) > 0", "cdiv wants integer operands"},
		{"n; eps; a: in[n]; b: out[n]; require !eps", "! wants integer operands"},
		{"n; eps; a: in[n]; b: out[n]; require eps && n", "&& wants integer operands"},
		{"n; eps; a: in[n]; b: out[n]; require n > 0 || eps", "|| wants integer operands"},
		{"n; eps; a: in[n]; b: out[n]; require (n > 0", "expected ')'"},
		{"n; eps; a: in[n]; b: out[n]; require n > 0 > 1", "expected ';' after a requirement"},
		{"n; eps; a: in[n]; b: out[n]; require n > 99999999999999999999", "integer literal beyond int64"},
		{"n; eps; a: in[n]; b: out[n]; require n > 1e", "malformed number"},
		{"n; eps; a: in[n]; b: out[n]; require n > 12ab", "malformed number"},
		{"n; eps; a: in[n]; b: out[n]; require n $ 1", "unexpected character '$'"},
		{"n; eps; a: in[n]; b: out[n]; require n > \xc3\xa9", "unexpected character 0xc3"},
		{"n; eps; a: in[n]; b: out[n]; required n > 0", "more argument clauses than the skeleton's 4 arguments"},
		{"n; eps; a: in[n]; b: out[n] n", "expected ';'"},
		{"n eps; a: in[n]; b: out[n]", "3 argument clauses for 4 arguments"},
		{"n; eps; a: in[n]; b: out[n]; c", "more argument clauses than the skeleton's 4 arguments"},
		{"n; eps x; a: in[n]; b: out[n]", "expected ':' or ';' after an argument name"},
		{"n; eps; a: in[n]; b: out[n]; require", "expected a number, a name or '('"},
		{"3; eps; a: in[n]; b: out[n]", "a clause starts with an argument name or 'require'"},
		{"n; eps; a: in[n]; b: out[n]; require xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx > 0",
		 "a name is longer than 63 characters"},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		expect_compile_error(cases[k].text, &s, cases[k].want);
	Dataflow_Op_Signature *sig = (Dataflow_Op_Signature *)1;
	EXPECT_THAT(dataflow_op_signature_compile(NULL, &s, &sig) == DATAFLOW_ERR_INVALID_ARGUMENT && !sig, "NULL text");
	EXPECT_THAT(dataflow_op_signature_compile("n", NULL, &sig) == DATAFLOW_ERR_INVALID_ARGUMENT, "NULL skeleton");
	EXPECT_THAT(dataflow_op_signature_compile("n", &s, NULL) == DATAFLOW_ERR_INVALID_ARGUMENT, "NULL out");
	/* the message names the op and shows where */
	expect_compile_error("n; eps; a: in[n]; b: out[q]", &s, "op: signature error at offset 25 (near 'q]')");

	/* a skeleton with no arguments takes an empty signature or requirements on constants */
	Op_Skeleton none = skeleton("none", 0, NULL);
	sig = compile_ok("", &none);
	Op op = {.skeleton = none};
	expect_check(sig, &op, NULL);
	dataflow_op_signature_destroy(sig);
	sig = compile_ok("require 1 > 2;", &none);
	expect_check(sig, &op, "none: requires 1 > 2");
	dataflow_op_signature_destroy(sig);
}

/* ---- hostile text: limits, then random and mutated signatures ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t next_random(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static void test_limits(void)
{
	DataflowDatatype dt[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP32};
	Op_Skeleton s = skeleton("deep", 2, dt);
	size_t big = 200000;
	char *text = malloc(big + 64);
	/* nesting: parentheses, unary operators and calls are bounded, never a stack overflow */
	const char *unit[] = {"(", "-", "!", "min(n, "};
	for (int u = 0; u < 4; u++) {
		size_t len = (size_t)sprintf(text, "n; t: in[1]; require ");
		while (len < big) {
			strcpy(text + len, unit[u]);
			len += strlen(unit[u]);
		}
		strcpy(text + len, "n");
		expect_compile_error(text, &s, big + 30 > 65536 ? "signature longer than 65536" : "nested");
		/* within the length limit, the depth limit answers */
		text[21 + 40 * strlen(unit[u])] = 0;
		strcat(text, "n");
		expect_compile_error(text, &s, "nested more than 32 deep");
	}
	/* a nesting of 31 still compiles and evaluates */
	size_t len = (size_t)sprintf(text, "n; t: in[1]; require ");
	for (int i = 0; i < 31; i++)
		len += (size_t)sprintf(text + len, "(");
	len += (size_t)sprintf(text + len, "n");
	for (int i = 0; i < 31; i++)
		len += (size_t)sprintf(text + len, ")");
	sprintf(text + len, " == 5");
	Dataflow_Op_Signature *sig = compile_ok(text, &s);
	int64_t n = 5;
	void *t = mem_a;
	Op op = {.skeleton = s, .op_args = {&n, &t}};
	expect_check(sig, &op, NULL);
	dataflow_op_signature_destroy(sig);
	/* long flat chains use a small stack; past 4096 instructions they fail cleanly */
	len = (size_t)sprintf(text, "n; t: in[1]; require n");
	for (int i = 0; i < 1000; i++)
		len += (size_t)sprintf(text + len, " + n");
	sprintf(text + len, " == 5005");
	sig = compile_ok(text, &s);
	expect_check(sig, &op, NULL);
	dataflow_op_signature_destroy(sig);
	len = (size_t)sprintf(text, "n; t: in[1]; require n");
	for (int i = 0; i < 3000; i++)
		len += (size_t)sprintf(text + len, " + n");
	expect_compile_error(text, &s, "more than 4096 instructions");
	/* right-nested chains grow the value stack: bounded */
	len = (size_t)sprintf(text, "n; t: in[1]; require n");
	for (int i = 0; i < 200; i++)
		len += (size_t)sprintf(text + len, " + n * (n");
	expect_compile_error(text, &s, "expression too complex (needs more than 64 stack values)");
	/* many requirements */
	len = (size_t)sprintf(text, "n; t: in[1]");
	for (int i = 0; i < 70; i++)
		len += (size_t)sprintf(text + len, "; require n > 0");
	expect_compile_error(text, &s, "more than 64 requirements");
	free(text);
}

static void test_fuzz(void)
{
	DataflowDatatype dt[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR, DATAFLOW_FP32, DATAFLOW_BF16,
				 DATAFLOW_UINT64_SCALAR};
	Op_Skeleton s = skeleton("fuzz", 5, dt);
	static const char *const pieces[] = {"n",	 "eps",	   "a",	      "b",     "u",	":",	 ";",	  "in",
					     "out",	 "inout",  "?",	      "[",     "]",	"(",	 ")",	  ",",
					     "alias",	 "require", "+",      "-",     "*",	"/",	 "%",	  "<",
					     "<=",	 "==",	    "!=",     ">",     ">=",	"&&",	 "||",	  "!",
					     "0",	 "1",	    "7",      "-1",    "2.5",	"1e300", "9223372036854775807",
					     "cdiv(",	 "min(",    "max(",   "finite(", "present(", "dtype(", "fp32", " ",
					     "\n",	 "\t",	    "@",      "\x01",  "\xff"};
	static const char *const valid =
		"n; eps; a: in[n * 2]; b: out?[cdiv(n, 3)] alias a; u; require n > 0 && finite(eps); "
		"require !present(b) || dtype(b) == bf16; require u >= 0 || eps < 1.5";
	int64_t n = 3;
	float eps = 0.25f;
	uint64_t u = 5;
	void *a = mem_a, *b = mem_a;
	Op op = {.skeleton = s, .op_args = {&n, &eps, &a, &b, &u}};
	char text[512];
	int compiled = 0;
	for (int iter = 0; iter < 60000; iter++) {
		size_t len = 0;
		if (iter % 2) { /* a mutation of a valid signature */
			len = strlen(valid);
			memcpy(text, valid, len + 1);
			for (int m = 1 + (int)(next_random() % 4); m > 0 && len > 0; m--) {
				size_t at = next_random() % len;
				int what = (int)(next_random() % 3);
				if (what == 0) { /* delete a span */
					size_t span = 1 + next_random() % 8;
					span = at + span > len ? len - at : span;
					memmove(text + at, text + at + span, len - at - span + 1);
					len -= span;
				} else { /* insert or overwrite with a piece */
					const char *p = pieces[next_random() % (sizeof(pieces) / sizeof(pieces[0]))];
					size_t pl = strlen(p);
					if (len + pl + 1 >= sizeof(text))
						continue;
					if (what == 1) {
						memmove(text + at + pl, text + at, len - at + 1);
						len += pl;
					} else if (at + pl > len) {
						continue;
					}
					memcpy(text + at, p, pl);
				}
			}
		} else { /* random pieces */
			int count = (int)(next_random() % 40);
			text[0] = 0;
			for (int i = 0; i < count; i++) {
				const char *p = pieces[next_random() % (sizeof(pieces) / sizeof(pieces[0]))];
				if (len + strlen(p) + 1 >= sizeof(text))
					break;
				strcpy(text + len, p);
				len += strlen(p);
			}
		}
		Dataflow_Op_Signature *sig = NULL;
		Dataflow_Status st = dataflow_op_signature_compile(text, &s, &sig);
		if (st != DATAFLOW_OK) {
			EXPECT_THAT(!sig && dataflow_last_error()[0], "a message for '%s'", text);
			continue;
		}
		compiled++;
		for (int v = 0; v < 4; v++) { /* checking any compiled program is safe for any values */
			int64_t ns[] = {3, 0, INT64_MAX, INT64_MIN};
			float es[] = {0.25f, NAN, -INFINITY, 1e30f};
			n = ns[v];
			eps = es[v];
			u = v == 2 ? UINT64_MAX : 5;
			b = v == 1 ? NULL : v == 3 ? mem_a + 1 : mem_a;
			int calls = 0;
			dataflow_op_signature_check(sig, &op, fake_range, &calls);
		}
		dataflow_op_signature_destroy(sig);
	}
	EXPECT_THAT(compiled > 100, "some mutations still compile (%d)", compiled);
}

int main(void)
{
	test_rms_norm();
	test_nullable_and_dtype();
	test_expressions();
	test_compile_errors();
	test_limits();
	test_fuzz();
	if (*c_test_failures()) {
		fprintf(stderr, "%d failures\n", *c_test_failures());
		return 1;
	}
	printf("ok\n");
	return 0;
}
