#ifndef DATAFLOW_CUDA_H
#define DATAFLOW_CUDA_H

/* What the CUDA backend (libdataflow_cuda.so) offers beyond the handle interface: tools that
 * need no GPU. */

#include <stddef.h>

#include "dataflow/status.h"

/* Compiles a .cu file for sm_<arch> exactly as the backend does at first use, bypassing the
 * cache, writes NVRTC's log (empty when clean) into log, and checks that the cubin defines
 * each of the symbols (DATAFLOW_ERR_INVALID_ARGUMENT naming the first missing one). Needs NVRTC but
 * no GPU or driver. */
Dataflow_Status dataflow_cuda_compile_check(const char *source_path, int arch, const char *const *symbols,
					    int num_symbols, char *log, size_t log_size);

/* Compiles an embedded kernel source (its file name, like "attention.cu") for sm_<arch> into the
 * NVRTC cache (DATAFLOW_CACHE_DIR), exactly as its first use on a device of that arch would, so
 * a machine given the cache runs no compiler. Needs NVRTC but no GPU. */
Dataflow_Status dataflow_cuda_compile_cached(const char *source_name, int arch);

/* The NVRTC the backend loads (major, minor) and the path of its libnvrtc (into path, when
 * path_size > 0); DATAFLOW_ERR_LOAD_FAILED, naming where it looked, when none can be loaded. */
Dataflow_Status dataflow_cuda_nvrtc_version(int *major, int *minor, char *path, size_t path_size);

/* What the calling thread's last attention submission on a CUDA handle ran: "cudnn <version>
 * (...)", "mma d<head-dim bucket> (...)" or "simt (...)", with the reason; "" before any.
 * DATAFLOW_CUDA_ATTENTION=cudnn|native|simt (read when the ops are registered) overrides the
 * automatic choice where the implementation applies. */
const char *dataflow_cuda_attention_last_choice(void);

#endif
