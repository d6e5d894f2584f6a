#ifndef DATAFLOW_OP_TABLE_H
#define DATAFLOW_OP_TABLE_H

/* Private to libdataflow: maps fingerprint -> the registered op's entry. The table keeps a copy
 * of the skeleton for lookups and error messages. Thread-safe: lookups run concurrently with
 * each other and with registration. */

#include "dataflow/backend.h"

#define OP_TABLE_INTERNAL __attribute__((visibility("hidden")))

OP_TABLE_INTERNAL Dataflow_Op_Table *dataflow_op_table_create(void);
/* Destroys every entry (op_entry_destroy), then frees the table. */
OP_TABLE_INTERNAL void dataflow_op_table_destroy(Dataflow_Op_Table *table);
/* Fails with DATAFLOW_ERR_ALREADY_REGISTERED unless replace is set; on replace the old entry
 * is returned in *old_entry, used by no submission any more (see acquire), for the caller to
 * release once no queued work uses it. */
OP_TABLE_INTERNAL Dataflow_Status dataflow_op_table_insert(Dataflow_Op_Table *table, Dataflow_Op_Entry *entry,
							   int replace, Dataflow_Op_Entry **old_entry);
/* The entry or NULL. */
OP_TABLE_INTERNAL Dataflow_Op_Entry *dataflow_op_table_lookup(Dataflow_Op_Table *table, const uint8_t *fingerprint);
/* Like lookup, and keeps the table read-locked until dataflow_op_table_release when it finds
 * the entry, so that a submission can use the entry while no registration replaces it. */
OP_TABLE_INTERNAL Dataflow_Op_Entry *dataflow_op_table_acquire(Dataflow_Op_Table *table, const uint8_t *fingerprint);
OP_TABLE_INTERNAL void dataflow_op_table_release(Dataflow_Op_Table *table);
/* Sets DATAFLOW_ERR_UNKNOWN_OP with a message naming the skeleton and the registered
 * variants that share its nickname; returns DATAFLOW_ERR_UNKNOWN_OP. */
OP_TABLE_INTERNAL Dataflow_Status dataflow_op_table_unknown_error(Dataflow_Op_Table *table, const Op_Skeleton *skeleton);

/* Checks a registration batch before anything is registered: num_ops > 0, skeletons and
 * symbols non-NULL, every skeleton well-formed with a matching fingerprint, no duplicates
 * within the batch, none already in the table unless replace. */
OP_TABLE_INTERNAL Dataflow_Status dataflow_op_table_check_batch(Dataflow_Op_Table *table, int num_ops,
								const Op_Skeleton *skeletons, const void *symbols,
								int replace);

#endif
