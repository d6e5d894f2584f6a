#ifndef DATAFLOW_OP_CATALOGUE_H
#define DATAFLOW_OP_CATALOGUE_H

/* The catalogue of default ops, as data (generated from libdataflowops/catalogue.toml): per op
 * its name, doc, signature (dataflow/op_signature.h), dtype slots, named arguments and the
 * variants a backend provides. dataflow_register_default_ops walks it, the generated
 * dataflow_<op>_skeleton and dataflow_submit_<op> (dataflow/default_ops.h) build on it, and
 * the Python wrappers read their argument lists from it. */

#include "dataflow/op.h"
#include "dataflow/status.h"

typedef enum { DATAFLOW_OP_NATIVE = 0, DATAFLOW_OP_EXTERNAL = 1 } Dataflow_Op_Kind;

typedef enum {
	DATAFLOW_ARG_SCALAR = 0,
	DATAFLOW_ARG_IN = 1,	/* a tensor the op reads */
	DATAFLOW_ARG_OUT = 2,	/* a tensor the op writes */
	DATAFLOW_ARG_INOUT = 3	/* a tensor the op reads and writes */
} Dataflow_Arg_Role;

typedef struct {
	const char *name;
	Dataflow_Arg_Role role;
	int nullable;		/* a tensor that may be NULL */
	DataflowDatatype dtype; /* the datatype, or DATAFLOW_NONE when a dtype slot gives it */
	int slot;		/* that slot's index, or -1 */
	const char *extent;	/* tensors: elements, as an expression over the scalars */
	int num_dims;		/* tensors: the shape, dims[0] outermost, each an expression over */
	const char *const *dims; /* the scalars (extent is their product); scalars: 0, NULL */
} Dataflow_Op_Arg_Info;

typedef struct {
	const char *name; /* the skeleton's nickname */
	const char *doc;
	const char *signature;
	Dataflow_Op_Kind kind;
	const char *part_of; /* the composite op submitting it, or NULL when it has dataflow_submit_<name> */
	int num_slots;
	const char *const *slot_names;
	int num_args;
	const Dataflow_Op_Arg_Info *args;
	int num_variants;
	const DataflowDatatype *variants; /* num_variants rows of num_slots dtypes */
	/* per variant, the kernel symbol's suffix: a native op's variant v runs
	 * dataflow_<backend>_<name>_<variant_symbols[v]> (launch dataflow_<backend>_<name>_launch);
	 * an external op is dataflow_<backend>_<name> (init dataflow_<backend>_<name>_init) */
	const char *const *variant_symbols;
} Dataflow_Op_Info;

int dataflow_op_catalogue_size(void);
/* The op at index (0 .. size - 1; DATAFLOW_OP_<NAME> in dataflow/default_ops.h), NULL outside. */
const Dataflow_Op_Info *dataflow_op_catalogue_entry(int index);
/* The op of that name, or NULL. */
const Dataflow_Op_Info *dataflow_op_catalogue_find(const char *name);
/* The skeleton of op's variant whose slots have slot_dtypes (op->num_slots of them). When no
 * variant has them, fails naming the first slot that no variant allows given the ones
 * before it ("<op>: <args typed by it> dtype must be one of {...}, got <dtype>"). */
Dataflow_Status dataflow_op_catalogue_skeleton(const Dataflow_Op_Info *op, const DataflowDatatype *slot_dtypes,
					       Op_Skeleton *skeleton);

#endif
