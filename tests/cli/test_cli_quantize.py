"""`dataflow quantize MODEL_DIR OUT_DIR --bits 8|4 [--group-size N] [--zero-point] [--overwrite]`: from
a Hugging Face directory or a `dataflow train` checkpoint to a directory that from_pretrained and
`dataflow generate` load, holding exactly dataflow.quantize's tensors; bad arguments name the flag
and write nothing."""
import json

import numpy as np
import pytest

import dataflow as df
from dataflow.io import checkpoint
from dataflow import quantize as qz
from dataflow.io import safetensors as st
from dataflow.io import tokenizer as tokenizers
from dataflow.models import Llama, from_pretrained
from cli_helpers import run_cli

CONFIG = dict(model_type="llama", vocab_size=2048, hidden_size=64, intermediate_size=150, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(HF directory, checkpoint directory, state) of one small model with the default tokenizer"""
    root = tmp_path_factory.mktemp("quantize")
    with df.Handle("host") as h:
        model = Llama(h, CONFIG, seed=5)
        hf = root / "hf"
        model.save_pretrained(hf)
        tok = tokenizers.default()
        tok.save(hf)
        state = model.state_dict()
        ck = root / "ck"
        checkpoint.save(ck, state, model.config.to_dict(), state={"tokenizer": tok.to_dict()})
        model.close()
    return hf, ck, state


@pytest.mark.slow  # a model written, quantized, loaded twice and generated from: ~1.5 s each
@pytest.mark.parametrize("kind", ["hf", "checkpoint"])
@pytest.mark.parametrize("flags", [["--bits", "8"], ["--bits", "4", "--group-size", "32", "--zero-point"],
                                   ["--bits", "4"]], ids=["int8", "int4-g32-zero", "int4-g128"])
def test_quantized_directory_loads_and_holds_the_quantizer_tensors(source, tmp_path, capsys, kind, flags):
    hf, ck, state = source
    out = tmp_path / "q"
    assert run_cli("quantize", hf if kind == "hf" else ck, out, *flags) == 0
    assert "dataflow quantize:" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    bits = int(flags[1])
    qc = qz.quantization_config(bits, int(flags[3]) if len(flags) > 2 else 128, "--zero-point" in flags)
    assert config["quantization_config"] == qc
    assert (out / "tokenizer.json").exists()
    stored = st.SafetensorsFile(out / "model.safetensors").tensors()
    want = qz.quantize_state(state, qc)
    assert set(stored) == set(want)
    for name, value in want.items():
        np.testing.assert_array_equal(stored[name].values(), value, err_msg=name)
    assert stored["model.layers.0.mlp.up_proj.weight"].dtype == ("int8" if bits == 8 else "uint8")
    with df.Handle("host") as h:
        model = from_pretrained(out, h)
        assert model.config.quantization == qc
        ref = Llama(h, config)
        ref.load_state_dict(want)
        tokens = np.arange(1, 12)
        np.testing.assert_array_equal(model.forward(tokens), ref.forward(tokens))
        model.close()
        ref.close()
    assert run_cli("generate", "--checkpoint", out, "--temperature", "0", "--max-new-tokens", "4",
                   "--prompt", "def") == 0
    assert capsys.readouterr().out.startswith("def")


def test_overwrite_replaces_and_nothing_is_replaced_without_it(source, tmp_path, capsys):
    hf, _, _ = source
    out = tmp_path / "q"
    assert run_cli("quantize", hf, out, "--bits", "8") == 0
    before = (out / "config.json").read_text()
    assert run_cli("quantize", hf, out, "--bits", "4") == 2
    err = capsys.readouterr().err
    assert "OUT_DIR:" in err and "pass --overwrite" in err
    assert (out / "config.json").read_text() == before
    assert run_cli("quantize", hf, out, "--bits", "4", "--overwrite") == 0
    assert json.loads((out / "config.json").read_text())["quantization_config"]["bits"] == 4


@pytest.mark.parametrize("args,message", [
    (["--bits", "4", "--group-size", "48"], "--group-size: quantization_config.group_size must be one of"),
    (["--bits", "8", "--group-size", "64"], "--group-size, --zero-point: int8"),
    (["--bits", "8", "--zero-point"], "--group-size, --zero-point: int8"),
    (["--bits", "5"], "argument --bits: invalid choice"),
    (["--bits", "8", "--lm-head"], "--lm-head: the model ties lm_head to the embedding"),
    ([], "the following arguments are required: --bits"),
])
def test_bad_flags_name_the_flag_and_write_nothing(source, tmp_path, capsys, args, message):
    hf, _, _ = source
    out = tmp_path / "q"
    assert run_cli("quantize", hf, out, *args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_bad_directories_are_named(source, tmp_path, capsys):
    hf, _, _ = source
    assert run_cli("quantize", tmp_path / "missing", tmp_path / "q", "--bits", "8") == 2
    assert "MODEL_DIR:" in capsys.readouterr().err
    assert run_cli("quantize", hf, hf, "--bits", "8", "--overwrite") == 2
    assert "OUT_DIR:" in capsys.readouterr().err and (hf / "model.safetensors").exists()
    q = tmp_path / "q"
    assert run_cli("quantize", hf, q, "--bits", "8") == 0
    capsys.readouterr()
    assert run_cli("quantize", q, tmp_path / "qq", "--bits", "4") == 2
    assert "already quantized" in capsys.readouterr().err


def test_a_quantized_directory_with_float_codes_is_refused(source, tmp_path):
    hf, _, state = source
    q = tmp_path / "q"
    assert run_cli("quantize", hf, q, "--bits", "8") == 0
    tensors = {n: np.array(t.values()) for n, t in st.SafetensorsFile(q / "model.safetensors").tensors().items()}
    tensors["model.layers.1.self_attn.q_proj.weight"] = tensors["model.layers.1.self_attn.q_proj.weight"].astype(
        np.float32)
    st.write(q / "model.safetensors", tensors)
    with df.Handle("host") as h, pytest.raises(df.errors.FileFormatError, match="q_proj.weight.*stores it as int8"):
        from_pretrained(q, h)
