"""A Trainer's optimizer state as a state dict (torch.optim.AdamW's names: exp_avg, exp_avg_sq;
master weights; hyperparameters) and back, every field checked before anything is written: a
refused load changes nothing. bf16 and 8-bit moments travel as trained, raw bytes per block."""
from types import SimpleNamespace

import numpy as np

from .._ffi import modelslib
from ..errors import BadArgumentError, check
from ..models.llama import ADAM_M, ADAM_V, GRAD, MASTER
from ..ring import OPTIMIZER_STATES
from .adamw_hyperparameters import adamw_hyperparameters, betas_pair
from .optimizer_state import MOMENTS, decode, encode, moment_bytes


def state_dict(trainer):
    """{"step": int, "exp_avg": {name: float32 numpy}, "exp_avg_sq": {...}, "hyperparameters": {...}}
    (m and v as torch.optim.AdamW names them; empty dicts before the first step), and
    "master": {name: float32 numpy} when the model keeps fp32 master weights."""
    trainer._ranks.shard(trainer.model, trainer._engine, False)
    if trainer.optimizer_state == "fp32":
        m, v = trainer.model._read_kind(ADAM_M), trainer.model._read_kind(ADAM_V)
    else:  # as trained: raw bytes per block (empty before the first step)
        m, v = (trainer._pending_state or {}).get(ADAM_M), (trainer._pending_state or {}).get(ADAM_V)
        if trainer._engine.ring is not None and trainer.step_count:
            x = trainer._engine.ring.executor
            m, v = ({f"block{b}": x.read(b, k) for b in range(x.num_blocks)} for k in (ADAM_M, ADAM_V))
    state = {"step": trainer.step_count, "exp_avg": m or {}, "exp_avg_sq": v or {},
             "hyperparameters": {"lr": trainer.lr, "weight_decay": trainer.weight_decay, "betas": list(trainer.betas),
                                 "eps": trainer.eps, "grad_clip": trainer.grad_clip}}
    masters = trainer.model._read_kind(MASTER)
    if masters is not None:
        state["master"] = masters
    if trainer.optimizer_state != "fp32":
        state["optimizer_state"] = trainer.optimizer_state
    trainer._ranks.shard(trainer.model, trainer._engine, True)
    return state


