"""A small model trained through the ring executor under device caps and all-resident, for the
executor, trace and K/V-context tests: its plan, the smallest cap it trains under, block bytes."""
import numpy as np
import pytest
import dataflow as df
from dataflow._ffi import ffi, lib, modelslib
from dataflow.errors import OutOfMemoryError
from dataflow.models.batch import PackedBatch
from dataflow.models.config import LlamaConfig
from dataflow.training import loss_backward
from dataflow.training.executor import RingExecutor
from resident_oracle import resident_adamw


CFG = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
       "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}


SEQ, ROWS, STEPS, HOST = 16, 4, 10, "64MiB"


def plan_for(cfg, cap, dtype, host=HOST, master=False):
    return df.ring.plan(cfg, seq_len=SEQ, tokens_per_step=SEQ * ROWS, device_memory=cap, host_memory=host,
                        profile="h100-sxm", dtype=dtype, master_weights=master)


def smallest_cap(cfg, dtype, master=False):
    with pytest.raises(OutOfMemoryError) as e:
        plan_for(cfg, 1024, dtype, master=master)
    return e.value.min_device_bytes


def block_bytes(handle, model, block, kind, n):
    mem = ffi.new("Dataflow_Block_Memory *")
    modelslib.dataflow_llama_block(model._m, block, mem)
    out = np.empty(n, np.uint8)
    ptr = [mem.param, mem.grad, mem.m, mem.v, mem.master][kind]
    lib.dataflow_submit_outbound_transfer(handle._ptr(), 0, ffi.from_buffer(out), ptr, n)
    handle.sync()
    return out


def as_float(raw, dtype):
    if dtype == "fp32":
        return raw.view(np.float32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def train_both(cfg, cap, dtype, master=False, steps=STEPS, trace=False, bandwidth=None, plan=None):
    """Trains the ring (handle capped at cap, its link throttled to bandwidth; plan: the planner's
    for cap unless given) and the resident model on the same chunks; returns (ring losses,
    resident losses, ring weights, resident weights, handle, executor, plan)."""
    plan = plan or plan_for(cfg, cap, dtype, master=master)
    ref_h = df.Handle("host")
    ref = df.models.Llama(ref_h, cfg, dtype=dtype, seed=1, master_weights=master)
    h = df.Handle("host", device_memory=cap, transfer_bandwidth=bandwidth)
    ex = RingExecutor(h, LlamaConfig.from_dict(cfg), plan, dtype, trace=trace)
    for b in range(ex.num_blocks):
        for kind in (0, 4) if master else (0,):  # the resident model's masters are the unrounded init
            ex.write(b, kind, block_bytes(ref_h, ref, b, kind, ex.block_bytes(b, kind)))
    params = ffi.new("Dataflow_AdamW_Params *", {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                                 "weight_decay": 0.1})
    rng, T = np.random.default_rng(0), plan.chunk_tokens
    ring_losses, ref_losses = [], []
    for step in range(1, steps + 1):
        tokens = rng.integers(0, cfg["vocab_size"], (ROWS, SEQ))
        chunks = [PackedBatch(tokens[i * T // SEQ:(i + 1) * T // SEQ], None, None, cfg["vocab_size"], True)
                  for i in range(SEQ * ROWS // T)]
        scale = 1.0 / sum(c.num_labels for c in chunks)
        ex.accumulate(chunks, False, scale)
        ex.apply(params, 1.0, step)
        ex.wait()
        ring_losses.append(sum(ref._batch_loss(t, scale) for t in ex.token_losses([c.num_tokens for c in chunks])))
        loss = sum(loss_backward(ref, tokens[i * T // SEQ:(i + 1) * T // SEQ], accumulate=i > 0, loss_scale=scale)[0]
                   for i in range(len(chunks)))
        resident_adamw(ref, params, 1.0, step)
        ref_losses.append(loss)
    ring_w = [as_float(ex.read(b, 0), dtype) for b in range(ex.num_blocks)]
    ref_w = [as_float(block_bytes(ref_h, ref, b, 0, ex.block_bytes(b, 0)), dtype) for b in range(ex.num_blocks)]
    return ring_losses, ref_losses, ring_w, ref_w, h, ex, plan


PROFILE = "h100-sxm"
KW = {"lr": 1e-2, "weight_decay": 0.1}  # the ring Trainer tests' AdamW hyperparameters


def batches(steps=6, seed=0):
    """steps batches of ROWS x SEQ random tokens of CFG's vocabulary."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, CFG["vocab_size"], (ROWS, SEQ)) for _ in range(steps)]
