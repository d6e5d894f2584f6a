#ifndef DATAFLOW_OP_SIGNATURE_PROGRAM_H
#define DATAFLOW_OP_SIGNATURE_PROGRAM_H

/* A compiled op signature (grammar and semantics in dataflow/op_signature.h): per argument its
 * role, nullability, aliases and extent, and the requirements, each expression a range of
 * postfix code in one array. op_signature_compile.c builds it; op_signature_check.c runs it
 * over a small value stack whose size the compiler bounds. */

#include "dataflow/op_signature.h"

#define MAX_NAME 63
#define MAX_DEPTH 32
#define MAX_CODE 4096
#define MAX_STACK 64
#define MAX_TEXT 65536
#define MAX_REQUIRES 64
#define MAX_EXPRS (DATAFLOW_MAX_OP_ARGS + MAX_REQUIRES)

typedef enum { T_INT, T_FLT } Type;

typedef enum {
	I_CONST, I_ARG, I_PRESENT, I_DTYPE, I_ITOF, I_ITOF2,
	I_ADD, I_SUB, I_MUL, I_DIV, I_MOD, I_CDIV, I_MIN, I_MAX, I_NEG,
	I_FADD, I_FSUB, I_FMUL, I_FDIV, I_FMIN, I_FMAX, I_FNEG,
	I_CMP, I_FCMP, /* operand: the outcomes (CMP_* bits) for which the comparison holds */
	I_NOT, I_FINITE, I_BOOL, I_JZ, I_JNZ
} Opcode;

/* outcomes of comparing two values; floats add unordered (a NaN) */
enum { CMP_LT = 1, CMP_EQ = 2, CMP_GT = 4, CMP_UNORDERED = 8 };

typedef union {
	int64_t i;
	double f;
} Value;

typedef struct {
	uint8_t op;
	int32_t a; /* argument index, jump target or comparison outcomes */
	Value k;
} Insn;

typedef struct {
	int start, end;	      /* code */
	int text, text_len;   /* source */
	uint32_t scalars;     /* scalar arguments it reads (bit per argument) */
	uint32_t present;     /* tensors in present() */
	uint32_t dtypes;      /* arguments in dtype() */
	int simple;	      /* "name cmp literal": its message says "name must be cmp literal" */
	int simple_arg;
	int cmp_tok, lit_tok; /* their text: token offsets into the source */
	int cmp_len, lit_len;
} Expr;

enum { ROLE_NONE, ROLE_IN, ROLE_OUT, ROLE_INOUT };

typedef struct {
	char name[MAX_NAME + 1];
	char label[DATAFLOW_MAX_OP_NICKNAME + MAX_NAME + 3]; /* "op: name" */
	int role; /* ROLE_NONE for scalars */
	int nullable;
	uint32_t aliases;
	int extent; /* expression index, tensors only */
} Sig_Arg;

struct Dataflow_Op_Signature {
	char op[DATAFLOW_MAX_OP_NICKNAME + 1];
	char *source;
	int num_args;
	DataflowDatatype dtypes[DATAFLOW_MAX_OP_ARGS];
	Sig_Arg args[DATAFLOW_MAX_OP_ARGS];
	int num_exprs, num_requires;
	Expr exprs[MAX_EXPRS];
	int requires[MAX_REQUIRES];
	Insn *code;
	int code_len, code_cap;
};

#endif
