"""`dataflow import-gguf FILE OUT_DIR`: a llama.cpp .gguf file (dataflow.io.gguf) written as the
Hugging Face-style directory `dataflow quantize` writes (config.json with its quantization_config,
model.safetensors, and the tokenizer.json lying beside FILE), which from_pretrained, generate and
quantize's other users load without the `gguf` package. OUT_DIR is written whole and swapped in
atomically; an existing one only with --overwrite."""
import os
import shutil

import numpy as np

from ..io import atomic, gguf as gguf_import
from ..io import tokenizer as tokenizers
from ..errors import BadArgumentError
from ..io.pretrained import write_model_files


def import_gguf_command(args):
    if not gguf_import.is_gguf(args.file):
        raise BadArgumentError(f"FILE: {args.file} is not a GGUF file (no such file, or no GGUF magic)")
    out = os.path.abspath(args.out_dir)
    if os.path.exists(out) and not (os.path.isdir(out) and args.overwrite):
        raise BadArgumentError(f"OUT_DIR: {out} exists; pass --overwrite to replace it" if os.path.isdir(out)
                               else f"OUT_DIR: {out} exists and is not a directory")
    config, tensors = gguf_import.checked_model(args.file)
    state = gguf_import.state_dict(config, tensors, args.file)
    tokenizer = os.path.join(os.path.dirname(os.path.abspath(args.file)), tokenizers.TOKENIZER_NAME)

    def fill(tmp):
        write_model_files(tmp, {**config, "dtype": "float32"},
                          {name: np.ascontiguousarray(v) for name, v in state.items()})
        if os.path.isfile(tokenizer):
            shutil.copyfile(tokenizer, os.path.join(tmp, tokenizers.TOKENIZER_NAME))
    atomic.replace_directory(out, fill)
    qc = config.get("quantization_config")
    what = f"int{qc['bits']}" if qc else "full precision"
    print(f"dataflow import-gguf: {out}: {what}"
          + ("" if os.path.isfile(tokenizer) else f"; no {tokenizers.TOKENIZER_NAME} beside {args.file}: add one"))
    return 0
