#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "dataflow/op.h"

/* Canonical encoding hashed into the fingerprint (version 1):
 *   "DFOP" | u8 version | u8 nickname length | nickname bytes | u8 num_args |
 *   num_args x u16 little-endian datatype value
 * Byte-oriented, so it is identical on every platform. */
static size_t encode_skeleton(const Op_Skeleton *s, uint8_t *buf)
{
	size_t len = strlen(s->nickname), pos = 0;
	memcpy(buf, "DFOP", 4);
	pos = 4;
	buf[pos++] = DATAFLOW_SKELETON_ENCODING_VERSION;
	buf[pos++] = (uint8_t)len;
	memcpy(buf + pos, s->nickname, len);
	pos += len;
	buf[pos++] = (uint8_t)s->num_args;
	for (int i = 0; i < s->num_args; i++) {
		buf[pos++] = (uint8_t)(s->arg_dtypes[i] & 0xff);
		buf[pos++] = (uint8_t)((unsigned)s->arg_dtypes[i] >> 8);
	}
	return pos;
}

static int nickname_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
	       c == '-';
}

Dataflow_Status dataflow_op_skeleton_init(Op_Skeleton *skeleton, const char *nickname, int num_args,
					  const DataflowDatatype *arg_dtypes)
{
	if (!skeleton)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op skeleton: skeleton pointer is NULL");
	if (!nickname)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op skeleton: nickname is NULL");
	size_t len = strlen(nickname);
	if (len == 0 || len > DATAFLOW_MAX_OP_NICKNAME)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "op skeleton: nickname length must be 1..%d, got %zu", DATAFLOW_MAX_OP_NICKNAME,
					  len);
	for (size_t i = 0; i < len; i++)
		if (!nickname_char_ok(nickname[i]))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op skeleton: nickname '%s' has character '%c' at %zu; expected "
						  "[A-Za-z0-9_.-]",
						  nickname, nickname[i], i);
	if (num_args < 0 || num_args > DATAFLOW_MAX_OP_ARGS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "op skeleton '%s': num_args must be 0..%d, got %d", nickname,
					  DATAFLOW_MAX_OP_ARGS, num_args);
	if (num_args > 0 && !arg_dtypes)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "op skeleton '%s': arg_dtypes is NULL",
					  nickname);
	for (int i = 0; i < num_args; i++)
		if (dataflow_datatype_size(arg_dtypes[i]) == 0)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op skeleton '%s': argument %d has invalid datatype %d", nickname,
						  i, (int)arg_dtypes[i]);

	memset(skeleton, 0, sizeof(*skeleton));
	memcpy(skeleton->nickname, nickname, len);
	skeleton->num_args = num_args;
	for (int i = 0; i < num_args; i++)
		skeleton->arg_dtypes[i] = arg_dtypes[i];

	uint8_t buf[4 + 2 + DATAFLOW_MAX_OP_NICKNAME + 1 + 2 * DATAFLOW_MAX_OP_ARGS];
	size_t n = encode_skeleton(skeleton, buf);
	unsigned int out_len = 0;
	if (!EVP_Digest(buf, n, skeleton->fingerprint, &out_len, EVP_sha256(), NULL) ||
	    out_len != DATAFLOW_FINGERPRINT_BYTES)
		return dataflow_set_error(DATAFLOW_ERR_INTERNAL, "op skeleton '%s': SHA-256 failed in libcrypto",
					  nickname);
	return DATAFLOW_OK;
}

void dataflow_fingerprint_hex(const uint8_t *fingerprint, char *hex)
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < DATAFLOW_FINGERPRINT_BYTES; i++) {
		hex[2 * i] = digits[fingerprint[i] >> 4];
		hex[2 * i + 1] = digits[fingerprint[i] & 15];
	}
	hex[2 * DATAFLOW_FINGERPRINT_BYTES] = '\0';
}

void dataflow_op_skeleton_describe(const Op_Skeleton *skeleton, char *buf, int buf_size)
{
	if (buf_size <= 0)
		return;
	int pos = snprintf(buf, (size_t)buf_size, "%s(", skeleton->nickname);
	for (int i = 0; i < skeleton->num_args && pos < buf_size; i++) {
		const char *name = dataflow_datatype_name(skeleton->arg_dtypes[i]);
		pos += snprintf(buf + pos, (size_t)(buf_size - pos), "%s%s", i ? ", " : "", name ? name : "?");
	}
	if (pos < buf_size)
		snprintf(buf + pos, (size_t)(buf_size - pos), ")");
}
