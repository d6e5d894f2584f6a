#ifndef DATAFLOW_OP_TABLE_H
#define DATAFLOW_OP_TABLE_H

#include "dataflow/op.h"

/* Maps fingerprint -> backend op reference. Backends store their own per-op record as the
 * value; the table keeps a copy of the skeleton for lookups and error messages.
 * Thread-safe: lookups may run concurrently with registration. */
typedef struct Dataflow_Op_Table Dataflow_Op_Table;

Dataflow_Op_Table *dataflow_op_table_create(void);
/* Calls value_destroy (if given) on every value, then frees the table. */
void dataflow_op_table_destroy(Dataflow_Op_Table *table, void (*value_destroy)(void *value));
/* Fails with DATAFLOW_ERR_ALREADY_REGISTERED unless replace is set; on replace the old value
 * is returned in *old_value (if not NULL) for the caller to release. */
Dataflow_Status dataflow_op_table_insert(Dataflow_Op_Table *table, const Op_Skeleton *skeleton, void *value,
					 int replace, void **old_value);
/* Returns the value or NULL. */
void *dataflow_op_table_lookup(Dataflow_Op_Table *table, const uint8_t *fingerprint);
int dataflow_op_table_count(Dataflow_Op_Table *table);
/* Sets DATAFLOW_ERR_UNKNOWN_OP with a message naming the skeleton and the registered
 * variants that share its nickname; returns DATAFLOW_ERR_UNKNOWN_OP. */
Dataflow_Status dataflow_op_table_unknown_error(Dataflow_Op_Table *table, const Op_Skeleton *skeleton);

/* Backend helpers shared by every backend's registration and submission. */

/* Checks a registration batch before anything is registered: num_ops > 0, skeletons and
 * symbols non-NULL, every skeleton well-formed with a matching fingerprint, no duplicates
 * within the batch, none already in the table unless replace. */
Dataflow_Status dataflow_op_table_check_batch(Dataflow_Op_Table *table, int num_ops, const Op_Skeleton *skeletons,
					      const void *symbols, int replace);
/* Checks an op against its registered skeleton and its arguments: arg count, every op_args
 * entry non-NULL, every non-NULL tensor argument accepted by check_tensor (which sets the
 * error; `what` names the argument). */
Dataflow_Status dataflow_op_check(const Op *op, const Op_Skeleton *registered,
				  Dataflow_Status (*check_tensor)(void *ctx, const void *ptr, const char *what),
				  void *ctx);

#endif
