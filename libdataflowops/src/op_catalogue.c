/* The catalogue at run time: each variant's skeleton (with its fingerprint), built once on
 * first use, so a submit costs a variant lookup and a copy before dataflow_submit_op, which
 * checks the op against the signature it was registered with. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_catalogue_internal.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static Op_Skeleton *variants[DATAFLOW_NUM_DEFAULT_OPS];
static Dataflow_Status init_status;
static char init_message[1024];

static Dataflow_Status build_variant(const Dataflow_Op_Info *op, int v, Op_Skeleton *out)
{
	DataflowDatatype dtypes[DATAFLOW_MAX_OP_ARGS];
	for (int i = 0; i < op->num_args; i++) {
		const Dataflow_Op_Arg_Info *a = &op->args[i];
		dtypes[i] = a->slot >= 0 ? op->variants[v * op->num_slots + a->slot] : a->dtype;
	}
	return dataflow_op_skeleton_init(out, op->name, op->num_args, dtypes);
}

static void build_all(void)
{
	for (int i = 0; i < ops_catalogue_size && init_status == DATAFLOW_OK; i++) {
		const Dataflow_Op_Info *op = &ops_catalogue[i];
		variants[i] = calloc((size_t)op->num_variants, sizeof(Op_Skeleton));
		if (!variants[i]) {
			init_status = DATAFLOW_ERR_OUT_OF_MEMORY;
			snprintf(init_message, sizeof(init_message), "no memory for the op catalogue");
		}
		for (int v = 0; v < op->num_variants && init_status == DATAFLOW_OK; v++) {
			init_status = build_variant(op, v, &variants[i][v]);
			if (init_status != DATAFLOW_OK)
				snprintf(init_message, sizeof(init_message), "the op catalogue is broken: %s",
					 dataflow_last_error());
		}
	}
}

/* The op's index in the table, or -1 (with the error set) for anything else. */
static int ready(const Dataflow_Op_Info *op)
{
	pthread_once(&once, build_all);
	if (init_status != DATAFLOW_OK) {
		dataflow_set_error(init_status, "%s", init_message);
		return -1;
	}
	if (!op || op < ops_catalogue || op >= ops_catalogue + ops_catalogue_size) {
		dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op catalogue: %p is not one of its entries", (const void *)op);
		return -1;
	}
	return (int)(op - ops_catalogue);
}

const Op_Skeleton *ops_variant_skeleton(const Dataflow_Op_Info *op, int v)
{
	int i = ready(op);
	return i < 0 ? NULL : &variants[i][v];
}

/* "x/w/y": the arguments a slot types */
static void slot_label(const Dataflow_Op_Info *op, int slot, char *buf, size_t size)
{
	size_t pos = 0;
	buf[0] = 0;
	for (int i = 0; i < op->num_args && pos < size; i++) {
		if (op->args[i].slot != slot)
			continue;
		int n = snprintf(buf + pos, size - pos, "%s%s", pos ? "/" : "", op->args[i].name);
		pos += n > 0 ? (size_t)n : 0;
	}
}

/* Names the first slot no variant allows given the slots before it. */
static Dataflow_Status no_variant(const Dataflow_Op_Info *op, const DataflowDatatype *slots)
{
	for (int s = 0; s < op->num_slots; s++) {
		char allowed[256], label[128];
		unsigned char seen[128] = {0}; /* datatype values are below 128 */
		size_t pos = 0;
		int found = 0;
		allowed[0] = 0;
		for (int v = 0; v < op->num_variants; v++) {
			const DataflowDatatype *row = &op->variants[v * op->num_slots];
			if (memcmp(row, slots, (size_t)s * sizeof(*slots)))
				continue;
			found |= row[s] == slots[s];
			if (seen[row[s] & 127]++ || pos >= sizeof(allowed)) /* each once, in catalogue order */
				continue;
			int n = snprintf(allowed + pos, sizeof(allowed) - pos, "%s%s", pos ? ", " : "",
					 dataflow_datatype_name(row[s]));
			pos += n > 0 ? (size_t)n : 0;
		}
		if (found)
			continue;
		slot_label(op, s, label, sizeof(label));
		const char *got = dataflow_datatype_name(slots[s]);
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s dtype must be one of {%s}, got %s (%d)",
					  op->name, label, allowed, got ? got : "invalid", (int)slots[s]);
	}
	return dataflow_set_error(DATAFLOW_ERR_INTERNAL, "%s: no variant, yet every slot allowed", op->name);
}

