"""`dataflow train`: a Llama trained on the embedded corpus (or a text file) with a BPE tokenizer;
checkpoints in <out>/checkpoint, the loss curve in <out>/loss.png.

Safety, in order: every argument and input is checked before anything is written (prepare());
an existing run is replaced only with --overwrite or continued with --resume; the model's memory
is checked against the handle before it is allocated; Ctrl-C finishes the step, saves a resumable
checkpoint and prints the command that resumes it (a second Ctrl-C quits without saving); a failed
or diverged step saves nothing, so the last checkpoint stays the last good state.

Data-parallel (`--nproc N`, or under `mpirun -n N`): --batch is the global batch; every rank
reads the same windows of the token stream and trains on its own --batch / N rows of each, and
the loss is the mean over all the rows, so a step equals one process's step on the whole batch
(to rounding). A checkpoint holds the stream position of the whole batch, so it resumes with any
number of ranks. Rank 0 alone prints, validates, saves and plots; the others stay quiet.

Trace (`--trace FILE`): the first --trace-steps steps of this run (default TRACE_STEPS) as Chrome
trace-event JSON (Trainer.trace), written once they are done (or the run ends sooner) while
training goes on: a bounded file, since the recording grows with every step (all-resident about
2 L + 6 spans a step, the ring about 3 L K + 4 L a round), and the first steps show the overlap.
In a job, rank 0 records and writes its own streams.
"""
import contextlib
import math
import os
import shlex
import signal
import stat
import sys
import tempfile
import time

from ..io import atomic, checkpoint
from .. import distributed
from . import launch, loss_plot
from ..training import lr_schedule
from ..models import presets as model_specs
from ..io import tokenizer as tokenizers
from .corpus import Batches, read_text, split
from ..errors import BadArgumentError, DataflowError, FileFormatError, OutOfMemoryError, UnsupportedError
from ..handle import Handle
from ..models.host_blocks import host_memory_available
from ..io.pretrained import (CONFIG_NAME, check_memory, check_weights, copy_weights, model_from_config, model_memory,
                             parameter_shapes, validate_config)
from .progress import Progress, duration, mib
from ..training.disk_tier import disk_tier
from ..training.ring_training import ring_plan
from ..io.safetensors import read_directory

DEFAULT_STEPS = 800
# Run settings: the command line wins, then a resumed checkpoint's, then these.
# lr (the schedule's peak): the default run's validation loss ends at 5.10 with 2e-3, 4.87 with 1e-3 and
# 4.85 with 5e-4; 1e-3 learns faster in the first half
RUN_DEFAULTS = {"batch": 8, "seq_len": 128, "lr": 1e-3, "dtype": "fp32", "seed": 0, "master_weights": False,
                "optimizer_state": "fp32", "host_gradients": "fp32"}
EMBEDDED = "embedded"
INTERRUPTED = 130  # the shell's code for a process ended by SIGINT
TRACE_STEPS = 20


def open_handle(args):
    """The handle a command's --backend, --threads and --device-memory ask for."""
    try:
        return Handle(args.backend, device_memory=args.device_memory, threads=args.threads)
    except DataflowError as e:
        raise BadArgumentError(f"--backend: {args.backend} is not available here: {e}") from None


class RunSpec:
    """Everything a run needs, checked: nothing here has written a file or allocated device memory."""


def _refuse_changes(args, resumed):
    for flag, value in (("--config", args.config), ("--init", args.init), ("--seed", args.seed),
                        ("--tokenizer", args.tokenizer)):
        if value is not None:
            raise BadArgumentError(f"{flag}: a resumed run keeps its checkpoint's model, weights and tokenizer; "
                                   f"drop {flag} to continue {resumed.path}, or start a new run without --resume")


