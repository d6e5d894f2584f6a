#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/backend.h"

/* Backend options: "key=value,key=value" with numeric values. Parsed into a scratch array and
 * stored only once every pair is valid, so a bad string changes nothing. */

#define MAX_OPTIONS 32

static void list_keys(const Dataflow_Backend_Option *known, int n, char *buf, size_t size)
{
	size_t pos = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && pos < size; i++) {
		int w = snprintf(buf + pos, size - pos, "%s%s", i ? ", " : "", known[i].key);
		pos += w > 0 ? (size_t)w : 0;
	}
	if (n == 0)
		snprintf(buf, size, "none");
}

/* The known option named by text[0, len), or -1. */
static int find_key(const Dataflow_Backend_Option *known, int n, const char *text, size_t len)
{
	for (int i = 0; i < n; i++)
		if (strlen(known[i].key) == len && !strncmp(known[i].key, text, len))
			return i;
	return -1;
}

static Dataflow_Status parse_value(const char *backend, const Dataflow_Backend_Option *o, const char *text,
				   size_t len, double *value)
{
	char buf[64];
	if (len == 0 || len >= sizeof(buf))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s backend option %s: expected a number, got \"%.*s\"",
					  backend, o->key, (int)(len < sizeof(buf) ? len : sizeof(buf)), text);
	memcpy(buf, text, len);
	buf[len] = '\0';
	char *end;
	errno = 0;
	double v = strtod(buf, &end);
	if (*end || errno || !isfinite(v))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s backend option %s: expected a number, got \"%s\"",
					  backend, o->key, buf);
	if (o->integer && v != floor(v))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s backend option %s: expected a whole number, got %s", backend, o->key, buf);
	if (v < o->min || v > o->max)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s backend option %s: must be in [%g, %g], got %s",
					  backend, o->key, o->min, o->max, buf);
	*value = v;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_backend_options_parse(const char *backend, const char *options,
					       const Dataflow_Backend_Option *known, int num_known)
{
	double values[MAX_OPTIONS];
	int given[MAX_OPTIONS] = {0};
	if (num_known > MAX_OPTIONS)
		return dataflow_set_error(DATAFLOW_ERR_INTERNAL, "%s backend: more than %d options", backend, MAX_OPTIONS);
	for (const char *p = options ? options : ""; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		size_t key_len = eq ? (size_t)(eq - p) : len;
		int i = find_key(known, num_known, p, key_len);
		if (i < 0 || !eq) {
			char keys[512];
			list_keys(known, num_known, keys, sizeof(keys));
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  i < 0 ? "%s backend options: unknown option \"%.*s\"; known: %s"
							: "%s backend options: \"%.*s\" has no value (key=value); known: %s",
						  backend, (int)(i < 0 ? key_len : len), p, keys);
		}
		if (given[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s backend options: %s given twice",
						  backend, known[i].key);
		Dataflow_Status st = parse_value(backend, &known[i], eq + 1, len - key_len - 1, &values[i]);
		if (st != DATAFLOW_OK)
			return st;
		given[i] = 1;
		p += len + (end ? 1 : 0);
	}
	for (int i = 0; i < num_known; i++)
		if (given[i])
			*known[i].value = values[i];
	return DATAFLOW_OK;
}
