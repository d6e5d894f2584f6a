#ifndef DATAFLOW_DEVICE_PROFILE_H
#define DATAFLOW_DEVICE_PROFILE_H

#include "dataflow/status.h"
#include "dataflow/datatype.h"

/* The speeds the ring planner's model of time uses. A named profile carries figures from
 * datasheets and published measurements (each with its source in `source`); the `host` profile
 * is measured on a handle (python: dataflow.ring.calibrate) and filled in by the caller. */
typedef struct {
	char name[32];
	double peak_flops_bf16;       /* dense peak, the MFU denominator for bf16 models */
	double peak_flops_fp32;       /* dense peak for fp32 models (TF32 tensor cores on NVIDIA) */
	double matmul_fraction;       /* achieved / peak on large matmuls */
	/* rows (tokens) at which a [tokens x H] x [H x H'] matmul reaches half that: a chunk of T
	 * tokens runs matmuls at matmul_fraction * T / (T + matmul_half_tokens); 0: no falloff */
	double matmul_half_tokens;
	double attention_fraction;    /* achieved / peak in attention (forward and backward) */
	double memory_bytes_per_sec;  /* achieved by memory-bound ops */
	double h2d_bytes_per_sec;     /* host -> device link, pinned memory */
	double d2h_bytes_per_sec;     /* device -> host */
	const char *source;           /* where the numbers come from */
} Dataflow_Device_Profile;

/* Copies the named profile into *profile: "h100-sxm", "h100-pcie", "a100-sxm", "rtx-4090".
 * An unknown name: DATAFLOW_ERR_INVALID_ARGUMENT listing the known ones. */
Dataflow_Status dataflow_device_profile_named(const char *name, Dataflow_Device_Profile *profile);
/* Name of the index-th built-in profile, NULL past the last. */
const char *dataflow_device_profile_name(int index);
/* Peak for a model dtype (bf16 or fp32). */
double dataflow_device_profile_peak(const Dataflow_Device_Profile *profile, DataflowDatatype dtype);
/* DATAFLOW_OK when every speed is finite and > 0, the fractions are in (0, 1] and
 * matmul_half_tokens is finite and >= 0; else an error naming the field. */
Dataflow_Status dataflow_device_profile_check(const Dataflow_Device_Profile *profile);

#endif