RUN_CHECKS = {"batch": lambda v: type(v) is int and v >= 1, "seq_len": lambda v: type(v) is int and v >= 2,
              "lr": lambda v: type(v) in (int, float) and 0 < v <= 1, "dtype": lambda v: v in ("fp32", "bf16"),
              "seed": lambda v: type(v) is int and v >= 0, "master_weights": lambda v: type(v) is bool,
              "optimizer_state": lambda v: v in ("fp32", "bf16", "8bit"), "host_gradients": lambda v: v in ("fp32", "bf16"),
              "eval_every": lambda v: type(v) is int and v >= 1, "schedule_steps": lambda v: type(v) is int and v >= 1}


def _checked_state(state, where):
    """The caller state of a resumed checkpoint, type-checked field by field (the checkpoint's hashes
    prove it is what was saved, not that what was saved is sane)."""
    def fail(field, value):
        raise FileFormatError(f"{where}: state.{field}: unexpected value {value!r:.80}")
    run = state.get("run", {})
    if not isinstance(run, dict):
        fail("run", run)
    for key, ok in RUN_CHECKS.items():
        if key in run and not ok(run[key]):
            fail(f"run.{key}", run[key])
    if type(state.get("step", 0)) is not int or state.get("step", 0) < 0:
        fail("step", state.get("step"))
    for field in ("losses", "lrs"):
        values = state.get(field, [])
        if not isinstance(values, list) or not all(type(v) in (int, float) for v in values):
            fail(field, values)
    val = state.get("val_losses", [])
    if not isinstance(val, list) or not all(isinstance(v, list) and len(v) == 2 and type(v[0]) is int
                                            and type(v[1]) in (int, float) for v in val):
        fail("val_losses", val)
    segments = state.get("segments", [])
    if not isinstance(segments, list) or not all(isinstance(v, list) and len(v) == 2 and type(v[0]) is int
                                                 and type(v[1]) in (int, float) for v in segments):
        fail("segments", segments)
    data = state.get("data", {})
    if not isinstance(data, dict) or type(data.get("position", 0)) is not int or not isinstance(
            data.get("source", EMBEDDED), str):
        fail("data", data)
    return state


def _tokenizer_and_config(args, spec):
    """The tokenizer and (unvalidated) config of a new run, and where the config came from."""
    flag = "--init" if args.init else "--config"
    tokenizer, config, source, directory = model_specs.resolve(args.init or args.config or "tiny", flag,
                                                               args.tokenizer, directory_only=bool(args.init))
    spec.init_dir = directory if args.init else None
    return tokenizer, config, source


