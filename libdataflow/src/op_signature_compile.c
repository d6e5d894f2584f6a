/* Compiles op signature text (grammar in dataflow/op_signature.h): the text is tokenized,
 * then parsed by recursive descent with a depth limit into postfix code per expression, typed
 * (integer or float) at compile time; hostile text fails with a message, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_signature_program.h"

enum {
	TK_END, TK_NAME, TK_INT, TK_FLT,
	TK_SEMI, TK_COLON, TK_QUESTION, TK_LBRACKET, TK_RBRACKET, TK_COMMA, TK_LPAREN, TK_RPAREN,
	TK_PLUS, TK_MINUS, TK_STAR, TK_SLASH, TK_PERCENT,
	TK_LT, TK_LE, TK_GT, TK_GE, TK_EQ, TK_NE, TK_AND, TK_OR, TK_NOT
};

typedef struct {
	int kind, start, len;
	Value v;
} Token;

typedef struct {
	const char *text;
	Dataflow_Op_Signature *sig;
	const Op_Skeleton *sk;
	Token *tok;
	int ntok, pos;
	int depth, sp, max_sp;
	Expr *expr; /* the expression being compiled */
	int failed;
} Parser;

static int fail(Parser *p, int offset, const char *fmt, const char *detail)
{
	if (p->failed)
		return -1;
	p->failed = 1;
	char what[160];
	snprintf(what, sizeof(what), fmt, detail ? detail : "");
	int len = (int)strlen(p->text);
	offset = offset < 0 ? 0 : offset > len ? len : offset;
	dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: signature error at offset %d (near '%.24s'): %s",
			   p->sk->nickname, offset, p->text + offset, what);
	return -1;
}

static int is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int tokenize(Parser *p)
{
	static const struct {
		const char *text;
		int kind;
	} puncts[] = {{"<=", TK_LE}, {">=", TK_GE}, {"==", TK_EQ}, {"!=", TK_NE}, {"&&", TK_AND}, {"||", TK_OR},
		      {";", TK_SEMI},	{":", TK_COLON}, {"?", TK_QUESTION}, {"[", TK_LBRACKET}, {"]", TK_RBRACKET},
		      {",", TK_COMMA},	{"(", TK_LPAREN}, {")", TK_RPAREN},   {"+", TK_PLUS},	    {"-", TK_MINUS},
		      {"*", TK_STAR},	{"/", TK_SLASH},  {"%", TK_PERCENT},  {"<", TK_LT},	    {">", TK_GT},
		      {"!", TK_NOT}};
	const char *s = p->text;
	int n = 0;
	for (int i = 0;;) {
		while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
			i++;
		Token *t = &p->tok[n++];
		t->start = i;
		t->v.i = 0;
		if (!s[i]) {
			t->kind = TK_END;
			t->len = 0;
			p->ntok = n;
			return 0;
		}
		if (is_name_start(s[i])) {
			int j = i;
			while (is_name_start(s[j]) || is_digit(s[j]))
				j++;
			if (j - i > MAX_NAME)
				return fail(p, i, "a name is longer than 63 characters%s", NULL);
			t->kind = TK_NAME;
			t->len = j - i;
			i = j;
			continue;
		}
		if (is_digit(s[i])) {
			int j = i, is_float = 0;
			int64_t v = 0;
			while (is_digit(s[j])) {
				if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[j] - '0', &v))
					is_float = -1;
				j++;
			}
			if (s[j] == '.') {
				is_float = 1;
				for (j++; is_digit(s[j]); j++)
					;
			}
			if (s[j] == 'e' || s[j] == 'E') {
				int k = j + 1 + (s[j + 1] == '+' || s[j + 1] == '-');
				if (!is_digit(s[k]))
					return fail(p, i, "malformed number%s", NULL);
				for (j = k; is_digit(s[j]); j++)
					;
				is_float = 1;
			}
			if (is_name_start(s[j]) || s[j] == '.')
				return fail(p, i, "malformed number%s", NULL);
			if (is_float < 0)
				return fail(p, i, "integer literal beyond int64%s", NULL);
			t->len = j - i;
			if (is_float) {
				char buf[64];
				if (t->len >= (int)sizeof(buf))
					return fail(p, i, "number longer than 63 characters%s", NULL);
				memcpy(buf, s + i, (size_t)t->len);
				buf[t->len] = 0;
				t->kind = TK_FLT;
				t->v.f = strtod(buf, NULL);
			} else {
				t->kind = TK_INT;
				t->v.i = v;
			}
			i = j;
			continue;
		}
		int matched = 0;
		for (size_t k = 0; k < sizeof(puncts) / sizeof(puncts[0]) && !matched; k++) {
			size_t len = strlen(puncts[k].text);
			if (!strncmp(s + i, puncts[k].text, len)) {
				t->kind = puncts[k].kind;
				t->len = (int)len;
				i += (int)len;
				matched = 1;
			}
		}
		if (!matched) {
			char c[8];
			unsigned char u = (unsigned char)s[i];
			snprintf(c, sizeof(c), u >= 32 && u < 127 ? "'%c'" : "0x%02x", u);
			return fail(p, i, "unexpected character %s", c);
		}
	}
}

