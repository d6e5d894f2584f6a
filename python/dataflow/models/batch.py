"""Batches: token arrays (with Hugging Face-style labels) packed into ONE int32 buffer in the C
layout (dataflow_batch_from_buffer: tokens, positions, aligned labels, cu_seqlens), which goes
to the device in one inbound transfer on the caller's stream.

Labels follow Hugging Face's `labels` argument: same length as the tokens, NOT shifted (the
logits at t are scored against labels[t + 1] of the same document), -100 = ignored; default:
the tokens themselves. A [B, T] array is B documents of T tokens; documents are packed into one
chunk with variable-length causal attention and positions restarting at 0.
"""
import numbers

import numpy as np

from .._ffi import ffi, modelslib
from ..errors import BadArgumentError, c_size, check

IGNORE_INDEX = -100


def flatten_documents(tokens, labels, documents):
    """(flat tokens, flat labels or None, document lengths, [B, T] shape or None)."""
    if documents is not None and not isinstance(documents, (list, tuple, np.ndarray)):
        raise BadArgumentError(f"documents: expected document lengths or a list of 1-D token arrays, got "
                               f"{type(documents).__name__}")
    if labels is not None and isinstance(labels, (list, tuple)) and not len(labels):
        raise BadArgumentError("labels: expected labels like the tokens, got an empty list")
    if documents is not None and len(documents) and not np.isscalar(documents[0]):
        if tokens is not None:
            raise BadArgumentError("documents as arrays replace tokens: pass tokens=None")
        tokens, documents = list(documents), None
    if isinstance(tokens, (list, tuple)) and len(tokens) and not np.isscalar(tokens[0]):
        docs = [np.asarray(d) for d in tokens]
        if any(d.ndim != 1 or d.size == 0 for d in docs):
            raise BadArgumentError("documents must be non-empty 1-D token arrays")
        if labels is not None and isinstance(labels, (list, tuple)) and not np.isscalar(labels[0]):
            labels = np.concatenate([np.asarray(x) for x in labels])
        return np.concatenate(docs), labels, [d.size for d in docs], None
    arr = np.asarray(tokens)
    if arr.ndim not in (1, 2) or arr.size == 0:
        raise BadArgumentError(f"tokens: expected a non-empty [T] or [B, T] array, got shape {arr.shape}")
    shape = arr.shape if arr.ndim == 2 else (1, arr.shape[0])
    flat = arr.reshape(-1)
    if documents is None:
        return flat, labels, [shape[1]] * shape[0], shape
    if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) for x in documents):
        raise BadArgumentError(f"documents: lengths must be integers, got {list(documents)[:8]!r:.80}")
    lengths = [int(x) for x in documents]
    if any(x <= 0 for x in lengths) or sum(lengths) != flat.size:
        raise BadArgumentError(f"documents: lengths must be positive and sum to {flat.size} tokens, got {lengths}")
    return flat, labels, lengths, shape


def aligned_labels(flat, labels, cu, vocab):
    lab = flat if labels is None else np.asarray(labels).reshape(-1)
    if lab.size != flat.size or lab.dtype.kind not in "iu":
        raise BadArgumentError(f"labels: expected {flat.size} integer labels like the tokens, got {lab.size} of "
                               f"dtype {lab.dtype}")
    bad = np.flatnonzero(((lab < 0) | (lab >= vocab)) & (lab != IGNORE_INDEX))
    if bad.size:
        raise BadArgumentError(f"labels: label {lab[bad[0]]} at position {bad[0]} is neither -100 nor in [0, {vocab})")
    aligned = np.full(flat.size, IGNORE_INDEX, np.int32)
    for s, e in zip(cu[:-1], cu[1:]):
        aligned[s:e - 1] = lab[s + 1:e]
    return aligned


def _given_labels(labels, n, vocab):
    """Labels given already aligned (a piece of a document: the caller shifted the whole)."""
    lab = None if labels is None else np.asarray(labels).reshape(-1)
    if lab is None or lab.size != n or lab.dtype.kind not in "iu" or \
            np.any(((lab < 0) | (lab >= vocab)) & (lab != IGNORE_INDEX)):
        raise BadArgumentError(f"labels: aligned=True needs {n} integer labels, each in [0, {vocab}) or -100")
    return lab.astype(np.int32)