def _moment_blocks(trainer, state, stored):
    """{ADAM_M, ADAM_V: [float32 values per block]} of a state_dict's moments stored as
    `stored` (fp32: by tensor name; bf16, 8bit: raw bytes per block), checked."""
    layout, out = trainer.model.layout, {}
    numels = [row[GRAD] // 4 for row in layout.bytes]
    for kind, moment in zip((ADAM_M, ADAM_V), MOMENTS):
        if stored == "fp32":
            named = _checked_arrays(trainer, moment, state.get(moment, {}))
            blocks = [np.zeros(n, np.float32) for n in numels]
            for name, shape, b, offset in layout.tensors:
                blocks[b][offset:offset + named[name].size] = named[name].reshape(-1)
        else:
            raw = state.get(moment)
            keys = [f"block{b}" for b in range(len(numels))]
            if not isinstance(raw, dict) or sorted(raw) != sorted(keys):
                raise BadArgumentError(f"Trainer.load_state_dict: {moment}: expected raw {stored} blocks "
                                       f"{keys[0]}..{keys[-1]}")
            for k, n in zip(keys, numels):
                if np.asarray(raw[k]).nbytes != moment_bytes(stored, n):
                    raise BadArgumentError(f"Trainer.load_state_dict: {moment} {k}: expected "
                                           f"{moment_bytes(stored, n)} bytes of {stored} state, got "
                                           f"{np.asarray(raw[k]).nbytes}")
            blocks = [decode(stored, raw[k], n, moment) for k, n in zip(keys, numels)]
        out[kind] = blocks
    return out


def write_pending(trainer, executor):
    """Moves raw bf16 / 8-bit moments loaded before `executor` existed into it."""
    if trainer._pending_state:
        for kind, blocks in trainer._pending_state.items():
            for b in range(len(blocks)):
                executor.write(b, kind, blocks[f"block{b}"])
        trainer._pending_state = None


def _checked_arrays(trainer, key, values):
    """{name: float32 array} of one kind of state, checked against the model's names and shapes."""
    shapes = trainer.model.shapes()
    if not isinstance(values, dict):
        raise BadArgumentError(f"Trainer.load_state_dict: {key}: expected a dict of arrays, got "
                               f"{type(values).__name__}")
    missing = [n for n in shapes if n not in values]
    unexpected = [n for n in values if n not in shapes]
    if missing or unexpected:
        raise BadArgumentError(f"Trainer.load_state_dict: {key}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    checked = {}
    for n, shape in shapes.items():
        try:
            with np.errstate(over="raise"):
                checked[n] = np.asarray(values[n], dtype=np.float32)
        except (TypeError, ValueError, OverflowError, FloatingPointError) as e:
            raise BadArgumentError(f"Trainer.load_state_dict: {key} {n}: expected float32 numbers, got "
                                   f"{type(values[n]).__name__} ({e})") from None
        if checked[n].shape != shape:
            raise BadArgumentError(f"Trainer.load_state_dict: {key} {n}: expected shape {shape}, "
                                   f"got {checked[n].shape}")
    return checked


def _checked_state(trainer, state, moments=True):
    """(step, {kind: arrays}, hyperparameters or None) of a state_dict, every field checked
    before anything is written: a refused load changes nothing."""
    if not isinstance(state, dict):
        raise BadArgumentError(f"Trainer.load_state_dict: expected a dict, got {type(state).__name__}")
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise BadArgumentError(f"Trainer.load_state_dict: step must be an integer >= 0, got {step!r:.60}")
    kinds = {}
    if "master" in state:
        if not trainer.model.master_weights:
            raise BadArgumentError("Trainer.load_state_dict: the state has fp32 master weights, but the model "
                                   "keeps none (Trainer(..., master_weights=True) or Llama(..., "
                                   "master_weights=True))")
        kinds[MASTER] = _checked_arrays(trainer, "master", state["master"])
    if step > 0 and moments:
        kinds[ADAM_M] = _checked_arrays(trainer, "exp_avg", state.get("exp_avg", {}))
        kinds[ADAM_V] = _checked_arrays(trainer, "exp_avg_sq", state.get("exp_avg_sq", {}))
    hp = state.get("hyperparameters")
    if hp:
        fields = ("lr", "weight_decay", "betas", "eps", "grad_clip")
        if not isinstance(hp, dict) or any(f not in hp for f in fields):
            raise BadArgumentError(f"Trainer.load_state_dict: hyperparameters: expected an object with "
                                   f"{', '.join(fields)}, got {hp!r:.100}")
        hp = {f: hp[f] for f in fields}
        adamw_hyperparameters(SimpleNamespace(**hp))
    return int(step), kinds, hp


def load_state_dict(trainer, state, convert=False):
    """Trainer.load_state_dict: checks every field first, then writes."""
    if not isinstance(state, dict):
        raise BadArgumentError(f"Trainer.load_state_dict: expected a dict, got {type(state).__name__}")
    stored = state.get("optimizer_state", "fp32")
    if stored not in OPTIMIZER_STATES:
        raise BadArgumentError(f"Trainer.load_state_dict: optimizer_state must be one of "
                               f"{', '.join(OPTIMIZER_STATES)}, got {stored!r:.40}")
    if stored != trainer.optimizer_state and state.get("step") and not convert:
        raise BadArgumentError(f"Trainer.load_state_dict: the optimizer state was trained as {stored}, this "
                               f"Trainer keeps {trainer.optimizer_state}; pass convert=True to convert it")
    lean = stored != "fp32" or trainer.optimizer_state != "fp32"
    moments = _moment_blocks(trainer, state, stored) if lean and state.get("step") else None
    step, kinds, hp = _checked_state(trainer, dict(state, exp_avg=None, exp_avg_sq=None) if lean else state,
                                          moments=not lean)
    if moments and trainer.optimizer_state == "fp32":  # back to named arrays for the model
        for kind, blocks in moments.items():
            kinds[kind] = {name: blocks[b][offset:offset + int(np.prod(shape))].reshape(shape)
                           for name, shape, b, offset in trainer.model.layout.tensors}
    elif moments and stored == trainer.optimizer_state:  # as trained (8-bit does not survive a re-encode)
        trainer._pending_state = {kind: {key: np.ascontiguousarray(raw).view(np.uint8).reshape(-1).copy()
                                      for key, raw in state[moment].items()}
                               for kind, moment in zip((ADAM_M, ADAM_V), MOMENTS)}
    elif moments:
        trainer._pending_state = {kind: {f"block{b}": encode(trainer.optimizer_state, values, moment)
                                      for b, values in enumerate(blocks)}
                               for (kind, blocks), moment in zip(moments.items(), MOMENTS)}
    trainer._ranks.shard(trainer.model, trainer._engine, False)
    if step > 0 and trainer._engine.ring is None and trainer.optimizer_state == "fp32":
        trainer.model._on(0)
        check(modelslib.dataflow_llama_alloc_optimizer_state(trainer.model._m, 0))
    for kind, arrays in kinds.items():  # MASTER first: writing it resets nothing else
        trainer.model._write_kind(kind, arrays.__getitem__)
    if hp:
        trainer.lr, trainer.weight_decay, trainer.betas = hp["lr"], hp["weight_decay"], betas_pair(hp["betas"])
        trainer.eps, trainer.grad_clip = hp["eps"], hp["grad_clip"]
    trainer.step_count = step
    if trainer._engine.ring is not None:
        write_pending(trainer, trainer._engine.ring.executor)
    trainer._ranks.shard(trainer.model, trainer._engine, True)