static const Op_Skeleton *find_variant(const Dataflow_Op_Info *op, const DataflowDatatype *slots)
{
	int i = ready(op);
	if (i < 0)
		return NULL;
	for (int v = 0; v < op->num_variants; v++)
		if (!memcmp(&op->variants[v * op->num_slots], slots, (size_t)op->num_slots * sizeof(*slots)))
			return &variants[i][v];
	no_variant(op, slots);
	return NULL;
}

Dataflow_Status dataflow_op_catalogue_skeleton(const Dataflow_Op_Info *op, const DataflowDatatype *slot_dtypes,
					       Op_Skeleton *skeleton)
{
	if (!slot_dtypes || !skeleton)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op_catalogue_skeleton: %s is NULL",
					  skeleton ? "slot_dtypes" : "skeleton");
	const Op_Skeleton *v = find_variant(op, slot_dtypes);
	if (!v)
		return dataflow_last_status();
	*skeleton = *v;
	return DATAFLOW_OK;
}

/* The variant of op whose slots have slot_dtypes, with the argument pointers args. */
static Dataflow_Status ops_prepare(const Dataflow_Op_Info *op, const DataflowDatatype *slot_dtypes,
				   void *const *args, Op *out)
{
	const Op_Skeleton *v = find_variant(op, slot_dtypes);
	if (!v)
		return dataflow_last_status();
	out->skeleton = *v;
	memcpy(out->op_args, args, (size_t)op->num_args * sizeof(void *));
	return DATAFLOW_OK;
}

Dataflow_Status ops_submit(Dataflow_Handle *handle, int stream_id, const Dataflow_Op_Info *op,
			   const DataflowDatatype *slot_dtypes, void *const *args)
{
	Op o;
	Dataflow_Status st = ops_prepare(op, slot_dtypes, args, &o);
	return st == DATAFLOW_OK ? dataflow_submit_op(handle, &o, stream_id) : st;
}

Dataflow_Status ops_submit_composite(Dataflow_Handle *handle, int stream_id, int first,
				     const DataflowDatatype *first_slots, void *const *first_args, int second,
				     const DataflowDatatype *second_slots, void *const *second_args)
{
	Op a, b;
	Dataflow_Status st = ops_prepare(&ops_catalogue[first], first_slots, first_args, &a);
	if (st == DATAFLOW_OK)
		st = ops_prepare(&ops_catalogue[second], second_slots, second_args, &b);
	/* both checked before either is queued */
	if (st == DATAFLOW_OK)
		st = dataflow_op_check(handle, &a);
	if (st == DATAFLOW_OK)
		st = dataflow_op_check(handle, &b);
	if (st == DATAFLOW_OK)
		st = dataflow_submit_op(handle, &a, stream_id);
	return st == DATAFLOW_OK ? dataflow_submit_op(handle, &b, stream_id) : st;
}

int dataflow_op_catalogue_size(void)
{
	return ops_catalogue_size;
}

const Dataflow_Op_Info *dataflow_op_catalogue_entry(int index)
{
	return index >= 0 && index < ops_catalogue_size ? &ops_catalogue[index] : NULL;
}

const Dataflow_Op_Info *dataflow_op_catalogue_find(const char *name)
{
	for (int i = 0; name && i < ops_catalogue_size; i++)
		if (!strcmp(ops_catalogue[i].name, name))
			return &ops_catalogue[i];
	return NULL;
}
