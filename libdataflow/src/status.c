#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dataflow/status.h"

/* One message per thread, so concurrent callers never see each other's errors. */
static _Thread_local char last_message[1024];
static _Thread_local Dataflow_Status last_status = DATAFLOW_OK;

const char *dataflow_last_error(void)
{
	return last_message;
}

Dataflow_Status dataflow_last_status(void)
{
	return last_status;
}

void dataflow_clear_error(void)
{
	last_message[0] = '\0';
	last_status = DATAFLOW_OK;
}

/* Formats into a separate buffer first: callers may pass dataflow_last_error() as an argument
 * (prefixing the error a callee set), and vsnprintf must not read the buffer it writes. */
Dataflow_Status dataflow_set_error(Dataflow_Status status, const char *fmt, ...)
{
	char formatted[sizeof(last_message)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(formatted, sizeof(formatted), fmt, ap);
	va_end(ap);
	memcpy(last_message, formatted, sizeof(last_message));
	last_status = status;
	return status;
}

const char *dataflow_status_name(Dataflow_Status status)
{
	switch (status) {
	case DATAFLOW_OK: return "ok";
	case DATAFLOW_ERR_INVALID_ARGUMENT: return "invalid argument";
	case DATAFLOW_ERR_OUT_OF_MEMORY: return "out of memory";
	case DATAFLOW_ERR_UNKNOWN_OP: return "unknown op";
	case DATAFLOW_ERR_ALREADY_REGISTERED: return "already registered";
	case DATAFLOW_ERR_LOAD_FAILED: return "load failed";
	case DATAFLOW_ERR_UNSUPPORTED: return "unsupported";
	case DATAFLOW_ERR_BACKEND: return "backend failure";
	case DATAFLOW_ERR_INTERNAL: return "internal error";
	}
	return "unknown status";
}
