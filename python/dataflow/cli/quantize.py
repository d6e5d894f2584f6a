"""`dataflow quantize MODEL_DIR OUT_DIR --bits 8|4 [--group-size N] [--zero-point]`: a model's
layer Linear weights quantized (dataflow.quantize) into a Hugging Face-style directory that
dataflow.models.from_pretrained and `dataflow generate --checkpoint` load: config.json with a
quantization_config, model.safetensors with the int8 / packed int4 codes, fp32 scales (and
zero points), the other tensors in fp32, and the tokenizer files. MODEL_DIR is a `dataflow
train` checkpoint or a Hugging Face model directory. OUT_DIR is written whole and swapped in
atomically (dataflow.io.atomic); an existing one only with --overwrite."""
import os
import shutil
import sys

import numpy as np

from ..io import atomic, checkpoint
from ..io import safetensors as st
from ..io import tokenizer as tokenizers
from ..errors import BadArgumentError, FileFormatError
from ..io.pretrained import (CONFIG_NAME, check_weights, parameter_shapes, read_config, validate_config,
                             write_model_files)
from ..quantize import quantization_config, quantize_state

# files of a Hugging Face model directory that travel with its weights
TOKENIZER_FILES = (tokenizers.TOKENIZER_NAME, "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json")


def _source(path):
    """(validated config, float state dict, write_tokenizer(directory)) of MODEL_DIR."""
    found = atomic.readable_directory(os.path.abspath(path))
    if not os.path.isdir(found):
        raise BadArgumentError(f"MODEL_DIR: {path} is not a directory; expected a `dataflow train` checkpoint or "
                               f"a Hugging Face model directory")
    if os.path.exists(os.path.join(found, checkpoint.STATE_NAME)):
        ck = checkpoint.load(found)
        config = validate_config(ck.config, os.path.join(ck.path, CONFIG_NAME))
        tokenizer = ck.state.get("tokenizer")

        def write_tokenizer(directory):
            if tokenizer is None:
                return
            tok = tokenizers.from_dict(tokenizer, os.path.join(ck.path, checkpoint.STATE_NAME))
            if not hasattr(tok, "save"):
                print("dataflow quantize: the checkpoint's byte tokenizer has no tokenizer.json; generate with "
                      "--tokenizer bytes", file=sys.stderr)
                return
            tok.save(directory)
        return config, ck.model_state, write_tokenizer
    if not os.path.exists(os.path.join(found, CONFIG_NAME)):
        raise BadArgumentError(f"MODEL_DIR: {path} holds neither {checkpoint.STATE_NAME} (a checkpoint) nor "
                               f"{CONFIG_NAME} (a Hugging Face model directory)")
    config = read_config(found)
    if config.get("quantization_config"):
        raise BadArgumentError(f"MODEL_DIR: {path} is already quantized (int{config['quantization_config']['bits']}); "
                               f"quantize its full-precision original")
    weights = check_weights(st.read_directory(found), parameter_shapes(config), config["tie_word_embeddings"], found)
    state = {name: np.array(tensor.values(), np.float32) for name, (tensor, _) in weights.items()}

    def write_tokenizer(directory):
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(found, name)):
                shutil.copyfile(os.path.join(found, name), os.path.join(directory, name))
    return config, state, write_tokenizer


def _out_dir(out, source, overwrite):
    out = os.path.abspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise BadArgumentError(f"OUT_DIR: {out} exists and is not a directory")
    if os.path.isdir(out):
        if os.path.samefile(out, source):
            raise BadArgumentError(f"OUT_DIR: {out} is MODEL_DIR; write the quantized model to another directory")
        if not overwrite:
            raise BadArgumentError(f"OUT_DIR: {out} exists; pass --overwrite to replace it")
    return out


def quantize_command(args):
    if args.bits == 8 and (args.group_size is not None or args.zero_point):
        raise BadArgumentError("--group-size, --zero-point: int8 has one scale per output channel; they are for "
                               "--bits 4")
    try:
        qc = quantization_config(args.bits, args.group_size or 128, args.zero_point, args.lm_head)
    except BadArgumentError as e:
        raise BadArgumentError(f"--group-size: {str(e).split(': ', 1)[1]}") from None
    if not os.path.exists(args.model_dir):
        raise BadArgumentError(f"MODEL_DIR: {args.model_dir} does not exist")
    out = _out_dir(args.out_dir, args.model_dir, args.overwrite)
    config, state, write_tokenizer = _source(args.model_dir)
    if args.lm_head and config["tie_word_embeddings"]:
        raise BadArgumentError("--lm-head: the model ties lm_head to the embedding (tie_word_embeddings), which "
                               "stays in full precision")
    try:
        tensors = quantize_state(state, qc)
    except BadArgumentError as e:
        raise FileFormatError(f"MODEL_DIR: {args.model_dir}: {e}") from None
    config = {**config, "quantization_config": qc, "dtype": "float32"}

    def fill(tmp):
        write_model_files(tmp, config, {n: np.ascontiguousarray(v) for n, v in tensors.items()})
        write_tokenizer(tmp)
    atomic.replace_directory(out, fill)
    before = sum(np.asarray(v).size * 4 for v in state.values())
    after = sum(np.asarray(v).nbytes for v in tensors.values())
    what = f"int{args.bits}" + (f", groups of {qc['group_size']}" if args.bits == 4 else "")
    print(f"dataflow quantize: {out}: {what}; weights {before / 2**20:.1f} MiB (fp32) -> {after / 2**20:.1f} MiB")
    return 0
