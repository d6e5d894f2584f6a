#ifndef DATAFLOW_H
#define DATAFLOW_H

/* Umbrella header of libdataflow: datatypes, statuses, op skeletons and signatures,
 * handle, trace recorder. */
#include "dataflow/datatype.h"
#include "dataflow/handle.h"
#include "dataflow/op.h"
#include "dataflow/op_signature.h"
#include "dataflow/status.h"
#include "dataflow/trace.h"

#endif
