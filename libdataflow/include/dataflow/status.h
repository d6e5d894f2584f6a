#ifndef DATAFLOW_STATUS_H
#define DATAFLOW_STATUS_H

/* Every entry point returns a Dataflow_Status; on failure a thread-local message
 * (what, which argument, expected vs got) is available from dataflow_last_error(). */

typedef enum {
	DATAFLOW_OK = 0,
	DATAFLOW_ERR_INVALID_ARGUMENT = 1,
	DATAFLOW_ERR_OUT_OF_MEMORY = 2,
	DATAFLOW_ERR_UNKNOWN_OP = 3,
	DATAFLOW_ERR_ALREADY_REGISTERED = 4,
	DATAFLOW_ERR_LOAD_FAILED = 5,
	DATAFLOW_ERR_UNSUPPORTED = 6,
	DATAFLOW_ERR_BACKEND = 7,
	DATAFLOW_ERR_INTERNAL = 8
} Dataflow_Status;

/* Message of the last failure on this thread ("" if none). Valid until the next failure. */
const char *dataflow_last_error(void);
/* Status code of the last failure on this thread (DATAFLOW_OK if none). */
Dataflow_Status dataflow_last_status(void);
void dataflow_clear_error(void);
const char *dataflow_status_name(Dataflow_Status status);

/* Records status + printf-style message as this thread's last error; returns status so
 * callers can write `return dataflow_set_error(...)`. */
Dataflow_Status dataflow_set_error(Dataflow_Status status, const char *fmt, ...)
#ifdef __GNUC__
	__attribute__((format(printf, 2, 3)))
#endif
	;

/* Returns expr's status from the enclosing function unless it is DATAFLOW_OK (the message
 * stays the one expr recorded). */
#define DATAFLOW_TRY(expr)                                 \
	do {                                               \
		Dataflow_Status st_ = (expr);              \
		if (st_ != DATAFLOW_OK)                    \
			return st_;                        \
	} while (0)

#endif
