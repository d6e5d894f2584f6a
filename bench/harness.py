"""Shared bench harness: timing, memcpy bandwidth, machine info, the op-bench runner and its output.

Writing an op group (bench/ops_<group>.py, run by bench/ops.py --ops <group>):

    import harness
    from harness import Case

    df = harness.import_dataflow()

    def _rms_norm(h, dtype, tokens, hidden):  # one case's buffers live in this call's frame
        x, w, out = ...                           # dataflow arrays (h.from_numpy, h.empty)
        tx, tw = ...                              # the torch tensors, same shapes and dtype
        return Case(op="rms_norm", direction="fwd", dtype=dtype, shape=f"{tokens}x{hidden}",
                    dataflow=harness.synced(h, lambda: df.ops.rms_norm(h, x, w, out=out)),  # + h.sync()
                    torch=lambda: F.rms_norm(tx, (hidden,), tw),
                    peer="F.rms_norm",                     # what `torch` runs, for the reader
                    bytes=2 * x.nbytes, flops=None)        # bytes if memory-bound, flops if compute-bound

    def cases(h, args):
        # h: the run's open_handle(df, args.backend, args.threads); torch has set_num_threads.
        # args.dtypes: a list of "fp32"/"bf16"; args.quick: smaller shapes for a smoke run;
        # args.scale: 1 on host, GPU_SCALE on a GPU (multiply token counts by it).
        for dtype in args.dtypes:
            yield _rms_norm(h, dtype, *((256, 512) if args.quick else (2048 * args.scale, 4096)))

    if __name__ == "__main__":
        harness.main({"norm_swiglu": cases})

cases() returns any iterable of Case. Build each case in a helper function, as above: its
lambdas then see that case's arrays (not the loop's last ones), and a generator of such cases
holds one case's buffers at a time (the runner drops a case before asking for the next).
direction is "fwd", "bwd" or "fwd+bwd" (timed together, as autograd runs them); an op with no
backward (add, adamw_step) is "fwd". The group's name goes in GROUPS in bench/ops.py
(norm_swiglu is there already). Rows: medians and their ratio = torch / dataflow (> 1: dataflow
faster), best-call times and ratio_best, of_memcpy = (bytes / best-call time) / memcpy GB/s
(ops that only read or only write, or whose data stays in cache, can pass 1).

On a GPU (--backend cuda): torch runs on the same device (harness.tensor puts numpy data there,
and it is torch's default device, so factories like torch.zeros land there too), each torch call
is followed by torch.cuda.synchronize() as each dataflow call by h.sync(), the memcpy roof is a
device-to-device copy, and groups scale their token counts by args.scale (GPU_SCALE) so that a
call is not all launch latency.

This module imports only the standard library at load time: matmul.py sets OMP_NUM_THREADS
before torch and dataflow load, so both are imported inside the functions that use them.

Both libraries' OpenMP threads wait the same way: OMP_WAIT_POLICY is PASSIVE (sleep when idle,
dataflow's default) unless the caller set it, set here before either library loads. torch's own
default spins, and on a shared machine its spinning threads lose their time slices to other
processes, so its times (and every ratio) swung by 10x from one run to the next.

The peers need torch (and bench/train.py transformers): `pip install '.[bench]'` (the CPU build of
torch: add `--extra-index-url https://download.pytorch.org/whl/cpu`). Without them a bench says so
in one line (require_peers).
"""
import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable, Optional

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
INSTALL = "pip install '.[bench]' --extra-index-url https://download.pytorch.org/whl/cpu"

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SECONDS_PER_MEASUREMENT = 2.0  # timed calls per (case, library) take about this long
GPU_SECONDS = 0.5  # GPU times vary far less than on this shared CPU
QUICK_SECONDS = 0.1
GPU_SCALE = 8
DEVICE = "cpu"  # torch's device for the run: "cpu", or "cuda:N" for --backend cuda[:N]


def torch_device(backend):
    """torch's device for the peer of a dataflow backend: "cuda:N" for cuda[:N], else "cpu"
    (vulkan included: torch has no Vulkan compute backend)."""
    if not backend.startswith("cuda"):
        return "cpu"
    return backend if ":" in backend else backend + ":0"


def installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # sys.modules[module] is None: blocked
        return False


def require_peers(*modules):
    """Exits with one line naming what is missing and the install line when a peer library (torch,
    transformers) is not installed."""
    missing = [m for m in modules if not installed(m)]
    if missing:
        sys.exit(f"{os.path.basename(sys.argv[0])}: the peer needs {' and '.join(missing)}, not installed here: "
                 f"{INSTALL}")


def tensor(x):
    """torch.from_numpy(x) on the run's device (no copy on the CPU)."""
    import torch
    return torch.from_numpy(x).to(DEVICE)


def torch_sync():
    if DEVICE != "cpu":
        import torch
        torch.cuda.synchronize(DEVICE)


def import_dataflow():
    """The installed dataflow package; this checkout's python/ sources only when DATAFLOW_LIB_DIR
    names a build tree (development), since those sources load the libraries from there."""
    if os.environ.get("DATAFLOW_LIB_DIR"):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import dataflow
    return dataflow


def open_handle(df, backend, threads, **kwargs):
    """df.Handle(backend, streams=1) with the run's compute threads, a host backend option (other
    backends take none)."""
    return df.Handle(backend, streams=1, threads=threads if backend == "host" else None, **kwargs)


def timed_calls(fns, rounds=3, seconds=SECONDS_PER_MEASUREMENT):
    """Seconds of each timed call of each fn, after a warm-up call each. The fns take turns in
    `rounds` blocks of calls, so load that comes and goes on a shared machine hits them alike,
    while one runtime's spin-waiting workers only touch the first call of the other's block."""
    firsts = []
    for fn in fns:
        t0 = time.perf_counter()
        fn()
        firsts.append(time.perf_counter() - t0)
    calls = [max(1, min(20, int(seconds / rounds / max(t, 1e-6)))) for t in firsts]
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, n, ts in zip(fns, calls, times):
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
    return times


def timed_medians(fns, rounds=3, seconds=SECONDS_PER_MEASUREMENT):
    """Median seconds per call of each fn (see timed_calls)."""
    return [statistics.median(ts) for ts in timed_calls(fns, rounds, seconds)]


def memcpy_gbs(nbytes, seconds):
    """Copy bandwidth in GB/s (bytes read + bytes written per second) of torch's copy_ between two
    nbytes buffers on the run's device, far larger than the last-level cache. torch rather than
    numpy: copy_ runs on torch's intra-op pool, i.e. on the same threads as the ops and their
    peers, where np.copyto uses one thread and would understate the roof the ops can reach."""
    import torch
    src = torch.ones(nbytes // 4, device=DEVICE)
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)
        torch_sync()
    (times,) = timed_calls([copy], seconds=seconds)
    return 2 * nbytes / min(times) / 1e9  # a roof: the best call, as load from other processes only slows it


def synced(h, fn):
    """fn followed by h.sync(): a dataflow call is timed until its work is done."""
    def run():
        fn()
        h.sync()
    return run


@dataclasses.dataclass
class Case:
    op: str
    direction: str  # "fwd", "bwd" or "fwd+bwd"
    dtype: str
    shape: str
    dataflow: Callable[[], None]
    torch: Callable[[], object]
    peer: str  # what the torch callable runs
    bytes: Optional[float] = None  # moved per call (read + written), if memory-bound
    flops: Optional[float] = None  # per call, if compute-bound
    note: Optional[Callable[[], str]] = None  # read after the timed calls, e.g. the kernel dataflow chose