def prepare(args, ranks=1):
    """Checks every argument and input of `dataflow train` (for a job of `ranks` processes) and
    returns the RunSpec; raises BadArgumentError / FileFormatError naming the flag or file. Reads
    files; writes nothing."""
    spec = RunSpec()
    spec.nproc, spec.shard_optimizer = args.nproc, args.shard_optimizer
    spec.backend, spec.device_memory, spec.host_memory = args.backend, args.device_memory, args.host_memory
    spec.disk_flags = (args.disk, args.disk_memory)
    spec.disk = disk_tier(args.disk, args.disk_memory, None, names=("--disk", "--disk-memory", "--disk-throttle"))
    spec.init_dir = None
    spec.out = args.out
    spec.ckpt_dir = os.path.join(args.out, "checkpoint")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise BadArgumentError(f"--out: {args.out} exists and is not a directory")
    resume_path = spec.ckpt_dir if args.resume == "" else args.resume
    existing = os.path.exists(atomic.readable_directory(os.path.abspath(spec.ckpt_dir)))
    if args.init and args.config:
        raise BadArgumentError("--init: a model directory brings its own config; drop --config")
    if resume_path is None and existing and not args.overwrite:
        raise BadArgumentError(f"--out: {spec.ckpt_dir} already holds a trained run; continue it with --resume, "
                               f"replace it with --overwrite, or choose another --out")
    in_place = resume_path is not None and os.path.realpath(resume_path) == os.path.realpath(spec.ckpt_dir)
    if args.overwrite and in_place and not (args.trace is not None and os.path.exists(args.trace)):
        raise BadArgumentError(f"--overwrite: --resume continues {spec.ckpt_dir} in place, so there is nothing to "
                               "replace; drop --overwrite (or --resume, to start the run over)")
    if resume_path is not None and existing and not args.overwrite and \
            os.path.realpath(resume_path) != os.path.realpath(spec.ckpt_dir):
        raise BadArgumentError(f"--out: {spec.ckpt_dir} already holds another run than --resume {resume_path}; "
                               "choose another --out or pass --overwrite")

    spec.resumed = None
    prior = {}
    if resume_path is not None:
        if not os.path.exists(atomic.readable_directory(os.path.abspath(resume_path))):
            raise BadArgumentError(f"--resume: no checkpoint at {resume_path}")
        spec.resumed = checkpoint.load(resume_path)
        where = os.path.join(spec.resumed.path, checkpoint.STATE_NAME)
        prior = _checked_state(spec.resumed.state, where)
        _refuse_changes(args, spec.resumed)
        spec.tokenizer = tokenizers.from_dict(prior.get("tokenizer"), where)
        spec.config, spec.config_source = spec.resumed.config, os.path.join(spec.resumed.path, CONFIG_NAME)
    else:
        spec.tokenizer, spec.config, spec.config_source = _tokenizer_and_config(args, spec)
    spec.config = validate_config(spec.config, spec.config_source)
    if spec.config["vocab_size"] < spec.tokenizer.vocab_size:
        raise BadArgumentError(f"{spec.config_source}: vocab_size {spec.config['vocab_size']} is smaller than the "
                               f"tokenizer's {spec.tokenizer.vocab_size}")

    before = prior.get("run", {})
    spec.run = {k: getattr(args, k) if getattr(args, k) is not None else before.get(k, default)
                for k, default in RUN_DEFAULTS.items()}
    spec.changed = {k: (before[k], spec.run[k]) for k in RUN_DEFAULTS if k in before and before[k] != spec.run[k]}
    if spec.run["master_weights"] and spec.run["dtype"] != "bf16":
        raise BadArgumentError(f"--master-weights: fp32 master weights are for bf16 training; this run's dtype is "
                               f"{spec.run['dtype']} (add --dtype bf16)")
    if "master_weights" in spec.changed:
        raise BadArgumentError(f"--master-weights: {spec.resumed.path} trained without fp32 master weights; a "
                               "resumed run keeps its checkpoint's choice")
    if "optimizer_state" in spec.changed:
        raise BadArgumentError(f"--optimizer-state: {spec.resumed.path} trained with {spec.changed['optimizer_state'][0]} "
                               "optimizer state; a resumed run keeps its checkpoint's choice")
    if args.shard_optimizer and ranks == 1:
        raise BadArgumentError("--shard-optimizer: shards the optimizer state over several ranks; add --nproc N "
                               "(N >= 2) or run under mpirun -n N")
    if spec.disk is not None and args.shard_optimizer:
        raise BadArgumentError("--disk: --shard-optimizer (ZeRO-1) keeps each rank's part of the optimizer state in "
                               "memory, with no disk tier; drop one of them")
    if spec.run["batch"] % ranks:
        raise BadArgumentError(f"--batch: {spec.run['batch']} sequences per step do not split evenly over {ranks} "
                               f"ranks; pass a multiple of {ranks}")
    if spec.run["seq_len"] > spec.config["max_position_embeddings"]:
        raise BadArgumentError(f"--seq-len: {spec.run['seq_len']} exceeds the model's max_position_embeddings "
                               f"{spec.config['max_position_embeddings']}")

    data = args.data
    if spec.resumed:
        trained_on = prior.get("data", {})
        if trained_on.get("source", EMBEDDED) != EMBEDDED and data is None:
            raise BadArgumentError(f"--data: this run trained on {trained_on['source']}; pass --data with that file "
                                   "to continue (a checkpoint never chooses which files to read)")
    text, digest = read_text(data)
    tokens = spec.tokenizer.encode(text, eos=spec.tokenizer.eos_id is not None)
    spec.source = os.path.abspath(data) if data else EMBEDDED
    if spec.resumed:
        trained_on = prior.get("data", {})
        recorded = trained_on.get("sha256")
        if (recorded and recorded != digest) or (not recorded and trained_on.get("tokens") != len(tokens)):
            raise BadArgumentError(f"--data: {data or 'the embedded corpus'} differs from the text this run trained "
                                   f"on ({trained_on.get('source')}); --resume continues the same data")
    spec.data = {"source": spec.source, "sha256": digest, "tokens": len(tokens)}
    spec.train_tokens, spec.validation = split(tokens, spec.run["seq_len"])
    spec.position = prior.get("data", {}).get("position", 0) if spec.resumed else 0
    spec.batches = Batches(spec.train_tokens, spec.run["batch"], spec.run["seq_len"], spec.position,
                           f"--data: {args.data}" if args.data else "the embedded corpus")
    spec.losses = list(prior.get("losses", []))
    spec.lrs = list(prior.get("lrs", []))  # the lr of each step (of the last ones: older checkpoints kept none)
    spec.val_losses = [list(v) for v in prior.get("val_losses", [])]
    # [first step, lr] of each run of this training (a checkpoint from before they were kept: its lr)
    spec.segments = [list(v) for v in prior.get("segments", [[0, before.get("lr", spec.run["lr"])]] if spec.resumed
                                                else [])] + [[int(prior.get("step", 0)), spec.run["lr"]]]
    spec.first_step = int(prior.get("step", 0))
    spec.steps = args.steps
    # the lr schedule's horizon: a resumed run keeps its first run's (so that it continues the same
    # schedule) unless it trains past it, which stretches the decay to this run's end
    end, planned = spec.first_step + spec.steps, before.get("schedule_steps")
    spec.run["schedule_steps"] = args.schedule_steps or max(planned or 0, end)
    if planned is not None and planned != spec.run["schedule_steps"]:
        spec.changed["schedule_steps"] = (planned, spec.run["schedule_steps"])
    # a resumed run validates at its first run's interval unless told otherwise, so its curve keeps one spacing
    spec.eval_every = args.eval_every or before.get("eval_every") or max(1, args.steps // 10)
    spec.run["eval_every"] = spec.eval_every
    spec.save_every = args.save_every
    spec.trace, spec.trace_steps = args.trace, args.trace_steps or TRACE_STEPS
    if args.trace is None and args.trace_steps is not None:
        raise BadArgumentError("--trace-steps: says how many steps --trace covers; add --trace FILE")
    if args.trace is not None:
        if os.path.isdir(args.trace):
            raise BadArgumentError(f"--trace: {args.trace} is a directory; name a file, e.g. "
                                   f"{os.path.join(args.trace, 'trace.json')}")
        if os.path.lexists(args.trace) and not stat.S_ISREG(os.lstat(args.trace).st_mode):
            raise BadArgumentError(f"--trace: {args.trace} exists and is not a regular file (a device, FIFO or "
                                   "link); --overwrite replaces regular files only: choose another path")
        if os.path.exists(args.trace) and not args.overwrite:
            raise BadArgumentError(f"--trace: {args.trace} exists; remove it, choose another path or pass --overwrite")
    return spec


def _check_writable(directory, flag="--out", create=True):
    """Creates the output directory (when create) and proves a file can be written there, before
    any training."""
    try:
        if create:
            os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise BadArgumentError(f"{flag}: cannot write to {directory}: {e.strerror or e}") from None


def _check_outputs(spec):
    if spec.trace is not None:  # first: --out's directory is created
        _check_writable(os.path.dirname(os.path.abspath(spec.trace)), "--trace", create=False)
    _check_writable(spec.out)


def resume_command(spec, remaining):
    parts = ["dataflow", "train", "--resume", spec.ckpt_dir, "--out", spec.out]
    if spec.source != EMBEDDED:
        parts += ["--data", spec.source]
    if remaining > 0:
        parts += ["--steps", str(remaining)]
    for flag, value in (("--backend", spec.backend), ("--device-memory", spec.device_memory),
                        ("--host-memory", spec.host_memory), ("--disk", spec.disk_flags[0]),
                        ("--disk-memory", spec.disk_flags[1])):
        if value is not None and (flag, value) != ("--backend", "host"):
            parts += [flag, value]
    if spec.nproc:
        parts += ["--nproc", str(spec.nproc)]
    if spec.shard_optimizer:
        parts += ["--shard-optimizer"]
    return shlex.join(parts)


class Interrupts:
    """While active, the first SIGINT asks the loop to stop after the current step (it then saves);
    a second one raises KeyboardInterrupt at once."""

    def __init__(self, progress):
        self.requested, self.progress = False, progress

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, *_):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.progress.note("dataflow train: interrupted: finishing this step and saving a checkpoint "
                           "(Ctrl-C again to quit without saving)")

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)


