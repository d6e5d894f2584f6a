#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/op_table.h"

/* Open addressing keyed by the fingerprint (already a uniform hash, so its first 8 bytes
 * index the slots). Grows at 50% load; a read-write lock lets lookups run concurrently. */
typedef struct {
	int used;
	Op_Skeleton skeleton;
	void *value;
} Slot;

struct Dataflow_Op_Table {
	pthread_rwlock_t lock;
	Slot *slots;
	size_t capacity; /* power of two */
	int count;
};

static size_t slot_index(const uint8_t *fingerprint, size_t capacity)
{
	uint64_t h;
	memcpy(&h, fingerprint, sizeof(h));
	return (size_t)(h & (capacity - 1));
}

static Slot *find_slot(Slot *slots, size_t capacity, const uint8_t *fingerprint)
{
	size_t i = slot_index(fingerprint, capacity);
	while (slots[i].used && memcmp(slots[i].skeleton.fingerprint, fingerprint, DATAFLOW_FINGERPRINT_BYTES) != 0)
		i = (i + 1) & (capacity - 1);
	return &slots[i];
}

Dataflow_Op_Table *dataflow_op_table_create(void)
{
	Dataflow_Op_Table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->capacity = 256;
	t->slots = calloc(t->capacity, sizeof(Slot));
	if (!t->slots) {
		free(t);
		return NULL;
	}
	pthread_rwlock_init(&t->lock, NULL);
	return t;
}

void dataflow_op_table_destroy(Dataflow_Op_Table *t, void (*value_destroy)(void *value))
{
	if (!t)
		return;
	for (size_t i = 0; i < t->capacity; i++)
		if (t->slots[i].used && value_destroy)
			value_destroy(t->slots[i].value);
	pthread_rwlock_destroy(&t->lock);
	free(t->slots);
	free(t);
}

static int grow(Dataflow_Op_Table *t)
{
	size_t capacity = t->capacity * 2;
	Slot *slots = calloc(capacity, sizeof(Slot));
	if (!slots)
		return 0;
	for (size_t i = 0; i < t->capacity; i++)
		if (t->slots[i].used)
			*find_slot(slots, capacity, t->slots[i].skeleton.fingerprint) = t->slots[i];
	free(t->slots);
	t->slots = slots;
	t->capacity = capacity;
	return 1;
}

Dataflow_Status dataflow_op_table_insert(Dataflow_Op_Table *t, const Op_Skeleton *skeleton, void *value,
					 int replace, void **old_value)
{
	if (old_value)
		*old_value = NULL;
	pthread_rwlock_wrlock(&t->lock);
	if (2 * (size_t)(t->count + 1) > t->capacity && !grow(t)) {
		pthread_rwlock_unlock(&t->lock);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "op table: cannot grow past %zu entries",
					  t->capacity / 2);
	}
	Slot *slot = find_slot(t->slots, t->capacity, skeleton->fingerprint);
	if (slot->used) {
		if (!replace) {
			char desc[512];
			dataflow_op_skeleton_describe(skeleton, desc, sizeof(desc));
			pthread_rwlock_unlock(&t->lock);
			return dataflow_set_error(DATAFLOW_ERR_ALREADY_REGISTERED,
						  "op %s is already registered on this handle (pass the replace "
						  "flag to override it)",
						  desc);
		}
		if (old_value)
			*old_value = slot->value;
	} else {
		t->count++;
	}
	slot->used = 1;
	slot->skeleton = *skeleton;
	slot->value = value;
	pthread_rwlock_unlock(&t->lock);
	return DATAFLOW_OK;
}

void *dataflow_op_table_lookup(Dataflow_Op_Table *t, const uint8_t *fingerprint)
{
	pthread_rwlock_rdlock(&t->lock);
	Slot *slot = find_slot(t->slots, t->capacity, fingerprint);
	void *value = slot->used ? slot->value : NULL;
	pthread_rwlock_unlock(&t->lock);
	return value;
}

int dataflow_op_table_count(Dataflow_Op_Table *t)
{
	pthread_rwlock_rdlock(&t->lock);
	int count = t->count;
	pthread_rwlock_unlock(&t->lock);
	return count;
}

