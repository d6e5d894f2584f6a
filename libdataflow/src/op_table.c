#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handle_internal.h"

/* Open addressing keyed by the fingerprint (already a uniform hash, so its first 8 bytes
 * index the slots). Grows at 50% load; a read-write lock lets lookups run concurrently. */
typedef struct {
	int used;
	Op_Skeleton skeleton;
	Dataflow_Op_Entry *entry;
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

void dataflow_op_table_destroy(Dataflow_Op_Table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->capacity; i++)
		if (t->slots[i].used)
			op_entry_destroy(t->slots[i].entry);
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

Dataflow_Status dataflow_op_table_insert(Dataflow_Op_Table *t, Dataflow_Op_Entry *entry, int replace,
					 Dataflow_Op_Entry **old_entry)
{
	const Op_Skeleton *skeleton = &entry->skeleton;
	*old_entry = NULL;
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
		*old_entry = slot->entry;
	} else {
		t->count++;
	}
	slot->used = 1;
	slot->skeleton = *skeleton;
	slot->entry = entry;
	pthread_rwlock_unlock(&t->lock);
	return DATAFLOW_OK;
}

Dataflow_Op_Entry *dataflow_op_table_acquire(Dataflow_Op_Table *t, const uint8_t *fingerprint)
{
	pthread_rwlock_rdlock(&t->lock);
	Slot *slot = find_slot(t->slots, t->capacity, fingerprint);
	Dataflow_Op_Entry *entry = slot->used ? slot->entry : NULL;
	if (!entry)
		pthread_rwlock_unlock(&t->lock);
	return entry;
}

void dataflow_op_table_release(Dataflow_Op_Table *t)
{
	pthread_rwlock_unlock(&t->lock);
}

Dataflow_Op_Entry *dataflow_op_table_lookup(Dataflow_Op_Table *t, const uint8_t *fingerprint)
{
	Dataflow_Op_Entry *entry = dataflow_op_table_acquire(t, fingerprint);
	if (entry)
		dataflow_op_table_release(t);
	return entry;
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
