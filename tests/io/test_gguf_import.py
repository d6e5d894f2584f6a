"""Importing llama.cpp GGUF files (dataflow.io.gguf): files written here as llama.cpp's
converter writes them (gguf.GGUFWriter, q/k rows permuted by LlamaModel.permute, blocks from
gguf.quants.quantize) from a random Hugging Face Llama. Q4_0 loads as int4 with the very weights
ggml dequantizes to; every import matches transformers in fp32 within its quantization's error;
malformed files, other architectures and unsupported types are errors naming the file/tensor."""
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import dataflow as df  # noqa: E402
from dataflow.cli import main as cli  # noqa: E402
from dataflow import quantize as qz  # noqa: E402
from dataflow.io import tokenizer as tokenizers  # noqa: E402
from dataflow.errors import FileFormatError  # noqa: E402
from dataflow.models import from_pretrained  # noqa: E402

Q = gguf.GGMLQuantizationType
CONFIG = dict(vocab_size=2048, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
              tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def permute(w, heads):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, as the converter applies it to q / k"""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    with torch.no_grad():  # norms away from one, so a swapped norm would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
    return model


def hf_state(model):
    return {k: v.float().numpy() for k, v in model.state_dict().items()}


def llama3_rope_freqs(c):
    """convert_hf_to_gguf.py's rope_freqs for a llama3 rope_scaling: each frequency's divisor"""
    rs, dim = c["rope_scaling"], c["hidden_size"] // c["num_attention_heads"]
    freqs = c["rope_theta"] ** (-np.arange(0, dim, 2) / dim)
    old, low, high = rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"]
    factors = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(rs["factor"])
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / rs["factor"] + smooth))
    return np.asarray(factors, np.float32)


def write_gguf(path, state, linear_type, arch="llama", other_type=Q.F32, tied=False, truncate=0, config=CONFIG,
               rope_freqs=None):
    """A GGUF of an HF Llama state as convert_hf_to_gguf.py writes it; linear_type for the layers'
    Linear weights, other_type for the embedding and output."""
    c = config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])

    def add(name, value, qtype):
        if qtype == Q.F32:
            w.add_tensor(name, value.astype(np.float32))
        elif qtype == Q.F16:
            w.add_tensor(name, value.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(value, qtype), raw_dtype=qtype)
    if c.get("rope_scaling"):
        w.add_tensor("rope_freqs.weight", llama3_rope_freqs(c) if rope_freqs is None else rope_freqs)
    add("token_embd.weight", state["model.embed_tokens.weight"], other_type)
    add("output_norm.weight", state["model.norm.weight"], Q.F32)
    if not tied:
        add("output.weight", state["lm_head.weight"], other_type)
    for i in range(c["num_hidden_layers"]):
        for hf, ours in LAYER.items():
            v = state[f"model.layers.{i}.{hf}.weight"]
            if ours == "attn_q":
                v = permute(v, c["num_attention_heads"])
            elif ours == "attn_k":
                v = permute(v, c["num_key_value_heads"])
            add(f"blk.{i}.{ours}.weight", v, Q.F32 if v.ndim == 1 else linear_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if truncate:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - truncate)
    return path


def ggml_roundtrip(v, qtype):
    """what ggml computes with: the weight quantized to qtype and dequantized (row-local, so the
    converter's row permutation commutes with it)"""
    return gguf.quants.dequantize(gguf.quants.quantize(v, qtype), qtype).astype(np.float32)


def hf_logits(model, state, tokens):
    model = type(model)(model.config).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    with torch.no_grad():
        return model(torch.tensor(tokens)[None]).logits[0].numpy()


def relative_error(got, want):
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    print(f"logits relative error {err:.2e}")
    return err


TOKENS = np.random.default_rng(1).integers(0, CONFIG["vocab_size"], 11)


def test_q4_0_loads_as_int4_with_ggml_weights(h, hf_model, tmp_path):
    state = hf_state(hf_model)
    path = write_gguf(tmp_path / "m-q4_0.gguf", state, Q.Q4_0)
    model = from_pretrained(path, handle=h)
    assert model.config.quantization == qz.quantization_config(4, 32, False)
    ours = model.state_dict()
    ggml = dict(state)
    for name, v in state.items():
        if qz.is_quantized_linear(name, model.config.quantization):
            ggml[name] = ggml_roundtrip(v, Q.Q4_0)
            prefix = name[:-len(".weight")]
            np.testing.assert_array_equal(  # bit-exact: the same weights ggml multiplies with
                qz.dequantize_int4(ours[name], ours[prefix + ".scales"], v.shape[1], 32), ggml[name], err_msg=name)
    # the model equals transformers holding ggml's weights (only summation order differs) ...
    np.testing.assert_allclose(model.forward(TOKENS)[0], hf_logits(hf_model, ggml, TOKENS), rtol=1e-4, atol=1e-4)
    # ... and the fp32 original within int4's error (weights off by ~8% of their spread)
    assert relative_error(model.forward(TOKENS)[0], hf_logits(hf_model, state, TOKENS)) < 0.15
    ref = df.models.Llama(h, CONFIG | {"model_type": "llama"})
    ref.load_state_dict(ggml)
    np.testing.assert_array_equal(model.generate(TOKENS[:4], 8, temperature=0), ref.generate(TOKENS[:4], 8,
                                                                                              temperature=0))


@pytest.mark.parametrize("qtype,bits", [(Q.Q8_0, 8), (Q.F16, None), (Q.BF16, None), (Q.F32, None)],
                         ids=["q8_0", "f16", "bf16", "f32"])
def test_q8_0_and_float_files_match_transformers(h, hf_model, tmp_path, qtype, bits):
    state = hf_state(hf_model)
    path = write_gguf(tmp_path / "m.gguf", state, qtype, other_type=Q.Q8_0 if bits else qtype)
    model = from_pretrained(path, handle=h)
    assert (model.config.quantization or {}).get("bits") == bits
    ours = model.state_dict()
    for name, v in state.items():
        if name.endswith("proj.weight"):
            w = ours[name] if bits is None else qz.dequantize_int8(ours[name], ours[name[:-7] + ".scales"])
            if qtype == Q.Q8_0:
                # int8 per channel requantizes Q8_0's per-32 blocks: at most half a channel step more
                step = np.abs(v).max(axis=1, keepdims=True) / 127
                assert (np.abs(w - ggml_roundtrip(v, Q.Q8_0)) <= 0.5 * step + 1e-6).all(), name
            else:
                np.testing.assert_array_equal(w, v if qtype == Q.F32 else ggml_roundtrip(v, qtype))
    tol = {Q.Q8_0: 0.02, Q.F16: 1e-3, Q.BF16: 1e-2, Q.F32: 1e-5}[qtype]
    assert relative_error(model.forward(TOKENS)[0], hf_logits(hf_model, state, TOKENS)) < tol


def test_a_file_without_output_ties_the_embedding(h, hf_model, tmp_path):
    state = hf_state(hf_model)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model = from_pretrained(write_gguf(tmp_path / "tied.gguf", state, Q.F32, tied=True), handle=h)
    assert model.config.tie_word_embeddings
    np.testing.assert_allclose(model.forward(TOKENS)[0], hf_logits(hf_model, state, TOKENS), rtol=1e-4, atol=1e-4)


def test_generate_cli_takes_a_gguf_with_its_tokenizer_beside_it(h, hf_model, tmp_path, capsys):
    path = write_gguf(tmp_path / "m.gguf", hf_state(hf_model), Q.Q4_0)
    argv = ["generate", "--checkpoint", str(path), "--prompt", "The", "--max-new-tokens", "6", "--temperature", "0"]
    assert cli.main(argv) != 0  # no tokenizer: the error says where one goes
    err = capsys.readouterr().err
    assert "--tokenizer: " in err and str(tmp_path / "tokenizer.json") in err
    tokenizers.default().save(str(tmp_path))
    assert cli.main(argv) == 0
    tok = tokenizers.load(str(tmp_path), bos_id=CONFIG["bos_token_id"], eos_id=CONFIG["eos_token_id"])
    new = list(from_pretrained(path, handle=h).generate(tok.encode("The", bos=True), 6, temperature=0))
    new = new[:new.index(tok.eos_id)] if tok.eos_id in new else new  # generate stops at eos
    assert capsys.readouterr().out == "The" + tok.decode(new) + "\n"


@pytest.mark.parametrize("case,message", [
    ("truncated", r"m\.gguf: not a readable GGUF file"),
    ("not gguf", r"m\.gguf: not a readable GGUF file .*magic"),
    ("arch", "general.architecture 'gpt2' is not supported"),
    ("q4_1", "tensor model.layers.0.self_attn.q_proj.weight has type Q4_1, which is not supported"),
    ("mixed", "mix types Q4_0, Q8_0"),
])
def test_bad_files_are_named_errors(h, hf_model, tmp_path, case, message):
    state = hf_state(hf_model)
    path = tmp_path / "m.gguf"
    if case == "not gguf":
        path.write_bytes(b"PK\x03\x04" + bytes(100))
    elif case == "mixed":
        write_gguf(path, state, Q.Q4_0)
        mixed = tmp_path / "mixed.gguf"  # one layer's down_proj Q8_0
        r = gguf.GGUFReader(str(path))
        w = gguf.GGUFWriter(str(mixed), "llama")
        for f in r.fields.values():
            if not f.name.startswith("GGUF.") and f.name != "general.architecture":
                w.add_key_value(f.name, f.contents(), f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
        for t in r.tensors:
            if t.name == "blk.1.ffn_down.weight":
                w.add_tensor(t.name, gguf.quants.quantize(state["model.layers.1.mlp.down_proj.weight"], Q.Q8_0),
                             raw_dtype=Q.Q8_0)
            else:
                w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        path = mixed
    else:
        write_gguf(path, state, Q.Q4_1 if case == "q4_1" else Q.F32, arch="gpt2" if case == "arch" else "llama",
                   truncate=1000 if case == "truncated" else 0)
    before = h.memory_in_use()
    with pytest.raises(FileFormatError, match=message):
        from_pretrained(path, handle=h)
    assert h.memory_in_use() == before


def test_mutated_files_load_or_raise_named_errors(h, hf_model, tmp_path):
    """bytes of the header, metadata and tensor table changed at random: a model or a DataflowError
    naming the file, never another exception, and nothing left allocated"""
    path = write_gguf(tmp_path / "m.gguf", hf_state(hf_model), Q.Q4_0)
    good = path.read_bytes()
    header = good.index(b"blk.1.ffn_norm.weight") + 40  # through the tensor table
    rng = np.random.default_rng(0)
    bad = tmp_path / "bad.gguf"
    before = h.memory_in_use()
    outcomes = set()
    for _ in range(60):
        data = bytearray(good)
        for at in rng.integers(0, header, rng.integers(1, 4)):
            data[at] = rng.integers(0, 256)
        bad.write_bytes(bytes(data))
        try:
            from_pretrained(bad, handle=h).close()
            outcomes.add("loaded")
        except df.DataflowError as e:
            assert str(bad) in str(e), e
            outcomes.add(type(e).__name__)
        assert h.memory_in_use() == before
    assert "FileFormatError" in outcomes


def test_a_q4_0_file_runs_as_a_bf16_model(h, hf_model, tmp_path):
    state = hf_state(hf_model)
    path = write_gguf(tmp_path / "m.gguf", state, Q.Q4_0)
    fp32, bf16 = from_pretrained(path, handle=h), from_pretrained(path, handle=h, dtype="bf16")
    assert bf16.dtype == "bf16" and bf16.config.quantization["bits"] == 4
    assert relative_error(bf16.forward(TOKENS)[0], fp32.forward(TOKENS)[0]) < 0.02


def test_llama3_rope_scaling_comes_back_from_rope_freqs(h, tmp_path):
    """Llama 3.1 files carry their rope scaling as llama.cpp's rope_freqs divisors"""
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
            "original_max_position_embeddings": 2048}  # two of the 8 frequencies in between
    config = CONFIG | {"rope_scaling": rope}
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    state = hf_state(model)
    ours = from_pretrained(write_gguf(tmp_path / "m.gguf", state, Q.F32, config=config), handle=h)
    got = ours.config.rope_scaling
    assert got["factor"] == 8.0 and got["original_max_position_embeddings"] == 2048
    np.testing.assert_allclose([got["low_freq_factor"], got["high_freq_factor"]], [1.0, 8.0], rtol=1e-5)
    tokens = np.random.default_rng(2).integers(0, CONFIG["vocab_size"], 120)  # long enough for the scaling
    logits = ours.forward(tokens)[0]
    matched = relative_error(logits, hf_logits(model, state, tokens))
    unscaled = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    assert matched < 1e-5 and relative_error(logits, hf_logits(unscaled, state, tokens)) > 20 * matched
    scrambled = llama3_rope_freqs(config)[::-1].copy()
    with pytest.raises(FileFormatError, match="rope_freqs.weight does not follow Llama 3's rope scaling"):
        from_pretrained(write_gguf(tmp_path / "bad.gguf", state, Q.F32, config=config, rope_freqs=scrambled), handle=h)


def test_import_gguf_writes_a_directory_that_loads_as_the_file(h, hf_model, tmp_path, capsys):
    path = write_gguf(tmp_path / "m.gguf", hf_state(hf_model), Q.Q4_0)
    tokenizers.default().save(str(tmp_path))
    out = tmp_path / "imported"
    assert cli.main(["import-gguf", str(path), str(out)]) == 0
    assert "int4" in capsys.readouterr().out and (out / "tokenizer.json").exists()
    direct, imported = from_pretrained(path, handle=h), from_pretrained(out, handle=h)
    assert imported.config.quantization == qz.quantization_config(4, 32, False)
    np.testing.assert_array_equal(imported.forward(TOKENS), direct.forward(TOKENS))
    assert cli.main(["import-gguf", str(path), str(out)]) == 2  # exists: --overwrite replaces it
    assert "OUT_DIR: " in capsys.readouterr().err
    assert cli.main(["import-gguf", str(tmp_path / "tokenizer.json"), str(tmp_path / "x")]) == 2
    assert "FILE: " in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert cli.main(["import-gguf", str(path), str(out), "--overwrite"]) == 0
