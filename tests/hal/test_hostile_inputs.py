"""Hostile inputs end in an error naming what to fix, never a hang, a runaway allocation or a
stray Python exception: files named on the command line go through the one safe reader
(dataflow.io.file_checks: regular files only, size- and nesting-capped JSON), every model config
(config.json, Llama(h, dict), ring.plan(dict), a LlamaConfig) through the one validator with the
layer bound checked before anything is sized from it, sizes through the one exact parser. The
hang and allocation cases run in a subprocess under a timeout and a memory limit
(tests/helpers/isolated.py)."""
import json
import os

import pytest

import dataflow as df
from dataflow.handle import parse_bytes
from isolated import assert_clean_error, run_isolated

PLAN = ["plan", "--seq-len", "16", "--device-memory", "1GiB", "--host-memory", "1GiB"]
CFG = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
HUGE_LAYERS = {**CFG, "model_type": "llama", "num_hidden_layers": 2**31}


def plan_cli(config, timeout=60):
    code = "import sys\nfrom dataflow.cli import main as cli\nsys.exit(cli.main(sys.argv[1:]))"
    return run_isolated(code, timeout, args=PLAN + ["--config", str(config)])


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "nested", "huge_layers", "large"])
def test_plan_config_from_a_hostile_file_is_a_clear_error(tmp_path, kind):
    path = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(path)  # a plain open() blocks here forever
    elif kind == "dev_zero":
        path = "/dev/zero"  # a plain read() never ends
    elif kind == "nested":
        path.write_text("[" * 200000 + "]" * 200000)
    elif kind == "huge_layers":
        path.write_text(json.dumps(HUGE_LAYERS))
    else:
        path.write_bytes(b" " * (65 * 2**20))
    rc, out = plan_cli(path)
    assert rc == 2, out
    assert "--config" in out and "Traceback" not in out, out
    expected = {"fifo": "a FIFO", "dev_zero": "a device", "nested": "nested too deeply",
                "huge_layers": "num_hidden_layers must be at most 1024", "large": "larger than"}[kind]
    assert expected in out, out


@pytest.mark.parametrize("make", ["llama dict", "llama LlamaConfig", "ring.plan dict", "ring.plan LlamaConfig"])
def test_a_config_with_2_to_the_31_layers_is_refused_before_anything_is_sized(make):
    build = {"llama dict": "df.models.Llama(df.Handle('host', device_memory='16MiB'), cfg)",
             "llama LlamaConfig": "df.models.Llama(df.Handle('host', device_memory='16MiB'), "
                                  "df.models.LlamaConfig.from_dict(cfg))",
             "ring.plan dict": "df.ring.plan(cfg, 16, 2**30, 2**30)",
             "ring.plan LlamaConfig": "df.ring.plan(df.models.LlamaConfig.from_dict(cfg), 16, 2**30, 2**30)"}[make]
    assert_clean_error(f"import dataflow as df\ncfg = {HUGE_LAYERS!r}\n{build}\n", "BadArgumentError",
                       "num_hidden_layers must be at most 1024", timeout=60)


@pytest.mark.parametrize("cfg, message", [
    ({**CFG, "num_attention_heads": 3, "num_key_value_heads": 1}, "not divisible by num_attention_heads"),
    ({**CFG, "rms_norm_eps": float("nan")}, "rms_norm_eps must be a positive finite number"),
    ({**CFG, "vocab_size": "64"}, "vocab_size must be a positive integer"),
    ({**CFG, "tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    ({**CFG, "hidden_act": "gelu"}, "hidden_act"),
])
def test_dict_configs_get_the_config_json_validation(cfg, message):
    with pytest.raises(df.BadArgumentError, match=message):
        df.models.Llama(df.Handle("host", device_memory="16MiB"), cfg)
    with pytest.raises(df.BadArgumentError, match=message):
        df.ring.plan(cfg, 16, 2**30, 2**30)


def test_the_c_config_check_bounds_the_layers():
    cfg = df.models.LlamaConfig.from_dict(CFG)
    cfg.num_hidden_layers = 2**31  # past the Python validator: C refuses it on its own
    from dataflow._ffi import ffi, modelslib
    out = ffi.new("Dataflow_Blocked_Model **")
    h = df.Handle("host", device_memory="16MiB")
    status = modelslib.dataflow_llama_blocked_model_create(h._ptr(), cfg._c_config("fp32"), out)
    assert status != 0
    assert "num_layers must be at most 1024" in ffi.string(df.errors.lib.dataflow_last_error()).decode()


@pytest.mark.parametrize("value", ["9" * 400 + "GiB", "1" * 5000, "1e400", "inf", "nan", "-1", "0.5"])
def test_size_strings_beyond_range_are_bad_arguments(value):
    with pytest.raises(df.BadArgumentError, match="size"):
        parse_bytes(value)


def test_size_parser_is_exact():
    assert parse_bytes("1.5GB") == 1500000000 and parse_bytes("0.1KiB") == 102
    assert parse_bytes("18446744073709551615") == 2**64 - 1


@pytest.mark.parametrize("field", ["vocab_size", "intermediate_size", "num_attention_heads"])
def test_dimensions_whose_matrices_overflow_sizes_are_refused(field):
    """Each size may be 2^31, but a weight matrix of 2^31 x 2^31 elements overflowed the byte
    counts (the weights were reported as 42,949,672,960 bytes; the planner saw a negative block)."""
    cfg = {**CFG, "hidden_size": 2**31, field: 2**31 if field != "num_attention_heads" else 2**23,
           "num_key_value_heads": 1, "head_dim": 256}
    with pytest.raises(df.BadArgumentError, match="more than a weight matrix may hold"):
        df.models.Llama(df.Handle("host", device_memory="16MiB"), cfg)
    with pytest.raises(df.BadArgumentError, match="more than a weight matrix may hold"):
        df.ring.plan(cfg, 16, 2**30, 2**30)
