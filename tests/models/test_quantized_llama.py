"""A Llama/Qwen with weight-only int8/int4 linear weights: its logits and greedy generation must
equal those of the full-precision model holding the dequantized weights (the oracle: the same
decoder with w = (code - zero) * scale written out in fp32), in fp32 and bf16; the tensors round
trip; training is refused; bad quantization configs name the field."""
import numpy as np
import pytest

import dataflow as df
from dataflow import quantize as qz
from dataflow.errors import BadArgumentError
from dataflow.models import Llama
from dataflow.training import loss_backward

LLAMA = dict(model_type="llama", vocab_size=97, hidden_size=64, intermediate_size=150, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
QWEN2 = dict(LLAMA, model_type="qwen2", hidden_size=96, num_attention_heads=3, num_key_value_heads=1)
QCONFIGS = [qz.quantization_config(8), qz.quantization_config(4, 32, True), qz.quantization_config(4, 64, False),
            qz.quantization_config(8, lm_head=True), qz.quantization_config(4, 32, lm_head=True)]


def dequantized(state, qstate, qc):
    """the full-precision state dict with each quantized weight replaced by its dequantization"""
    out = dict(state)
    for name, w in state.items():
        if not qz.is_quantized_linear(name, qc):
            continue
        prefix = name[:-len(".weight")]
        if qc["bits"] == 8:
            out[name] = qz.dequantize_int8(qstate[name], qstate[prefix + ".scales"])
        else:
            out[name] = qz.dequantize_int4(qstate[name], qstate[prefix + ".scales"], w.shape[1], qc["group_size"],
                                           qstate.get(prefix + ".zeros"))
    return out


def _cases():
    """every (family, quantization, dtype); the Llama fp32 ones run in the fast subset (~1 s each)"""
    for family, cfg in (("llama", LLAMA), ("qwen2", QWEN2)):
        for qc in QCONFIGS:
            for dtype in ("fp32", "bf16"):
                marks = () if (family, dtype) == ("llama", "fp32") else (pytest.mark.slow,)
                name = (f"{family}-int{qc['bits']}-g{qc.get('group_size')}-z{qc.get('zero_point')}"
                        f"{'-lm_head' if qc['lm_head'] else ''}-{dtype}")
                yield pytest.param(cfg, qc, dtype, marks=marks, id=name)


@pytest.mark.parametrize("cfg,qc,dtype", _cases())
def test_quantized_model_equals_the_dequantized_one(h, cfg, qc, dtype):
    state = Llama(h, cfg, seed=3).state_dict()
    qstate = qz.quantize_state(state, qc)
    qm = Llama(h, {**cfg, "quantization_config": qc}, dtype=dtype)
    qm.load_state_dict(qstate)
    ref = Llama(h, cfg, dtype=dtype)
    ref.load_state_dict(dequantized(state, qstate, qc))
    tokens = np.random.default_rng(0).integers(0, cfg["vocab_size"], 13)
    got, want = qm.forward(tokens), ref.forward(tokens)
    # fp32: only the summation order differs; bf16: also where the products are rounded
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "fp32" else dict(rtol=0.05, atol=0.02)
    np.testing.assert_allclose(got, want, **tol)
    if dtype == "fp32":
        np.testing.assert_array_equal(qm.generate(tokens[:5], 8, temperature=0),
                                      ref.generate(tokens[:5], 8, temperature=0))
    back = qm.state_dict()  # the quantized tables exactly (codes, zeros as stored; fp32 scales)
    tables = [n for n in qstate if n.endswith((".scales", ".zeros")) or qz.is_quantized_linear(n, qc)]
    assert len(tables) >= 14 * cfg["num_hidden_layers"]
    for name in tables:
        assert back[name].dtype == np.asarray(qstate[name]).dtype, name
        np.testing.assert_array_equal(back[name], qstate[name], err_msg=name)


def test_quantized_layers_take_less_memory(h):
    full = Llama(h, LLAMA).layout.total((0,))
    int8 = Llama(h, {**LLAMA, "quantization_config": QCONFIGS[0]}).layout.total((0,))
    int4 = Llama(h, {**LLAMA, "quantization_config": QCONFIGS[2]}).layout.total((0,))
    assert int4 < int8 < full


def test_training_a_quantized_model_is_refused(h):
    qm = Llama(h, {**LLAMA, "quantization_config": QCONFIGS[0]})
    with pytest.raises(BadArgumentError, match="quantized .*inference only"):
        df.Trainer(qm)
    with pytest.raises(df.DataflowError, match="loss_backward: the model's linear weights are quantized"):
        loss_backward(qm, np.arange(8))
    with pytest.raises(BadArgumentError, match="placement must be 'device'"):
        Llama(h, {**LLAMA, "quantization_config": QCONFIGS[0]}, placement="host")


@pytest.mark.parametrize("qc,message", [
    ({"quant_method": "gptq", "bits": 4}, "quant_method"),
    ({"quant_method": "dataflow", "bits": 3}, "bits must be 8 or 4"),
    ({"quant_method": "dataflow", "bits": 4, "group_size": 16}, "group_size must be one of"),
    ({"quant_method": "dataflow", "bits": 4, "group_size": 32, "zero_point": "yes"}, "zero_point must be"),
    ({"quant_method": "dataflow", "bits": 8, "group_size": 32}, "for bits 4"),
    ({"quant_method": "dataflow", "bits": 8, "lm_head": 1}, "lm_head must be true or false"),
    ("int8", "must be an object"),
])
def test_bad_quantization_config_names_the_field(h, qc, message):
    with pytest.raises(BadArgumentError, match=message):
        Llama(h, {**LLAMA, "quantization_config": qc})


def test_a_tied_lm_head_is_not_quantized(h):
    with pytest.raises(BadArgumentError, match="quant_lm_head needs quant_bits and an untied lm_head"):
        Llama(h, {**LLAMA, "tie_word_embeddings": True, "quantization_config": QCONFIGS[3]})


def test_load_state_dict_wants_integer_codes(h):
    qm = Llama(h, {**LLAMA, "quantization_config": QCONFIGS[0]})
    state = qm.state_dict()
    state["model.layers.0.mlp.up_proj.weight"] = state["model.layers.0.mlp.up_proj.weight"].astype(np.float32)
    with pytest.raises(BadArgumentError, match="up_proj.weight: expected integer codes"):
        qm.load_state_dict(state)
