"""Training checkpoints: a directory replaced atomically, validated on load.

    <dir>/config.json            HF config (with model.safetensors the directory is also an HF model dir)
    <dir>/model.safetensors      model.state_dict()
    <dir>/optimizer.safetensors  the arrays of trainer.state_dict()
    <dir>/tokenizer.json         the tokenizer, when it has one (a Hugging Face tokenizers one), so
                                 that the directory is a whole HF model directory
    <dir>/trainer_state.json     step, data position, RNG, caller state, the rest of trainer.state_dict(),
                                 and the size + SHA-256 of every other file (checked on load)

A save writes a sibling temp directory, fsyncs it and renames it into place (atomic.replace_directory):
a failed or killed save leaves the previous checkpoint loadable.
"""
import hashlib
import json
import os

import numpy as np

from . import atomic
from . import safetensors as st
from ..errors import BadArgumentError, FileFormatError
from .file_checks import member, open_regular, read_json
from .tokenizer import TOKENIZER_NAME

STATE_NAME = "trainer_state.json"
MODEL_NAME = st.WEIGHTS_NAME
OPTIMIZER_NAME = "optimizer.safetensors"
CONFIG_NAME = "config.json"
FORMAT = "dataflow-checkpoint"
VERSION = 1


def _sha256(path):
    digest = hashlib.sha256()
    with open_regular(path, "checkpoint file") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def flatten(tree, prefix=""):
    """(arrays, skeleton): numpy arrays and numpy scalars of a nested dict/list pulled out into
    {"a/b/0": array}; the skeleton is JSON with {"__array__": key} (or "__scalar__") in their place."""
    arrays = {}

    def walk(node, key):
        if isinstance(node, np.ndarray):
            arrays[key] = node
            return {"__array__": key}
        if isinstance(node, np.generic):
            arrays[key] = np.asarray(node)
            return {"__scalar__": key}
        if isinstance(node, dict):
            if not all(isinstance(k, str) for k in node):
                raise TypeError(f"checkpoint state: keys must be strings, got {list(node)!r} at {key or 'top level'}")
            return {k: walk(v, f"{key}/{k}" if key else k) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(v, f"{key}/{i}" if key else str(i)) for i, v in enumerate(node)]
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"checkpoint state: cannot store {type(node).__name__} at {key or 'top level'}")

    return arrays, walk(tree, prefix)


def unflatten(skeleton, arrays, where=STATE_NAME):
    def walk(node):
        if isinstance(node, dict) and len(node) == 1 and ("__array__" in node or "__scalar__" in node):
            key = node.get("__array__", node.get("__scalar__"))
            if not isinstance(key, str) or key not in arrays:
                raise FileFormatError(f"{where}: refers to array {key!r}, which {OPTIMIZER_NAME} lacks")
            return np.array(arrays[key]) if "__array__" in node else arrays[key][()]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node
    return walk(skeleton)