static const Token *peek(const Parser *p)
{
	return &p->tok[p->pos];
}

static int accept(Parser *p, int kind)
{
	if (p->tok[p->pos].kind != kind)
		return 0;
	p->pos++;
	return 1;
}

static int name_is(const Parser *p, const Token *t, const char *name)
{
	return t->kind == TK_NAME && (size_t)t->len == strlen(name) && !strncmp(p->text + t->start, name, (size_t)t->len);
}

static int find_arg(const Parser *p, const Token *t)
{
	for (int i = 0; i < p->sig->num_args; i++)
		if (name_is(p, t, p->sig->args[i].name))
			return i;
	return -1;
}

/* ---------------------------------------------------------------- code */

static int stack_effect(int op)
{
	switch (op) {
	case I_CONST:
	case I_ARG:
	case I_PRESENT:
	case I_DTYPE:
		return 1;
	case I_ITOF:
	case I_ITOF2:
	case I_NEG:
	case I_FNEG:
	case I_NOT:
	case I_FINITE:
	case I_BOOL:
		return 0;
	default: /* binary operations; a conditional jump pops when it falls through */
		return -1;
	}
}

static int emit(Parser *p, int op, int32_t a, Value k)
{
	Dataflow_Op_Signature *s = p->sig;
	if (s->code_len == MAX_CODE)
		return fail(p, peek(p)->start, "the signature needs more than 4096 instructions%s", NULL);
	if (s->code_len == s->code_cap) {
		int cap = s->code_cap ? s->code_cap * 2 : 64;
		Insn *code = realloc(s->code, (size_t)cap * sizeof(Insn));
		if (!code) {
			p->failed = 1;
			dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory to compile the signature", s->op);
			return -1;
		}
		s->code = code;
		s->code_cap = cap;
	}
	s->code[s->code_len++] = (Insn){(uint8_t)op, a, k};
	p->sp += stack_effect(op);
	if (p->sp > p->max_sp)
		p->max_sp = p->sp;
	if (p->max_sp > MAX_STACK)
		return fail(p, peek(p)->start, "expression too complex (needs more than 64 stack values)%s", NULL);
	return s->code_len - 1;
}

static int emit0(Parser *p, int op)
{
	return emit(p, op, 0, (Value){0});
}

/* ---------------------------------------------------------------- expressions */

static int parse_or(Parser *p);

static int enter(Parser *p)
{
	if (++p->depth > MAX_DEPTH)
		return fail(p, peek(p)->start, "expression nested more than 32 deep%s", NULL);
	return 0;
}

static int want_int(Parser *p, int type, int at, const char *what)
{
	if (type == T_INT)
		return 0;
	return fail(p, at, "%s wants integer operands, got a float", what);
}

/* Brings both operands of a binary operation to one type and emits it with operand a (a
 * comparison's outcomes, which make it integer-valued); returns the result type. fop < 0:
 * integers only. */
static int binary_op(Parser *p, int lt, int rt, int iop, int fop, int32_t a, int at, const char *what)
{
	if (lt < 0 || rt < 0)
		return -1;
	if (lt == T_INT && rt == T_INT)
		return emit(p, iop, a, (Value){0}) < 0 ? -1 : T_INT;
	if (fop < 0)
		return want_int(p, T_FLT, at, what);
	if ((lt == T_INT && emit0(p, I_ITOF2) < 0) || (rt == T_INT && emit0(p, I_ITOF) < 0) ||
	    emit(p, fop, a, (Value){0}) < 0)
		return -1;
	return fop == I_FCMP ? T_INT : T_FLT;
}