def measure(case, rounds, seconds):
    """A row of medians (ratio = torch / dataflow) plus each side's fastest call: when other
    processes hold the cores, a peer that synchronises its threads often (many small parallel
    kernels) loses a time slice per barrier and its median balloons; best-call times show the
    uncontended speed and ratio_best compares those."""
    def torch_call():
        case.torch()
        torch_sync()
    t_df, t_torch = timed_calls([case.dataflow, torch_call], rounds, seconds)
    (m_df, m_torch), (b_df, b_torch) = (statistics.median(t_df), statistics.median(t_torch)), (min(t_df), min(t_torch))
    row = dict(op=case.op, dir=case.direction, dtype=case.dtype, shape=case.shape, peer=case.peer,
               dataflow_ms=m_df * 1e3, torch_ms=m_torch * 1e3, ratio=round(m_torch / m_df, 3),
               dataflow_best_ms=b_df * 1e3, torch_best_ms=b_torch * 1e3, ratio_best=round(b_torch / b_df, 3))
    if case.bytes:
        row.update(bytes=case.bytes, dataflow_best_gbs=round(case.bytes / b_df / 1e9, 2),
                   torch_best_gbs=round(case.bytes / b_torch / 1e9, 2))
    if case.flops:
        row.update(flops=case.flops, dataflow_gflops=round(case.flops / m_df / 1e9, 1),
                   torch_gflops=round(case.flops / m_torch / 1e9, 1))
    if case.note:
        row["note"] = case.note()
    return row


def of_memcpy(row, memcpy):
    """Adds of_memcpy = (bytes / best-call time) / memcpy bandwidth for dataflow and torch, best
    against best like the roof itself, and rounds the times."""
    if "bytes" in row:
        row["of_memcpy"] = round(row["bytes"] / row["dataflow_best_ms"] / 1e6 / memcpy, 3)
        row["torch_of_memcpy"] = round(row["bytes"] / row["torch_best_ms"] / 1e6 / memcpy, 3)
    for key in ("dataflow_ms", "torch_ms", "dataflow_best_ms", "torch_best_ms"):
        row[key] = round(row[key], 4)
    return row


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def machine_info(backend="host"):
    """The machine, the libraries' versions (torch's when installed) and the environment that
    changes what they run."""
    info = dict(cpu=cpu_model(), cpus=os.cpu_count(), affinity=len(os.sched_getaffinity(0)),
                python=platform.python_version(), dataflow=import_dataflow().__version__,
                env={k: os.environ[k] for k in ("DATAFLOW_HOST_MATMUL", "DATAFLOW_SIMD", "DATAFLOW_CUDA_ATTENTION",
                                                "DATAFLOW_CUDA_TF32", "OMP_WAIT_POLICY") if k in os.environ})
    if installed("torch"):
        import torch
        info["torch"] = torch.__version__
    if backend.startswith("vulkan"):
        import dataflow.vulkan
        index = int(backend.partition(":")[2] or 0)
        info.update(vulkan_device=next(d for d in dataflow.vulkan.list_devices() if d["index"] == index))
    elif backend != "host":
        import torch
        dev = torch_device(backend)
        p = torch.cuda.get_device_properties(dev)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), sm_count=p.multi_processor_count,
                    compute_capability=f"{p.major}.{p.minor}", torch_cuda=torch.version.cuda,
                    torch_cudnn=torch.backends.cudnn.version())
    return info


def loaded_libraries():
    """The NVIDIA libraries this process has mapped (which cuBLASLt, NVRTC, cuDNN, driver ran)."""
    names = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if any(k in os.path.basename(path) for k in ("cublasLt", "nvrtc", "cudnn", "libcuda.so")):
                    names.add(path)
    except OSError:
        pass
    return sorted(names)


def parse_args(groups):
    p = argparse.ArgumentParser(description="Ops of dataflow vs PyTorch on the same device in the same run; "
                                            "JSON + summary.")
    p.add_argument("--backend", default="host", help="host, cuda or cuda:N (torch then runs on that GPU)")
    p.add_argument("--ops", default=",".join(groups), help=f"groups, comma-separated: {','.join(groups)}")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads and Handle(threads=)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--quick", action="store_true", help="small shapes and short measurements (smoke run)")
    args = p.parse_args()
    args.ops, args.dtypes = args.ops.split(","), args.dtypes.split(",")
    args.scale = 1 if args.backend == "host" or args.quick else GPU_SCALE
    for name in args.ops:
        if name not in groups:
            p.error(f"--ops: {name!r} is not one of {list(groups)}")
    for d in args.dtypes:
        if d not in ("fp32", "bf16"):  # the dtypes every group covers
            p.error(f"--dtypes: {d!r} is not fp32 or bf16")
    return args