def _device(backend):
    """The backend and, on vulkan, which device it is (a GPU, or lavapipe on the CPU)."""
    if backend.startswith("vulkan"):
        from .. import vulkan
        index = int(backend.partition(":")[2] or 0)
        return next((f"{backend}: {d['name']}" for d in vulkan.list_devices() if d["index"] == index), backend)
    return backend


def _banner(spec, trainer, handle, engine, ranks):
    cfg, run = spec.config, spec.run
    params, parts = model_memory(cfg, run["dtype"], training=True, master_weights=run["master_weights"])
    tokens_per_step = run["batch"] * run["seq_len"]
    epochs = spec.steps * tokens_per_step / max(len(spec.train_tokens), 1)
    lines = [
        f"dataflow train: Llama {params / 1e6:.2f}M parameters ({cfg['num_hidden_layers']} layers, hidden "
        f"{cfg['hidden_size']}, {cfg['num_attention_heads']} heads, vocab {cfg['vocab_size']}) from "
        f"{spec.config_source}, {run['dtype']}",
        f"  data: {spec.source}: {spec.data['tokens']:,} tokens ({spec.tokenizer.kind} tokenizer, vocab "
        f"{spec.tokenizer.vocab_size}); {len(spec.train_tokens):,} train, {spec.validation.size:,} held out for "
        "validation",
        f"  steps: {spec.steps} x {run['batch']} x {run['seq_len']} = {spec.steps * tokens_per_step:,} tokens "
        f"({epochs:.1f} epochs), lr {run['lr']:g} ({_schedule(run)}), validation "
        + ("every step" if spec.eval_every == 1 else f"every {spec.eval_every} steps"),
        f"  memory: model {mib(sum(parts.values()))} ({', '.join(f'{k} {mib(v)}' for k, v in parts.items())}) of "
        f"{mib(handle.memory_capacity())} device memory ({_device(handle.backend)}); host matmul: {engine}",
        f"  output: {spec.ckpt_dir} (checkpoint), {os.path.join(spec.out, 'loss.png')} (loss curve)",
    ]
    if trainer.plan is not None:
        p = trainer.plan
        lines.insert(4, f"  ring: training does not fit the device: {p.weight_slots} of {cfg['num_hidden_layers']} "
                        f"layers' weights on the device at a time, {p.rounds_per_step} round(s) of "
                        f"{p.chunks_per_round} chunk(s) of {p.chunk_tokens} tokens per step, optimizer {p.optimizer}; "
                        f"predicted {p.predicted_step_seconds:.3g} s per step")
        if p.disk["used"]:
            lines.insert(5, f"  disk tier: {', '.join(f'{k} {mib(v)}' for k, v in p.disk_memory.items())} in "
                            f"{spec.disk.directory} ({trainer._engine.ring.executor.disk_mode})")
    if ranks > 1:
        lines.insert(-1, f"  data-parallel: {ranks} ranks (mpirun), {run['batch'] // ranks} sequences each per step"
                     + (", optimizer state sharded (ZeRO-1)" if spec.shard_optimizer else ""))
    if spec.resumed:
        changes = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in spec.changed.items()) or "no settings changed"
        lines.insert(1, f"  resuming {spec.resumed.path} at step {spec.first_step} ({changes})")
    print("\n".join(lines), flush=True)