static int binary(Parser *p, int lt, int rt, int iop, int fop, int at, const char *what)
{
	return binary_op(p, lt, rt, iop, fop, 0, at, what);
}

static int parse_call(Parser *p, const Token *name)
{
	static const struct {
		const char *name;
		int iop, fop;
	} two[] = {{"cdiv", I_CDIV, -1}, {"min", I_MIN, I_FMIN}, {"max", I_MAX, I_FMAX}};
	p->pos++; /* the name; '(' is next */
	p->pos++;
	int type = -1;
	for (size_t k = 0; k < sizeof(two) / sizeof(two[0]); k++) {
		if (!name_is(p, name, two[k].name))
			continue;
		int lt = parse_or(p);
		if (lt < 0)
			return -1;
		if (!accept(p, TK_COMMA))
			return fail(p, peek(p)->start, "expected ',' in %s()", two[k].name);
		int rt = parse_or(p);
		type = binary(p, lt, rt, two[k].iop, two[k].fop, name->start, two[k].name);
		break;
	}
	if (name_is(p, name, "finite")) {
		int t = parse_or(p);
		if (t < 0 || (t == T_INT && emit0(p, I_ITOF) < 0) || emit0(p, I_FINITE) < 0)
			return -1;
		type = T_INT;
	} else if (name_is(p, name, "present") || name_is(p, name, "dtype")) {
		int is_present = name_is(p, name, "present");
		const Token *t = peek(p);
		int arg = t->kind == TK_NAME ? find_arg(p, t) : -1;
		if (arg < 0)
			return fail(p, t->start, "%s() wants an argument name", is_present ? "present" : "dtype");
		if (is_present && p->sig->args[arg].role == ROLE_NONE)
			return fail(p, t->start, "present() wants a tensor, %s is a scalar", p->sig->args[arg].name);
		p->pos++;
		if (emit(p, is_present ? I_PRESENT : I_DTYPE, arg, (Value){0}) < 0)
			return -1;
		if (is_present)
			p->expr->present |= 1u << arg;
		else
			p->expr->dtypes |= 1u << arg;
		type = T_INT;
	}
	if (type < 0)
		return -1;
	if (!accept(p, TK_RPAREN))
		return fail(p, peek(p)->start, "expected ')'%s", NULL);
	return type;
}

static int is_function(const Parser *p, const Token *t)
{
	static const char *const names[] = {"cdiv", "min", "max", "finite", "present", "dtype"};
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		if (name_is(p, t, names[k]))
			return 1;
	return 0;
}

static int parse_primary(Parser *p)
{
	const Token *t = peek(p);
	if (t->kind == TK_INT || t->kind == TK_FLT) {
		p->pos++;
		return emit(p, I_CONST, 0, t->v) < 0 ? -1 : t->kind == TK_INT ? T_INT : T_FLT;
	}
	if (t->kind == TK_LPAREN) {
		p->pos++;
		if (enter(p) < 0)
			return -1;
		int type = parse_or(p);
		p->depth--;
		if (type >= 0 && !accept(p, TK_RPAREN))
			return fail(p, peek(p)->start, "expected ')'%s", NULL);
		return type;
	}
	if (t->kind != TK_NAME)
		return fail(p, t->start, "expected a number, a name or '('%s", NULL);
	if (is_function(p, t) && p->tok[p->pos + 1].kind == TK_LPAREN) {
		if (enter(p) < 0)
			return -1;
		int type = parse_call(p, t);
		p->depth--;
		return type;
	}
	int arg = find_arg(p, t);
	if (arg >= 0) {
		if (p->sig->args[arg].role != ROLE_NONE)
			return fail(p, t->start, "tensor %s may only appear in present() or dtype()", p->sig->args[arg].name);
		p->pos++;
		p->expr->scalars |= 1u << arg;
		DataflowDatatype dt = p->sig->dtypes[arg];
		int type = dt == DATAFLOW_FP32_SCALAR || dt == DATAFLOW_FP64_SCALAR ? T_FLT : T_INT;
		return emit(p, I_ARG, arg, (Value){0}) < 0 ? -1 : type;
	}
	char name[MAX_NAME + 1];
	snprintf(name, sizeof(name), "%.*s", t->len, p->text + t->start);
	DataflowDatatype dt = dataflow_datatype_from_name(name);
	if (dt == DATAFLOW_NONE)
		return fail(p, t->start, "unknown name '%s' (not an argument or a datatype)", name);
	p->pos++;
	return emit(p, I_CONST, 0, (Value){.i = dt}) < 0 ? -1 : T_INT;
}

