"""Square matmul throughput of dataflow vs torch.matmul, measured in the same run.

    python bench/matmul.py [--backend host] [--threads N] [--sizes 256,512,1024,2048,4096]
                           [--dtypes bf16,fp32]

GFLOP/s = 2 * n^3 / t, t the median of timed calls after a warm-up, each call including its
sync (h.sync() / torch.cuda.synchronize()). Output is in and out dtype alike, as torch does.
Prints one JSON object (rows, machine, the matmul path the backend used, the NVIDIA libraries
loaded), then a summary line. On a GPU (--backend cuda) torch runs on the same device.

Threads: OMP_NUM_THREADS is set before torch and dataflow load, since both run their CPU
matmul on OpenMP (oneDNN's Debian build; torch's MKL/oneDNN), plus torch.set_num_threads
and Handle(threads=N). The two libraries take turns in blocks of calls (see timed_medians).
"""
import argparse
import json
import os
import re
import subprocess
import sys

from harness import (TORCH_DTYPES, import_dataflow, loaded_libraries, machine_info, open_handle, require_peers,
                     timed_medians)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="host", help="host, cuda, cuda:N, vulkan or vulkan:N (torch peer: CPU unless cuda)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--sizes", default="256,512,1024,2048,4096")
    p.add_argument("--dtypes", default="bf16,fp32")
    args = p.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.dtypes = args.dtypes.split(",")
    for d in args.dtypes:
        if d not in TORCH_DTYPES:
            p.error(f"--dtypes: {d!r} is not one of {sorted(TORCH_DTYPES)}")
    return args


PATH_PROBE = """
import sys, numpy as np, dataflow as df
h = df.Handle(sys.argv[1], streams=1, device_memory="64MiB")
for dt in sys.argv[2].split(","):
    print("probe", dt, flush=True)
    a = h.from_numpy(np.ones((64, 64), np.float32), dtype=dt)
    df.ops.matmul(h, a, a)
    h.sync()
"""


def matmul_paths(backend, dtypes, df):
    """Which engine the matmul ran per dtype: on the host oneDNN's implementation name from its
    verbose log (read in a subprocess that imports the same dataflow as the bench), else the
    portable fallback; cuda's cuBLASLt, vulkan's own kernel."""
    if backend.startswith("vulkan"):
        return {d: "shaders/matmul.comp (64 x 64 tiles in shared memory)" for d in dtypes}
    if backend != "host":
        return {d: "cuBLASLt (see libraries)" for d in dtypes}
    env = dict(os.environ, ONEDNN_VERBOSE="1", PYTHONPATH=os.path.dirname(os.path.dirname(df.__file__)))
    out = subprocess.run([sys.executable, "-c", PATH_PROBE, backend, ",".join(dtypes)], env=env,
                         capture_output=True, text=True).stdout
    paths, version, current = {}, None, None
    for line in out.splitlines():
        if line.startswith("probe "):
            current = line.split()[1]
            paths[current] = "fallback"
        elif m := re.match(r"onednn_verbose,info,oneDNN (v\S+)", line):
            version = m.group(1)
        elif current and (m := re.match(r"onednn_verbose,exec,cpu,matmul,([^,]+)", line)):
            paths[current] = f"onednn {version or ''} {m.group(1)}".replace("  ", " ")
    return {d: paths.get(d, "unknown") for d in dtypes}


def main():
    args = parse_args()
    require_peers("torch")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import torch

    df = import_dataflow()

    torch.set_num_threads(args.threads)
    device = args.backend if args.backend.startswith("cuda") else "cpu"
    torch_sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    largest = max(args.sizes) ** 2 * 4 * 3
    h = open_handle(df, args.backend, args.threads, device_memory=f"{largest + (64 << 20)}B")

    rows = []
    rng = np.random.default_rng(0)
    for dtype in args.dtypes:
        for n in args.sizes:
            x, y = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
            a, b, c = h.from_numpy(x, dtype=dtype), h.from_numpy(y, dtype=dtype), h.empty((n, n), dtype)

            tdt = getattr(torch, TORCH_DTYPES[dtype])
            ta, tb = torch.from_numpy(x).to(device, tdt), torch.from_numpy(y).to(device, tdt)
            tc = torch.empty((n, n), dtype=tdt, device=device)

            def run_dataflow():
                df.ops.matmul(h, a, b, out=c)
                h.sync()

            def run_torch():
                torch.matmul(ta, tb, out=tc)
                torch_sync()

            t_df, t_torch = timed_medians([run_dataflow, run_torch])
            a.free(), b.free(), c.free()
            del ta, tb, tc
            flops = 2.0 * n ** 3
            rows.append(dict(size=n, dtype=dtype, dataflow_gflops=round(flops / t_df / 1e9, 1),
                             torch_gflops=round(flops / t_torch / 1e9, 1), ratio=round(t_torch / t_df, 3)))
    h.close()

    result = dict(
        bench="matmul", backend=args.backend, threads=args.threads,
        matmul_path=matmul_paths(args.backend, args.dtypes, df),
        machine=machine_info(args.backend),
        libraries=loaded_libraries(),
        rows=rows)
    print(json.dumps(result, indent=2))
    big = [r for r in rows if r["size"] >= 1024] or rows
    parts = [f"{d} min {min(r['ratio'] for r in big if r['dtype'] == d):.2f}x" for d in args.dtypes]
    print(f"matmul {args.backend}: ratio vs torch at >={min(r['size'] for r in big)}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
