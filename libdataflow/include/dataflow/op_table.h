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

#endif
