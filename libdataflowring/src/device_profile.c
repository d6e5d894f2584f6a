/* Built-in device profiles. The fractions are what tuned libraries reach on large shapes,
 * not peaks: the planner predicts achieved time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dataflow/device_profile.h"

#define GB 1e9
#define TFLOPS 1e12

/* matmul_half_tokens is an estimate, not a measurement: cuBLAS bf16 GEMMs with N = K = 4096
 * fall to about half their large-M rate near M = 128 on H100 (near 64 on the smaller A100 /
 * 4090, which fill with fewer rows); calibrate() measures it for the host.
 * PCIe links: pinned-memory copies reach ~85% of the raw x16 rate (gen5 64 GB/s raw -> ~53-55
 * GB/s measured with nvbandwidth / bandwidthTest on H100 hosts; gen4 32 -> ~25 GB/s). */
static const Dataflow_Device_Profile builtin[] = {
	{"h100-sxm", 989.4 * TFLOPS, 494.7 * TFLOPS, 0.75, 128, 0.45, 3.35e3 * GB * 0.9, 53 * GB, 53 * GB,
	 "NVIDIA H100 datasheet (SXM5: 989.4 TFLOPS dense bf16, 494.7 TF32, 3.35 TB/s HBM3); cuBLAS "
	 "bf16 GEMM ~740 TFLOPS at 8192^3 (0.75); FlashAttention-2 fwd+bwd ~350-450 TFLOPS at hd 128 "
	 "(Dao 2023, FA3 paper baselines: 0.45); 90% of HBM for streaming kernels; PCIe gen5 x16 "
	 "pinned copies ~53 GB/s"},
	{"h100-pcie", 756.0 * TFLOPS, 378.0 * TFLOPS, 0.70, 128, 0.40, 2.0e3 * GB * 0.9, 53 * GB, 53 * GB,
	 "NVIDIA H100 datasheet (PCIe: 756 TFLOPS dense bf16, 378 TF32, 2.0 TB/s HBM2e; 350 W caps "
	 "clocks: 0.70 of peak on GEMM); PCIe gen5 x16 pinned copies ~53 GB/s"},
	{"a100-sxm", 312.0 * TFLOPS, 156.0 * TFLOPS, 0.80, 64, 0.55, 2.039e3 * GB * 0.9, 25 * GB, 25 * GB,
	 "NVIDIA A100 datasheet (SXM4 80GB: 312 TFLOPS dense bf16, 156 TF32, 2.04 TB/s); cuBLAS bf16 "
	 "GEMM ~250 TFLOPS (0.80); FlashAttention-2 fwd+bwd ~170-190 TFLOPS at hd 128 (Dao 2023: "
	 "0.55); PCIe gen4 x16 pinned copies ~25 GB/s"},
	{"rtx-4090", 165.2 * TFLOPS, 82.6 * TFLOPS, 0.80, 64, 0.55, 1.008e3 * GB * 0.9, 25 * GB, 25 * GB,
	 "NVIDIA Ada whitepaper (RTX 4090: 165.2 TFLOPS dense bf16 with fp32 accumulate, 82.6 TF32, "
	 "1008 GB/s GDDR6X); fractions as A100-class; PCIe gen4 x16 pinned copies ~25 GB/s"},
};
enum { NUM_BUILTIN = sizeof(builtin) / sizeof(builtin[0]) };

const char *dataflow_device_profile_name(int index)
{
	return index >= 0 && index < NUM_BUILTIN ? builtin[index].name : NULL;
}

Dataflow_Status dataflow_device_profile_named(const char *name, Dataflow_Device_Profile *profile)
{
	if (!name || !profile)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "device profile: name and profile are required");
	char known[256] = "";
	for (int i = 0; i < NUM_BUILTIN; i++) {
		if (strcmp(name, builtin[i].name) == 0) {
			*profile = builtin[i];
			return DATAFLOW_OK;
		}
		size_t used = strlen(known);
		snprintf(known + used, sizeof(known) - used, "%s%.31s", i ? ", " : "", builtin[i].name);
	}
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				  "device profile: unknown name '%.64s'; known: %s (or a measured 'host' profile)", name,
				  known);
}

double dataflow_device_profile_peak(const Dataflow_Device_Profile *p, DataflowDatatype dtype)
{
	return dtype == DATAFLOW_BF16 ? p->peak_flops_bf16 : p->peak_flops_fp32;
}

Dataflow_Status dataflow_device_profile_check(const Dataflow_Device_Profile *p)
{
	if (!p)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "device profile: profile is required");
	const struct {
		const char *name;
		double value, max;
	} fields[] = {{"peak_flops_bf16", p->peak_flops_bf16, INFINITY},
		      {"peak_flops_fp32", p->peak_flops_fp32, INFINITY},
		      {"matmul_fraction", p->matmul_fraction, 1},
		      {"attention_fraction", p->attention_fraction, 1},
		      {"memory_bytes_per_sec", p->memory_bytes_per_sec, INFINITY},
		      {"h2d_bytes_per_sec", p->h2d_bytes_per_sec, INFINITY},
		      {"d2h_bytes_per_sec", p->d2h_bytes_per_sec, INFINITY}};
	if (!(p->matmul_half_tokens >= 0) || !isfinite(p->matmul_half_tokens))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "device profile '%.32s': matmul_half_tokens must be finite and >= 0, got %g",
					  p->name, p->matmul_half_tokens);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (!(fields[i].value > 0) || !isfinite(fields[i].value) || fields[i].value > fields[i].max)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "device profile '%.32s': %s must be finite and in (0, %g], got %g",
						  p->name, fields[i].name, fields[i].max, fields[i].value);
	return DATAFLOW_OK;
}