static int parse_unary(Parser *p)
{
	const Token *t = peek(p);
	if (t->kind != TK_MINUS && t->kind != TK_NOT)
		return parse_primary(p);
	p->pos++;
	if (enter(p) < 0)
		return -1;
	int type = parse_unary(p);
	p->depth--;
	if (type < 0)
		return -1;
	if (t->kind == TK_NOT)
		return want_int(p, type, t->start, "!") < 0 || emit0(p, I_NOT) < 0 ? -1 : T_INT;
	return emit0(p, type == T_INT ? I_NEG : I_FNEG) < 0 ? -1 : type;
}

static int parse_product(Parser *p)
{
	int lt = parse_unary(p);
	for (;;) {
		const Token *t = peek(p);
		if (lt < 0 || (t->kind != TK_STAR && t->kind != TK_SLASH && t->kind != TK_PERCENT))
			return lt;
		p->pos++;
		int rt = parse_unary(p);
		if (t->kind == TK_STAR)
			lt = binary(p, lt, rt, I_MUL, I_FMUL, t->start, "*");
		else if (t->kind == TK_SLASH)
			lt = binary(p, lt, rt, I_DIV, I_FDIV, t->start, "/");
		else
			lt = binary(p, lt, rt, I_MOD, -1, t->start, "%");
	}
}

static int parse_sum(Parser *p)
{
	int lt = parse_product(p);
	for (;;) {
		const Token *t = peek(p);
		if (lt < 0 || (t->kind != TK_PLUS && t->kind != TK_MINUS))
			return lt;
		p->pos++;
		int rt = parse_product(p);
		lt = t->kind == TK_PLUS ? binary(p, lt, rt, I_ADD, I_FADD, t->start, "+")
					: binary(p, lt, rt, I_SUB, I_FSUB, t->start, "-");
	}
}

static int parse_cmp(Parser *p)
{
	static const int kinds[] = {TK_EQ, TK_NE, TK_LT, TK_LE, TK_GT, TK_GE};
	static const int32_t holds[] = {CMP_EQ, CMP_LT | CMP_GT | CMP_UNORDERED, CMP_LT, CMP_LT | CMP_EQ, CMP_GT,
					CMP_GT | CMP_EQ};
	int lt = parse_sum(p);
	const Token *t = peek(p);
	for (int k = 0; lt >= 0 && k < 6; k++) {
		if (t->kind != kinds[k])
			continue;
		p->pos++;
		int rt = parse_sum(p);
		return binary_op(p, lt, rt, I_CMP, I_FCMP, holds[k], t->start, "a comparison");
	}
	return lt;
}

/* a && b: a; JZ end (keeps the 0); b; BOOL. a || b: a; JNZ end (leaves 1); b; BOOL. */
static int parse_logical(Parser *p, int kind, int jump, int (*operand)(Parser *))
{
	int lt = operand(p);
	while (lt >= 0 && peek(p)->kind == kind) {
		const Token *t = &p->tok[p->pos++];
		const char *what = kind == TK_AND ? "&&" : "||";
		if (want_int(p, lt, t->start, what) < 0)
			return -1;
		int at = emit0(p, jump);
		int rt = at < 0 ? -1 : operand(p);
		if (rt < 0 || want_int(p, rt, t->start, what) < 0 || emit0(p, I_BOOL) < 0)
			return -1;
		p->sig->code[at].a = p->sig->code_len;
		lt = T_INT;
	}
	return lt;
}

static int parse_and(Parser *p)
{
	return parse_logical(p, TK_AND, I_JZ, parse_cmp);
}

static int parse_or(Parser *p)
{
	return parse_logical(p, TK_OR, I_JNZ, parse_and);
}

