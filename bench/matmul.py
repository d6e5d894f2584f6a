"""Square matmul throughput of dataflow vs torch.matmul, measured in the same run.

    python bench/matmul.py [--backend host] [--threads N] [--sizes 256,512,1024,2048,4096]
                           [--dtypes bf16,fp32]

GFLOP/s = 2 * n^3 / t, t the median of timed calls after a warm-up, each call including its
sync (h.sync() / torch.cuda.synchronize()). Output is in and out dtype alike, as torch does.
Prints one JSON object (rows, machine, the matmul path the backend used), then a summary line.

Threads: OMP_NUM_THREADS is set before torch and dataflow load, since both run their CPU
matmul on OpenMP (oneDNN's Debian build; torch's MKL/oneDNN), plus torch.set_num_threads
and Handle(threads=N). The two libraries take turns in blocks of calls (see timed_medians).
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SECONDS_PER_MEASUREMENT = 2.0  # timed calls per (size, dtype, library) take about this long


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="host", help="host, cuda or cuda:N")
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


def timed_medians(fns, rounds=3):
    """Median seconds per call of each fn, after a warm-up call each. The fns take turns in
    `rounds` blocks of calls, so load that comes and goes on a shared machine hits them alike,
    while one runtime's spin-waiting workers only touch the first call of the other's block."""
    firsts = []
    for fn in fns:
        t0 = time.perf_counter()
        fn()
        firsts.append(time.perf_counter() - t0)
    calls = [max(1, min(20, int(SECONDS_PER_MEASUREMENT / rounds / max(t, 1e-6)))) for t in firsts]
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, n, ts in zip(fns, calls, times):
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


PATH_PROBE = """
import sys, numpy as np, dataflow as df
h = df.Handle(sys.argv[1], streams=1, device_memory="64MiB")
for dt in sys.argv[2].split(","):
    print("probe", dt, flush=True)
    a = h.from_numpy(np.ones((64, 64), np.float32), dtype=dt)
    df.ops.matmul(h, a, a)
    h.sync()
"""


def matmul_paths(backend, dtypes):
    """Which engine the host matmul ran per dtype: oneDNN's implementation name from its
    verbose log (read in a subprocess), else the portable fallback."""
    if backend != "host":
        return {d: "n/a" for d in dtypes}
    env = dict(os.environ, ONEDNN_VERBOSE="1")
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


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def main():
    args = parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import torch

    import dataflow as df

    torch.set_num_threads(args.threads)
    device = "cpu" if args.backend == "host" else args.backend
    torch_sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    largest = max(args.sizes) ** 2 * 4 * 3
    h = df.Handle(args.backend, streams=1, device_memory=f"{largest + (64 << 20)}B", threads=args.threads)

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
        bench="matmul", backend=args.backend, threads=args.threads, matmul_path=matmul_paths(args.backend, args.dtypes),
        machine=dict(cpu=cpu_model(), cpus=os.cpu_count(), affinity=len(os.sched_getaffinity(0)),
                     python=platform.python_version(), torch=torch.__version__, dataflow=df.__version__,
                     env={k: os.environ[k] for k in ("DATAFLOW_HOST_MATMUL", "DATAFLOW_SIMD") if k in os.environ}),
        rows=rows)
    print(json.dumps(result, indent=2))
    big = [r for r in rows if r["size"] >= 1024] or rows
    parts = [f"{d} min {min(r['ratio'] for r in big if r['dtype'] == d):.2f}x" for d in args.dtypes]
    print(f"matmul {args.backend}: ratio vs torch at >={min(r['size'] for r in big)}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