def check_tokens(tokens, vocab, what):
    """A non-empty 1-D array of token ids in [0, vocab) as int32, or BadArgumentError."""
    arr = np.asarray(tokens)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
        raise BadArgumentError(f"{what}: expected a non-empty 1-D array of integer token ids, got "
                               f"{arr.dtype}{arr.shape}")
    bad = np.flatnonzero((arr < 0) | (arr >= vocab))
    if bad.size:
        raise BadArgumentError(f"{what}: token id {arr[bad[0]]} at position {bad[0]} is outside the "
                               f"vocabulary [0, {vocab})")
    return arr.astype(np.int32)


class PackedBatch:
    """A batch on the host, packed: .buffer (int32, the C layout), .num_tokens, .num_docs,
    .with_labels, .num_labels (labelled targets), .shape ([B, T] or None for documents).
    A piece of a longer document (one document, split by the caller): past = the document's
    tokens before it (positions start there; .past) and aligned=True: `labels` are already
    aligned targets (labels[t] the token the logits at t predict, the last one the next
    piece's first token, or -100), as only the caller who sees the whole document can shift."""

    def __init__(self, tokens, labels, documents, vocab, with_labels, past=0, aligned=False):
        flat, labels, lengths, self.shape = flatten_documents(tokens, labels, documents)
        if isinstance(past, bool) or not isinstance(past, (int, np.integer)) or past < 0 or \
                (past and len(lengths) != 1):
            raise BadArgumentError(f"past: expected 0, or a positive count of earlier tokens of ONE document, got "
                                   f"{past!r} with {len(lengths)} documents")
        self.past = int(past)
        if flat.dtype.kind not in "iu":
            raise BadArgumentError(f"tokens: expected integer token ids, got dtype {flat.dtype}")
        bad = np.flatnonzero((flat < 0) | (flat >= vocab))
        if bad.size:
            raise BadArgumentError(f"tokens: token id {flat[bad[0]]} at position {bad[0]} is outside the "
                                   f"vocabulary [0, {vocab}) ({bad.size} out of range)")
        self.num_tokens, self.num_docs, self.with_labels = flat.size, len(lengths), bool(with_labels)
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        numel = modelslib.dataflow_batch_buffer_numel(self.num_tokens, self.num_docs, int(self.with_labels))
        self.buffer = np.empty(c_size(numel, f"tokens: a batch of {self.num_tokens:,} tokens"), np.int32)
        # the layout is C's: point a batch at the host buffer and fill each field where it lands
        base = int(ffi.cast("uintptr_t", ffi.from_buffer(self.buffer)))
        host = self.c_batch(base)
        fields = {"tokens": flat, "cu_seqlens": cu,
                  "positions": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]) + self.past}
        self.num_labels = 0
        if self.with_labels:
            fields["labels"] = _given_labels(labels, flat.size, vocab) if aligned else \
                aligned_labels(flat, labels, cu, vocab)
            self.num_labels = int(np.count_nonzero(fields["labels"] != IGNORE_INDEX))
        for name, values in fields.items():
            offset = (int(ffi.cast("uintptr_t", getattr(host, name))) - base) // 4
            self.buffer[offset:offset + values.size] = values

    def c_batch(self, address):
        """A Dataflow_Llama_Batch pointing into a packed buffer at `address` (device or host)."""
        c = ffi.new("Dataflow_Llama_Batch *")
        check(modelslib.dataflow_batch_from_buffer(ffi.cast("int32_t *", address), self.num_tokens, self.num_docs,
                                                   int(self.with_labels), c))
        return c


class BatchBuffer:
    """One device int32 buffer a model reuses for its batches, grown when a batch is larger."""

    def __init__(self, handle):
        self.handle, self.array = handle, None

    def upload(self, packed, stream=0):
        """Sends the packed batch up in one inbound transfer on `stream` (asynchronous: the handle
        keeps the host buffer until that stream syncs); returns its Dataflow_Llama_Batch."""
        n = packed.buffer.size
        if self.array is None or self.array.size < n:
            self.array = self.handle.empty(max(n, 2 * self.array.size if self.array else 0), "int32")
        self.handle.inbound_transfer(self.array.view((n,)), packed.buffer, stream=stream)
        return packed.c_batch(self.array.ptr)