def summary(rows, backend, threads, memcpy, skipped, load):
    def label(r):
        return f"{r['op']} {r['dir']} {r['dtype']}"
    where = f"{threads} threads" if backend == "host" else "torch on the same GPU"
    line = f"ops {backend} ({where}, memcpy {memcpy:.1f} GB/s): {len(rows)} cases"
    if rows:
        worst = min(rows, key=lambda r: r["ratio"])
        line += (f"; ratio vs torch min {worst['ratio']:.2f}x ({label(worst)})"
                 f" median {statistics.median(r['ratio'] for r in rows):.2f}x"
                 f" (best calls: min {min(r['ratio_best'] for r in rows):.2f}x"
                 f" median {statistics.median(r['ratio_best'] for r in rows):.2f}x)")
    bound = [r for r in rows if "of_memcpy" in r]
    if bound:
        low = min(bound, key=lambda r: r["of_memcpy"])
        line += (f"; memory-bound min {low['of_memcpy']:.2f} of memcpy ({label(low)})"
                 f" median {statistics.median(r['of_memcpy'] for r in bound):.2f}")
    if skipped:
        line += f"; skipped {','.join(skipped)}"
    # torch's OpenMP barriers wait for descheduled threads: its times balloon on a loaded machine
    return line + f"; load {load[0]:.1f}..{load[1]:.1f} on {os.cpu_count()} cpus"


def main(groups):
    """groups: name -> cases function, or None where the group's module is absent (skipped)."""
    args = parse_args(groups)
    require_peers("torch")
    import torch
    df = import_dataflow()
    global DEVICE
    DEVICE = torch_device(args.backend)
    gpu = DEVICE != "cpu"
    if gpu:
        torch.set_default_device(DEVICE)

    torch.set_num_threads(args.threads)
    seconds, rounds = (QUICK_SECONDS, 2) if args.quick else (GPU_SECONDS if gpu else SECONDS_PER_MEASUREMENT, 3)
    # host: 2x / 8x the 32 MiB L3 here; GPU: 1 GiB, far past any L2
    copy_bytes = (1 << 30) if gpu else (64 if args.quick else 256) << 20
    load = [round(os.getloadavg()[0], 2)]
    samples = [memcpy_gbs(copy_bytes, seconds)]
    rows, skipped = [], {}
    with open_handle(df, args.backend, args.threads) as h:
        for name in args.ops:
            if groups[name] is None:
                skipped[name] = f"bench/ops_{name}.py is not present"
                continue
            for case in groups[name](h, args):
                rows.append(dict(group=name, **measure(case, rounds, seconds)))
                print(f"# {name}: {rows[-1]['op']} {rows[-1]['dir']} {rows[-1]['dtype']} {rows[-1]['shape']}: "
                      f"{rows[-1]['ratio']}x torch", file=sys.stderr, flush=True)  # progress, for a run cut short
                del case  # frees its buffers before the group builds the next
    # Measured again at the end: the higher of the two is the roof, the lower met more outside load.
    samples.append(memcpy_gbs(copy_bytes, seconds))
    memcpy = max(samples)
    load.append(round(os.getloadavg()[0], 2))
    rows = [of_memcpy(r, memcpy) for r in rows]
    where = f"{args.threads} threads" if not gpu else f"on {DEVICE}"
    result = dict(bench="ops", backend=args.backend, threads=args.threads, dtypes=args.dtypes, quick=args.quick,
                  machine=dict(machine_info(args.backend), loadavg_1min_start_end=load),
                  libraries=loaded_libraries(),
                  memcpy=dict(gbs=round(memcpy, 2), samples_gbs=[round(s, 2) for s in samples],
                              method=f"torch copy_ of {copy_bytes >> 20} MiB fp32, read + write, "
                                     f"{where}; best call, max of a sample before and after the cases"),
                  skipped=skipped, rows=rows)
    print(json.dumps(result, indent=1))
    print(summary(rows, args.backend, args.threads, memcpy, skipped, load))