Dataflow_Status dataflow_op_table_unknown_error(Dataflow_Op_Table *t, const Op_Skeleton *skeleton)
{
	char desc[512], hex[2 * DATAFLOW_FINGERPRINT_BYTES + 1], variants[640];
	size_t pos = 0;
	int listed = 0;
	dataflow_op_skeleton_describe(skeleton, desc, sizeof(desc));
	dataflow_fingerprint_hex(skeleton->fingerprint, hex);
	variants[0] = '\0';
	pthread_rwlock_rdlock(&t->lock);
	for (size_t i = 0; i < t->capacity && pos < sizeof(variants) - 1; i++) {
		if (!t->slots[i].used || strcmp(t->slots[i].skeleton.nickname, skeleton->nickname) != 0)
			continue;
		char one[512];
		dataflow_op_skeleton_describe(&t->slots[i].skeleton, one, sizeof(one));
		int n = snprintf(variants + pos, sizeof(variants) - pos, "%s%s", listed ? "; " : "", one);
		pos += n > 0 ? (size_t)n : 0;
		listed++;
	}
	pthread_rwlock_unlock(&t->lock);
	return dataflow_set_error(DATAFLOW_ERR_UNKNOWN_OP,
				  "no op registered with fingerprint %.16s... for %s; registered variants of '%s': %s", hex,
				  desc, skeleton->nickname, listed ? variants : "none");
}

static Dataflow_Status check_skeleton(const Op_Skeleton *s, int index)
{
	Op_Skeleton again;
	if (dataflow_op_skeleton_init(&again, s->nickname, s->num_args, s->arg_dtypes) != DATAFLOW_OK ||
	    memcmp(again.fingerprint, s->fingerprint, DATAFLOW_FINGERPRINT_BYTES) != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "register: skeleton %d ('%.63s') is not a valid skeleton or its fingerprint does "
					  "not match its contents (build it with dataflow_op_skeleton_init)",
					  index, s->nickname);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_op_table_check_batch(Dataflow_Op_Table *table, int num_ops, const Op_Skeleton *skeletons,
					      const void *symbols, int replace)
{
	if (num_ops <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: num_ops must be > 0, got %d",
					  num_ops);
	if (!skeletons || !symbols)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "register: skeletons and symbol arrays must not be NULL");
	for (int i = 0; i < num_ops; i++) {
		Dataflow_Status st = check_skeleton(&skeletons[i], i);
		if (st != DATAFLOW_OK)
			return st;
		for (int j = 0; j < i; j++)
			if (!memcmp(skeletons[i].fingerprint, skeletons[j].fingerprint, DATAFLOW_FINGERPRINT_BYTES))
				return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
							  "register: skeletons %d and %d are identical ('%s')", j, i,
							  skeletons[i].nickname);
		if (!replace && dataflow_op_table_lookup(table, skeletons[i].fingerprint)) {
			char desc[512];
			dataflow_op_skeleton_describe(&skeletons[i], desc, sizeof(desc));
			return dataflow_set_error(DATAFLOW_ERR_ALREADY_REGISTERED,
						  "register: op %s is already registered on this handle (pass "
						  "DATAFLOW_REGISTER_REPLACE to override it)",
						  desc);
		}
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_op_check(const Op *op, const Op_Skeleton *registered,
				  Dataflow_Status (*check_tensor)(void *ctx, const void *ptr, const char *what),
				  void *ctx)
{
	const Op_Skeleton *s = &op->skeleton;
	if (s->num_args != registered->num_args ||
	    memcmp(s->arg_dtypes, registered->arg_dtypes, (size_t)registered->num_args * sizeof(DataflowDatatype)) != 0) {
		char want[512];
		dataflow_op_skeleton_describe(registered, want, sizeof(want));
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_op: op has the fingerprint of %s but its skeleton says %d args; "
					  "rebuild the skeleton with dataflow_op_skeleton_init",
					  want, s->num_args);
	}
	for (int i = 0; i < s->num_args; i++) {
		const char *dt = dataflow_datatype_name(s->arg_dtypes[i]);
		if (!op->op_args[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s' argument %d (%s): op_args[%d] is NULL; expected a pointer to "
						  "the argument value",
						  s->nickname, i, dt, i);
		if (!dataflow_datatype_is_tensor(s->arg_dtypes[i]))
			continue;
		/* A NULL tensor is allowed (optional inputs); the op decides whether it needs it. */
		const void *ptr = *(void *const *)op->op_args[i];
		/* the message is only formatted for a bad pointer: this runs for every op */
		if (ptr && check_tensor(ctx, ptr, "op argument") != DATAFLOW_OK) {
			char what[128];
			snprintf(what, sizeof(what), "op '%s' argument %d (%s tensor)", s->nickname, i, dt);
			return check_tensor(ctx, ptr, what);
		}
	}
	return DATAFLOW_OK;
}