def _schedule(run):
    horizon = run["schedule_steps"]
    return (f"warmup {lr_schedule.warmup_steps(horizon)} steps, cosine to {run['lr'] * lr_schedule.FLOOR:g} at "
            f"step {horizon}")


def train(args):
    try:
        from .. import Trainer
    except ImportError:
        raise UnsupportedError("train needs dataflow.Trainer and dataflow.models (the Llama model), which this "
                               "build lacks") from None
    from ..build_info import matmul_engine
    ranks = distributed.launcher_size()
    if ranks is None and args.nproc and args.nproc > 1:
        spec = prepare(args, args.nproc)  # every flag checked once, here, before any rank starts
        command = launch.mpirun_command(args.nproc, args.argv)
        _check_outputs(spec)
        code, interrupted = launch.run(command)
        return INTERRUPTED if interrupted else code
    if ranks is not None and args.nproc not in (None, ranks):
        raise BadArgumentError(f"--nproc {args.nproc}: this process is one of {ranks} ranks started by mpirun; "
                               f"drop --nproc (mpirun -n sets the number of ranks) or make it {ranks}")
    spec = prepare(args, ranks or 1)
    if ranks is not None and args.threads is None:  # the ranks on this machine share its cores
        args.threads = max(1, (os.cpu_count() or 1) // distributed.local_ranks())
    handle = open_handle(args)
    try:
        comm = distributed.init(handle) if ranks is not None else None
        lead = comm is None or comm.rank == 0
        with _quiet_unless(lead):
            weights = None
            if spec.init_dir:
                weights = check_weights(read_directory(spec.init_dir), parameter_shapes(spec.config),
                                        spec.config["tie_word_embeddings"], spec.init_dir)
            model, trainer = _model_and_trainer(spec, handle, Trainer, weights, comm)
            if lead:
                _check_outputs(spec)
                _banner(spec, trainer, handle, matmul_engine(), ranks or 1)
            code = _run(spec, handle, model, trainer, comm)
        if comm is not None:  # on success only: a failed rank leaves without MPI_Finalize (cli.main)
            model.close()  # first: a model sharding its optimizer state over comm keeps comm from closing
            comm.close()
        return code
    finally:
        handle.close()


@contextlib.contextmanager
def _quiet_unless(lead):
    """Rank 0 speaks for the job: the other ranks' stdout and stderr go nowhere (their errors
    still reach the terminal: cli.main prints them after this has ended)."""
    if lead:
        yield
        return
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere), contextlib.redirect_stderr(nowhere):
        yield