/* Compiles one integer expression into a new Expr; returns its index. */
static int parse_expr(Parser *p, const char *what)
{
	Dataflow_Op_Signature *s = p->sig;
	Expr *e = &s->exprs[s->num_exprs];
	memset(e, 0, sizeof(*e));
	p->expr = e;
	p->sp = p->max_sp = 0;
	int first = p->pos;
	e->start = s->code_len;
	e->text = peek(p)->start;
	int type = parse_or(p);
	if (type < 0)
		return -1;
	if (type != T_INT)
		return fail(p, e->text, "%s must be an integer expression", what);
	const Token *last = &p->tok[p->pos - 1];
	e->end = s->code_len;
	e->text_len = last->start + last->len - e->text;
	/* name cmp literal, or name cmp -literal */
	const Token *t = &p->tok[first];
	int n = p->pos - first, lit = first + 2 + (n == 4);
	if ((n == 3 || (n == 4 && t[2].kind == TK_MINUS)) && t[0].kind == TK_NAME && t[1].kind >= TK_LT &&
	    t[1].kind <= TK_NE && (p->tok[lit].kind == TK_INT || p->tok[lit].kind == TK_FLT) &&
	    __builtin_popcount(e->scalars) == 1) {
		e->simple = 1;
		e->simple_arg = __builtin_ctz(e->scalars);
		e->cmp_tok = t[1].start;
		e->cmp_len = t[1].len;
		e->lit_tok = t[2].start;
		e->lit_len = p->tok[lit].start + p->tok[lit].len - t[2].start;
	}
	return s->num_exprs++;
}

/* ---------------------------------------------------------------- clauses */

static int clause_end(const Parser *p)
{
	int k = peek(p)->kind;
	return k == TK_SEMI || k == TK_END;
}

static int parse_arg(Parser *p, int i)
{
	Dataflow_Op_Signature *s = p->sig;
	Sig_Arg *a = &s->args[i];
	const Token *name = &p->tok[p->pos++];
	int tensor = dataflow_datatype_is_tensor(s->dtypes[i]);
	const char *dt = dataflow_datatype_name(s->dtypes[i]);
	if (clause_end(p)) {
		if (tensor)
			return fail(p, name->start, "argument is a tensor (%s): write name: in|out|inout[extent]", dt);
		return 0;
	}
	if (!accept(p, TK_COLON))
		return fail(p, peek(p)->start, "expected ':' or ';' after an argument name%s", NULL);
	if (!tensor)
		return fail(p, name->start, "argument is a scalar (%s): write just its name", dt);
	const Token *role = peek(p);
	a->role = name_is(p, role, "in") ? ROLE_IN : name_is(p, role, "out") ? ROLE_OUT : name_is(p, role, "inout") ? ROLE_INOUT : ROLE_NONE;
	if (a->role == ROLE_NONE)
		return fail(p, role->start, "expected in, out or inout%s", NULL);
	p->pos++;
	a->nullable = accept(p, TK_QUESTION);
	if (!accept(p, TK_LBRACKET))
		return fail(p, peek(p)->start, "expected '[' and the extent%s", NULL);
	a->extent = parse_expr(p, "an extent");
	if (a->extent < 0)
		return -1;
	if (!accept(p, TK_RBRACKET))
		return fail(p, peek(p)->start, "expected ']'%s", NULL);
	if (name_is(p, peek(p), "alias")) {
		if (a->role == ROLE_IN)
			return fail(p, peek(p)->start, "only out and inout tensors declare aliases%s", NULL);
		p->pos++;
		do {
			const Token *t = peek(p);
			int j = t->kind == TK_NAME ? find_arg(p, t) : -1;
			if (j < 0 || j == i || !dataflow_datatype_is_tensor(s->dtypes[j]))
				return fail(p, t->start, "an alias must name another tensor argument%s", NULL);
			a->aliases |= 1u << j;
			p->pos++;
		} while (accept(p, TK_COMMA));
	}
	if (!clause_end(p))
		return fail(p, peek(p)->start, "expected ';'%s", NULL);
	return 0;
}

/* Records the argument names (clauses before the first requirement), so expressions may
 * name arguments declared after them. */
