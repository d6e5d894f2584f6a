"""Sampling the next tokens of a batch of requests in C (dataflow_sample_batch, sampling.h):
penalties (repetition, presence, frequency), temperature, top-k, top-p, min-p and a seeded
draw per request; the chosen tokens' logprobs."""
import dataclasses
import math
import numbers

import numpy as np

from .._ffi import ffi, modelslib
from ..errors import BadArgumentError, check


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """One request's sampling (sampling.h has the algorithm): temperature 0 is greedy."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self):
        for name in ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                     "frequency_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise BadArgumentError(f"SamplingParams: {name} must be a finite number, got {value!r:.40}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, numbers.Integral) or self.top_k < 0:
            raise BadArgumentError(f"SamplingParams: top_k must be an integer >= 0, got {self.top_k!r:.40}")
        checks = (("temperature", self.temperature >= 0, ">= 0"), ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
                  ("min_p", 0 <= self.min_p <= 1, "in [0, 1]"),
                  ("repetition_penalty", self.repetition_penalty > 0, "> 0"))
        for name, ok, want in checks:
            if not ok:
                raise BadArgumentError(f"SamplingParams: {name} must be {want}, got {getattr(self, name)!r:.40}")


def sample_batch(logits, params, histories, prompt_lens, states):
    """(tokens int32 [rows], logprobs float32 [rows]) for logits [rows, vocab] (float32 numpy),
    one SamplingParams, history (int token ids) and prompt length per row; states: uint64
    numpy [rows], each row's draw state (start: its seed), advanced in place."""
    logits = np.ascontiguousarray(logits, np.float32)
    if logits.ndim != 2:
        raise BadArgumentError(f"sample_batch: logits must be [rows, vocab], got shape {logits.shape}")
    rows, vocab = logits.shape
    if not (len(params) == len(histories) == len(prompt_lens) == rows) or states.shape != (rows,) \
            or states.dtype != np.uint64:
        raise BadArgumentError(f"sample_batch: need {rows} params, histories, prompt_lens and uint64 states, got "
                               f"{len(params)}, {len(histories)}, {len(prompt_lens)}, {states.dtype}{states.shape}")
    c_params = ffi.new("Dataflow_Sampling_Params[]", rows)
    for r, p in enumerate(params):
        c_params[r] = dict(temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p,
                           repetition_penalty=p.repetition_penalty, presence_penalty=p.presence_penalty,
                           frequency_penalty=p.frequency_penalty)
    hist = [np.ascontiguousarray(h, np.int32) for h in histories]
    hist_ptrs = ffi.new("const int32_t *[]", [ffi.from_buffer("int32_t[]", h) if h.size else ffi.NULL for h in hist])
    lens = np.asarray([h.size for h in hist], np.int64)
    plens = np.asarray(prompt_lens, np.int64)
    tokens, logprobs = np.empty(rows, np.int32), np.empty(rows, np.float32)
    check(modelslib.dataflow_sample_batch(rows, vocab, ffi.from_buffer("float[]", logits), c_params, hist_ptrs,
                                          ffi.from_buffer("int64_t[]", lens), ffi.from_buffer("int64_t[]", plens),
                                          ffi.from_buffer("uint64_t[]", states), ffi.from_buffer("int32_t[]", tokens),
                                          ffi.from_buffer("float[]", logprobs)))
    return tokens, logprobs