def save(directory, model_state, config, optimizer_state=None, state=None, texts=None):
    """Writes a checkpoint: model_state {name: array}, config (HF dict), optimizer_state (nested
    dict of arrays and JSON values, e.g. trainer.state_dict()), state (JSON: step, data position...),
    texts {file name: text} (e.g. tokenizer.json), checked on load like the rest."""
    arrays, skeleton = flatten(optimizer_state or {})
    state = dict(state or {})
    json.dumps(state)  # fail before touching the disk if the caller's state is not JSON

    def fill(tmp):
        with open(os.path.join(tmp, CONFIG_NAME), "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        st.write(os.path.join(tmp, MODEL_NAME), model_state, metadata={"format": "pt"})
        st.write(os.path.join(tmp, OPTIMIZER_NAME), arrays)
        for name, text in (texts or {}).items():
            with open(member(tmp, name, "checkpoint.save", "texts"), "w", encoding="utf-8") as f:
                f.write(text)
        files = {name: {"bytes": os.path.getsize(os.path.join(tmp, name)), "sha256": _sha256(os.path.join(tmp, name))}
                 for name in (CONFIG_NAME, MODEL_NAME, OPTIMIZER_NAME, *(texts or {}))}
        with open(os.path.join(tmp, STATE_NAME), "w") as f:
            json.dump({"format": FORMAT, "version": VERSION, "files": files, "optimizer": skeleton,
                       "state": state}, f, indent=2)

    atomic.replace_directory(directory, fill)


class Checkpoint:
    """A loaded, validated checkpoint: .config, .model_state, .optimizer_state, .state, .path."""

    def __init__(self, path, config, model_state, optimizer_state, state):
        self.path = path
        self.config = config
        self.model_state = model_state
        self.optimizer_state = optimizer_state
        self.state = state


def load(directory):
    """Reads and checks a checkpoint; a missing, truncated or altered file raises FileFormatError naming it.
    After a save killed between its two renames, reads the previous checkpoint it left beside `directory`."""
    path = atomic.readable_directory(os.fspath(directory))
    manifest_path = os.path.join(path, STATE_NAME)
    if not os.path.lexists(manifest_path):
        raise FileFormatError(f"{manifest_path}: cannot read: no such file; not a checkpoint directory?")
    manifest = read_json(manifest_path, STATE_NAME)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise FileFormatError(f"{manifest_path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise FileFormatError(f"{manifest_path}: version {manifest.get('version')!r:.40}; this dataflow reads {VERSION}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not {CONFIG_NAME, MODEL_NAME, OPTIMIZER_NAME} <= files.keys():
        raise FileFormatError(f"{manifest_path}: files: expected the size and SHA-256 of {CONFIG_NAME}, {MODEL_NAME} "
                              f"and {OPTIMIZER_NAME}, got {files!r:.200}")
    if not isinstance(manifest.get("state"), dict):
        raise FileFormatError(f"{manifest_path}: state: expected an object, got {manifest.get('state')!r:.100}")
    for name, expected in files.items():
        file = member(path, name, manifest_path, "files")
        if (not isinstance(expected, dict) or type(expected.get("bytes")) is not int
                or not isinstance(expected.get("sha256"), str)):
            raise FileFormatError(f"{manifest_path}: files[{name!r}]: expected {{\"bytes\": int, \"sha256\": str}}, "
                                  f"got {expected!r:.100}")
        if not os.path.lexists(file):
            raise FileFormatError(f"{file}: missing from the checkpoint")
        size = os.path.getsize(file)
        if size != expected["bytes"]:
            raise FileFormatError(f"{file}: {size} bytes, the checkpoint recorded {expected['bytes']}: truncated "
                                  "or altered")
        if _sha256(file) != expected["sha256"]:
            raise FileFormatError(f"{file}: contents differ from the SHA-256 recorded at save: corrupted")
    config = read_json(os.path.join(path, CONFIG_NAME), CONFIG_NAME)
    model_state = {k: np.array(t.values()) for k, t in st.SafetensorsFile(os.path.join(path, MODEL_NAME)).tensors().items()}
    arrays = {k: np.array(t.values()) for k, t in st.SafetensorsFile(os.path.join(path, OPTIMIZER_NAME)).tensors().items()}
    try:
        optimizer_state = unflatten(manifest.get("optimizer"), arrays, manifest_path)
    except RecursionError:
        raise FileFormatError(f"{manifest_path}: optimizer: nested too deeply") from None
    return Checkpoint(path, config, model_state, optimizer_state, manifest["state"])


def save_training(directory, model, trainer, state=None, tokenizer=None):
    """save() of a model and its Trainer; `state` adds the caller's JSON (data position, RNG, losses);
    a tokenizer with a tokenizer.json (dataflow.io.tokenizer.HFTokenizer) is saved as one."""
    config = model.config.to_dict()
    texts = {TOKENIZER_NAME: tokenizer.to_json()} if hasattr(tokenizer, "to_json") else None
    save(directory, model.state_dict(), config, trainer.state_dict(),
         {"step": int(trainer.step_count), **(state or {})}, texts)


def restore_training(checkpoint, model, trainer):
    """Puts a loaded Checkpoint's weights and optimizer state into a model and trainer built from
    its config; returns the caller state saved with it."""
    if isinstance(checkpoint.optimizer_state, dict) and "master" in checkpoint.optimizer_state \
            and not model.master_weights:  # the caller's model, not the file, is at fault
        raise BadArgumentError(f"restore_training: {checkpoint.path} has fp32 master weights, but the model keeps "
                               "none (Trainer(..., master_weights=True) or Llama(..., master_weights=True))")
    for name, load, values in ((MODEL_NAME, model.load_state_dict, checkpoint.model_state),
                               (STATE_NAME, trainer.load_state_dict, checkpoint.optimizer_state)):
        try:
            load(values)
        except BadArgumentError as e:  # the loaders name the field; the file is the checkpoint's
            raise FileFormatError(f"{os.path.join(checkpoint.path, name)}: {e}") from None
    return checkpoint.state