static int scan_names(Parser *p)
{
	Dataflow_Op_Signature *s = p->sig;
	int n = 0, in_requires = 0;
	for (int i = 0; p->tok[i].kind != TK_END;) {
		const Token *t = &p->tok[i];
		if (t->kind == TK_SEMI) { /* only a trailing ';' may end nothing */
			if (i == 0 || p->tok[i + 1].kind != TK_END)
				return fail(p, t->start, "empty clause%s", NULL);
			break;
		}
		if (name_is(p, t, "require")) {
			in_requires = 1;
		} else {
			if (t->kind != TK_NAME)
				return fail(p, t->start, "a clause starts with an argument name or 'require'%s", NULL);
			if (in_requires)
				return fail(p, t->start, "argument clauses come before the requirements%s", NULL);
			if (n == p->sk->num_args) {
				char count[64];
				snprintf(count, sizeof(count), "more argument clauses than the skeleton's %d arguments",
					 p->sk->num_args);
				return fail(p, t->start, "%s", count);
			}
			snprintf(s->args[n].name, sizeof(s->args[n].name), "%.*s", t->len, p->text + t->start);
			for (int j = 0; j < n; j++)
				if (!strcmp(s->args[j].name, s->args[n].name))
					return fail(p, t->start, "argument name %s used twice", s->args[n].name);
			snprintf(s->args[n].label, sizeof(s->args[n].label), "%s: %.*s", p->sk->nickname, t->len,
				 p->text + t->start);
			s->args[n].extent = -1;
			n++;
		}
		while (p->tok[i].kind != TK_SEMI && p->tok[i].kind != TK_END)
			i++;
		if (p->tok[i].kind == TK_SEMI)
			i++;
	}
	if (n != p->sk->num_args) {
		char counts[64];
		snprintf(counts, sizeof(counts), "%d argument clauses for %d arguments", n, p->sk->num_args);
		return fail(p, (int)strlen(p->text), "%s", counts);
	}
	s->num_args = n;
	return 0;
}

static int parse_signature(Parser *p)
{
	if (tokenize(p) < 0 || scan_names(p) < 0)
		return -1;
	Dataflow_Op_Signature *s = p->sig;
	for (int i = 0; i < s->num_args; i++) {
		if (parse_arg(p, i) < 0)
			return -1;
		accept(p, TK_SEMI);
	}
	while (peek(p)->kind != TK_END) {
		if (!name_is(p, peek(p), "require"))
			return fail(p, peek(p)->start, "expected 'require'%s", NULL);
		p->pos++;
		if (s->num_requires == MAX_REQUIRES)
			return fail(p, peek(p)->start, "more than 64 requirements%s", NULL);
		int e = parse_expr(p, "a requirement");
		if (e < 0)
			return -1;
		s->requires[s->num_requires++] = e;
		if (!clause_end(p))
			return fail(p, peek(p)->start, "expected ';' after a requirement%s", NULL);
		accept(p, TK_SEMI);
	}
	return 0;
}

Dataflow_Status dataflow_op_signature_compile(const char *text, const Op_Skeleton *skeleton,
					      Dataflow_Op_Signature **signature)
{
	if (!signature)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op_signature_compile: signature is NULL");
	*signature = NULL;
	if (!text || !skeleton)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op_signature_compile: %s is NULL",
					  text ? "skeleton" : "text");
	if (skeleton->num_args < 0 || skeleton->num_args > DATAFLOW_MAX_OP_ARGS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op_signature_compile: %s: num_args %d",
					  skeleton->nickname, skeleton->num_args);
	size_t len = strnlen(text, MAX_TEXT + 1);
	if (len > MAX_TEXT)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: signature longer than %d characters", skeleton->nickname, MAX_TEXT);
	Dataflow_Op_Signature *s = calloc(1, sizeof(*s));
	Token *tok = malloc((len + 1) * sizeof(Token));
	char *source = malloc(len + 1);
	if (!s || !tok || !source) {
		free(s);
		free(tok);
		free(source);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory to compile the signature",
					  skeleton->nickname);
	}
	memcpy(source, text, len + 1);
	s->source = source;
	snprintf(s->op, sizeof(s->op), "%s", skeleton->nickname);
	memcpy(s->dtypes, skeleton->arg_dtypes, sizeof(s->dtypes));
	Parser p = {.text = source, .sig = s, .sk = skeleton, .tok = tok};
	int rc = parse_signature(&p);
	free(tok);
	if (rc < 0) {
		dataflow_op_signature_destroy(s);
		return dataflow_last_status();
	}
	*signature = s;
	return DATAFLOW_OK;
}

void dataflow_op_signature_destroy(Dataflow_Op_Signature *signature)
{
	if (!signature)
		return;
	free(signature->code);
	free(signature->source);
	free(signature);
}
