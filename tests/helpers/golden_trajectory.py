"""The golden training trajectory: 20 AdamW steps of the reference Llama (bench/train.py's
config, 4 x 512 tokens a step), fp32 and bf16, recorded as the bits of every step's loss and
grad norm and a SHA-256 of the final weights.

It was recorded once, before the architecture change (issue 8), and test_golden_trajectory.py
checks that the code still produces it bit for bit. The matmul runs on the built-in fallback
(DATAFLOW_HOST_MATMUL=fallback) with 2 threads: its result, like every host kernel's, is the
same on every x86 ISA path and thread count, while oneDNN's depends on the CPU it runs on.

    python tests/helpers/golden_trajectory.py DTYPE          # prints the trajectory as JSON
"""
import hashlib
import json
import os
import sys

import numpy as np

REFERENCE = dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                 num_attention_heads=8, num_key_value_heads=4, rms_norm_eps=1e-5, rope_theta=500000.0,
                 max_position_embeddings=2048, tie_word_embeddings=False)
BATCH, SEQ, STEPS = 4, 512, 20
ENV = {"DATAFLOW_HOST_MATMUL": "fallback"}


def f32_bits(x):
    return int(np.float32(x).view(np.uint32))


def trajectory(dtype):
    """{"loss_bits": [...], "grad_norm_bits": [...], "weights_sha256": hex}; needs ENV set."""
    import dataflow as df
    rng = np.random.default_rng(1234)
    with df.Handle("host", streams=2, threads=2) as h:
        model = df.models.Llama(h, df.models.LlamaConfig.from_dict(REFERENCE), dtype=dtype, seed=0)
        trainer = df.Trainer(model, lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0)
        losses, norms = [], []
        for _ in range(STEPS):
            tokens = rng.integers(0, REFERENCE["vocab_size"], size=(BATCH, SEQ))
            losses.append(f32_bits(trainer.step(tokens)))
            norms.append(f32_bits(trainer.last_grad_norm))
        digest = hashlib.sha256()
        for name, value in model.state_dict().items():
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        model.close()
    return {"loss_bits": losses, "grad_norm_bits": norms, "weights_sha256": digest.hexdigest()}


if __name__ == "__main__":
    for key, value in ENV.items():
        if os.environ.get(key) != value:
            sys.exit(f"golden_trajectory.py: run with {key}={value}")
    print(json.dumps(trajectory(sys.argv[1])))