def _stop_requested(interrupts, comm):
    """Whether the run stops after this step: a Ctrl-C here or, in a job, on any rank or at the
    launcher (its stop file), agreed by all ranks so that they stop at the same step."""
    if comm is None:
        return interrupts.requested
    stop_file = os.environ.get(launch.STOP_FILE_ENV)
    asked = interrupts.requested or bool(stop_file and os.path.exists(stop_file))
    return bool(comm.sum_host([float(asked)])[0] > 0)


def _model_and_trainer(spec, handle, Trainer, weights, comm):
    """The model and its Trainer: all-resident when training fits the device, else planned into
    the ring under --device-memory and --host-memory (default: what the host has available),
    data-parallel ranks (comm) too, the plan counting one rank's part of a sharded optimizer state
    (--shard-optimizer, ZeRO-1)."""
    run = spec.run
    options = {"master_weights": True} if run["master_weights"] else {}
    if run["optimizer_state"] != "fp32":
        options["optimizer_state"] = run["optimizer_state"]
    if run["host_gradients"] != "fp32":
        options["host_gradients"] = run["host_gradients"]
    ranks = comm.size if comm is not None else 1
    shards = ranks if spec.shard_optimizer else 1
    if comm is not None:
        options.update(comm=comm, shard_optimizer=spec.shard_optimizer)
    options.update(host_memory=host_memory_available() if spec.host_memory is None else spec.host_memory,
                   seq_len=run["seq_len"], batch_size=run["batch"] // ranks)
    if spec.disk is not None:
        options["disk"] = spec.disk
    hint = "; pass a larger --device-memory or --host-memory, or a smaller --batch, --seq-len or --config"
    try:
        try:
            check_memory(handle, spec.config, run["dtype"], spec.config_source, training=True,
                         master_weights=run["master_weights"])
        except OutOfMemoryError:  # not all-resident: does the ring fit, before building a large model?
            ring_plan(spec.config, run["seq_len"], handle.memory_capacity() - handle.memory_in_use(),
                      options["host_memory"], options["batch_size"] * run["seq_len"], run["dtype"],
                      run["master_weights"], optimizer_state=run["optimizer_state"],
                      disk_bytes=spec.disk.bytes if spec.disk else None, host_gradients=run["host_gradients"],
                      shard_ranks=shards)
        model = model_from_config(spec.config, handle, run["dtype"], seed=run["seed"], where=spec.config_source)
        if weights:
            copy_weights(model, weights)
        trainer = Trainer(model, lr=run["lr"], **options)
    except OutOfMemoryError as e:
        raise OutOfMemoryError(f"{e}{hint}") from None
    return model, trainer


def _run(spec, handle, model, trainer, comm=None):
    run = spec.run
    lead = comm is None or comm.rank == 0
    rows = run["batch"] // (comm.size if comm else 1)
    mine = slice(comm.rank * rows, (comm.rank + 1) * rows) if comm else slice(None)
    if spec.resumed:
        checkpoint.restore_training(spec.resumed, model, trainer)
    batches, losses, val_losses, lrs = spec.batches, spec.losses, spec.val_losses, spec.lrs

    saved = [spec.first_step]
    # the plot keeps one title over resumes (what was trained, not this invocation's flags) and marks
    # where each resumed run began, with its lr when that changed
    params, _ = model_memory(spec.config, run["dtype"])
    title = (f"{os.path.basename(os.path.abspath(spec.out))}: Llama {params / 1e6:.2f}M "
             f"({spec.config['num_hidden_layers']} layers, hidden {spec.config['hidden_size']})")
    marks = [(step, "resumed" + (f", lr {before:g} -> {lr:g}" if lr != before else ""))
             for (_, before), (step, lr) in zip(spec.segments, spec.segments[1:])]

    def save():
        if not lead:
            if spec.shard_optimizer:
                trainer.state_dict()  # the gather of the sharded state takes every rank
            saved[0] = trainer.step_count
            return
        try:
            checkpoint.save_training(spec.ckpt_dir, model, trainer, {
                "run": run, "tokenizer": spec.tokenizer.to_dict(), "losses": losses, "val_losses": val_losses,
                "lrs": lrs, "segments": spec.segments,
                "data": {**spec.data, "position": batches.position}}, tokenizer=spec.tokenizer)
        except OSError as e:  # disk full, quota, permissions: the atomic save left the previous checkpoint
            raise DataflowError(f"cannot save the checkpoint {spec.ckpt_dir}: {e.strerror or e}; it keeps the last "
                                f"saved state (step {saved[0]})") from None
        saved[0] = trainer.step_count
        loss_plot.save(os.path.join(spec.out, "loss.png"), losses, val_losses, title=title, marks=marks, lrs=lrs)

    def validate():
        """The mean loss over the validation rows, in pieces of at most a training batch's rows:
        the memory the run was planned for."""
        rows, piece = spec.validation, run["batch"]
        if not len(rows):
            return None
        losses = [float(model.loss(rows[i:i + piece])) * len(rows[i:i + piece]) for i in range(0, len(rows), piece)]
        return sum(losses) / len(rows)  # every row has seq_len - 1 labelled tokens

    tracing = spec.trace is not None and lead  # until the trace is written

    def write_trace():
        nonlocal tracing
        tracing = False
        trainer.stop_trace()
        try:
            trainer.trace(spec.trace)
        except OSError as e:  # the trace is a by-product: the run goes on
            print(f"train: warning: --trace: cannot write {spec.trace}: {e.strerror or e}; training continues",
                  file=sys.stderr, flush=True)

    def failed(what, error):
        """Saves what the run has trained (the failed step changed nothing), then the error."""
        if saved[0] != trainer.step_count and comm is None:  # a job's save would wait for the failed rank
            save()
            kept = f"the checkpoint {spec.ckpt_dir} holds step {trainer.step_count}"
        else:
            kept = f"{spec.ckpt_dir} keeps the last saved state (step {saved[0]})"
        return DataflowError(f"{what}: {error}; {kept}")

    if tracing:
        trainer.start_trace()
    progress = Progress(spec.steps, spec.first_step)
    started, tokens_done, done, stopped = time.perf_counter(), 0, 0, False
    with Interrupts(progress) as interrupts:
        for done in range(1, spec.steps + 1):
            step = spec.first_step + done
            position = batches.position
            inputs = batches.next()  # the whole batch: this rank trains on its rows
            # the schedule of the command line's (or the checkpoint's) peak lr, not the lr stored with the optimizer
            trainer.lr = lr_schedule.lr_at(step, run["lr"], run["schedule_steps"])
            try:
                loss = float(trainer.step(inputs[mine]))
            except DataflowError as e:
                batches.position = position  # a resumed run retries this batch
                raise failed(f"step {step} failed", e) from None
            if not math.isfinite(loss):
                raise DataflowError(f"step {step}: the loss is {loss} (diverged; try a lower --lr); nothing saved, "
                                    f"{spec.ckpt_dir} keeps the last saved state")
            losses.append(loss)
            lrs.append(trainer.lr)
            tokens_done += inputs.size
            if tracing and done == spec.trace_steps:
                write_trace()
            try:
                val = validate() if lead and (done % spec.eval_every == 0 or done == spec.steps) else None
            except DataflowError as e:
                raise failed(f"validation after step {step}", e) from None
            if val is not None:
                val_losses.append([step, val])
            progress.update(done, loss, tokens_done / (time.perf_counter() - started), handle.memory_in_use(), val)
            stopped = _stop_requested(interrupts, comm)
            if stopped:
                break
            if spec.save_every and done % spec.save_every == 0 and done != spec.steps:
                save()
        if tracing:
            write_trace()
        save()
    elapsed = time.perf_counter() - started
    if stopped and done < spec.steps:
        print(f"train: interrupted after step {spec.first_step + done}; checkpoint saved in {spec.ckpt_dir}.\n"
              f"resume with: {resume_command(spec, spec.steps - done)}", file=sys.stderr, flush=True)
        # a rank's non-zero code would make mpirun abort the job: the launcher reports the interruption
        return INTERRUPTED if comm is None else 0
    val = f", validation {val_losses[-1][1]:.4f}" if val_losses else ""
    print(f"train: {done} steps (step {trainer.step_count} in all) in {duration(elapsed)}, loss "
          f"{losses[len(losses) - done]:.4f} -> {losses[-1]:.4f}{val}, {tokens_done / elapsed:,.0f} tok/s, device "
          f"memory peak {mib(handle.memory_peak())} of {mib(handle.memory_capacity())}; "
          f"checkpoint {spec.ckpt_dir}, loss curve {os.path.join(spec.out, 'loss.png')}"
          f"{f', trace {spec.trace}' if spec.trace is not None else ''}\n"
          f"sample from it: dataflow generate --checkpoint {spec.ckpt_dir}", flush=True)
    return 0
