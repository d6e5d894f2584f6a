"""Silent wrong answers turned into errors that name what to fix: a NUL inside a string handed to
C (which would cut it short: a signature losing its requirement, two op names colliding, a dtype
or profile name read as another), and C size helpers' -1 ("beyond my range") never taken as a
size."""
import numpy as np
import pytest

import dataflow as df
from isolated import assert_clean_error

CFG = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}


def python_op(*args):
    pass


@pytest.fixture
def h():
    with df.Handle("host", streams=1, device_memory="16MiB") as handle:
        yield handle


def test_a_nul_in_an_op_name_is_refused_not_truncated(h):
    h.register_external_op("twin", ["fp32"], python_op)
    with pytest.raises(df.BadArgumentError, match="op name contains a NUL character at 4"):
        h.register_external_op("twin\0b", ["fp32"], python_op)  # C would read "twin": a collision


def test_a_nul_in_a_signature_is_refused_not_truncated(h):
    with pytest.raises(df.BadArgumentError, match="signature contains a NUL character"):
        h.register_external_op("sig", ["int64_scalar", "fp32"], python_op,
                               signature="n; x: in[n]\0; require n > 0")  # the requirement would vanish


@pytest.mark.parametrize("call, message", [
    (lambda: df.Handle("host\0cuda"), "backend contains a NUL"),
    (lambda: df.ring.Profile.named("h100-sxm\0x"), "profile contains a NUL"),
    (lambda: df.dtypes.enum("fp32\0x"), "unknown datatype"),
])
def test_nul_in_other_names_handed_to_c(call, message):
    with pytest.raises(df.BadArgumentError, match=message):
        call()


def test_a_batch_past_the_c_size_range_is_an_error_not_a_fit():
    model = df.models.Llama(df.Handle("host", device_memory="16MiB"), CFG)
    with pytest.raises(df.BadArgumentError, match=r"seq_len must be in \[1, 2\^31\], got 2.14748e\+09"):
        df.Trainer(model, host_memory="1GiB", seq_len=2**31 + 1, profile="h100-sxm")


# MPI starts once per process (and a loaded MPI changes what test_distributed sees): the
# collectives run in a subprocess.
COMM = """
import numpy as np
import dataflow as df
h = df.Handle("host", streams=1, device_memory="16MiB")
comm = df.distributed.init(h)
x, small = h.from_numpy(np.ones(64, np.float32)), h.from_numpy(np.ones(8, np.float32))
"""


def test_a_collective_range_error_keeps_the_message_it_prefixes():
    """libdataflowcomm prefixes the range check's message with the collective's name; formatting
    into the buffer it read from garbled it ("all_reduce: all_reduce: of 256 bytes ...")."""
    assert_clean_error(COMM + "comm.all_reduce(x, out=small)\n", "BadArgumentError",
                       "BadArgumentError: all_reduce: recv: range of 256 bytes at ")


def test_a_collective_root_c_cannot_hold_is_a_bad_argument():
    assert_clean_error(COMM + "comm.broadcast(x, root=2**40)\n", "BadArgumentError",
                       "dataflow_submit_broadcast: an argument does not fit its C type")


@pytest.mark.parametrize("kind", ["byte", "hf"])
def test_text_that_is_not_valid_utf8_is_a_bad_argument(kind):
    from dataflow.io import tokenizer
    tok = tokenizer.ByteTokenizer() if kind == "byte" else tokenizer.default()
    with pytest.raises(df.BadArgumentError, match="not valid UTF-8 at character 2"):
        tok.encode("ab\udcffc")  # what a command line's undecodable bytes become


def test_a_tokenizer_whose_unk_token_is_missing_names_the_file():
    tokenizers = pytest.importorskip("tokenizers")
    from dataflow.io import tokenizer
    raw = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "b": 1}, unk_token="<unk>")).to_str()
    tok = tokenizer.HFTokenizer.from_str(raw, "tok.json")
    with pytest.raises(df.FileFormatError, match="tok.json: the tokenizer cannot encode this text: .*UNK"):
        tok.encode("a c")


@pytest.mark.parametrize("args, message", [
    ((2**40, 1.0, 1, 1), "argument 0: 1099511627776 is outside the range of int32_scalar"),
    ((1.5, 1.0, 1, 1), "argument 0: expected an integer for int32_scalar, got 1.5"),
    ((True, 1.0, 1, 1), "argument 0: expected an integer for int32_scalar, got True"),
    ((1, 1e300, 1, 1), "argument 1: 1e\\+300 is outside the range of fp32_scalar"),
    ((1, 10**400, 1, 1), "argument 1: .* is outside the range of fp32_scalar"),
    ((1, "x", 1, 1), "argument 1: expected a number for fp32_scalar, got str"),
    ((1, 1.0, -1, 1), "argument 2: -1 is outside the range of uint64_scalar"),
    ((1, 1.0, 1, 7), "argument 3: 7 is outside the range of bool_scalar"),
])
def test_custom_op_scalars_out_of_range_or_of_the_wrong_type(h, args, message):
    op = h.register_external_op("s", ["int32_scalar", "fp32_scalar", "uint64_scalar", "bool_scalar"], python_op)
    with pytest.raises(df.BadArgumentError, match=f"op 's' {message}"):
        op(*args)
    op(np.int64(3), np.float32(2), np.uint64(5), True)  # numpy scalars and bools where they fit
    op(1, float("-inf"), 2**64 - 1, 0)
    h.sync()


def test_ring_labels_are_checked_over_the_batch():
    """A bad label late in a batch the ring splits into chunks is reported at its batch position
    (not a chunk's), with the batch's label count, before any chunk runs."""
    h = df.Handle("host", device_memory="200KiB")
    model = df.models.Llama(h, CFG, placement="host")
    t = df.Trainer(model, host_memory="64MiB", seq_len=8, batch_size=4, profile="h100-sxm")
    assert t.plan is not None and t.plan.chunk_tokens < 32
    tokens = np.arange(32).reshape(4, 8) % 64
    labels = tokens.copy()
    labels[3, 5] = 99
    with pytest.raises(df.BadArgumentError, match="label 99 at position 29 is neither -100"):
        t.step(tokens, labels=labels)
    with pytest.raises(df.BadArgumentError, match="expected 32 integer labels like the tokens, got 31"):
        t.step(tokens, labels=labels.reshape(-1)[:31])
    assert t.step_count == 0


def test_a_second_trainer_on_a_model_the_ring_trains():
    h = df.Handle("host", device_memory="200KiB")
    model = df.models.Llama(h, CFG, placement="host")
    kw = {"host_memory": "64MiB", "seq_len": 8, "batch_size": 2, "profile": "h100-sxm"}
    first = df.Trainer(model, **kw)
    first.step(np.arange(16).reshape(2, 8))
    for plan in (None, first.plan):
        with pytest.raises(df.BadArgumentError, match="another Trainer trains this model in its ring executor"):
            df.Trainer(model, **kw, plan=plan)
    first.step(np.arange(16).reshape(2, 8))  # the first one is untouched


@pytest.mark.parametrize("kwargs, message", [
    ({"size": 0}, "size must be an integer in 1..16384, got 0"),
    ({"size": 10**6}, "size must be an integer in 1..16384"),
    ({"size": "x"}, "size must be an integer"),
    ({"tokens": -1}, "tokens must be an integer"),
    ({"heads": 1.5}, "heads must be an integer"),
    ({"head_dim": 63}, "head_dim must be even"),
    ({"repeats": 0}, "repeats must be an integer in 1..1000"),
    ({"transfer_bytes": "1e400"}, "transfer_bytes"),
    ({"transfer_bytes": "2GiB"}, "transfer_bytes must be at most 1 GiB"),
    ({"fit_seconds": float("nan")}, "fit_seconds must be a positive number"),
])
def test_calibrate_arguments(h, kwargs, message):
    with pytest.raises(df.BadArgumentError, match=f"calibrate: {message}"):
        df.training.calibrate(h, **kwargs)


@pytest.mark.parametrize("call", ["matmul", "record", "sync", "set_mem", "from_numpy"])
def test_an_int_argument_c_cannot_hold_is_a_bad_argument(h, call):
    """cffi raised OverflowError or TypeError for these; every binding now names the C function."""
    a, c = h.from_numpy(np.ones((4, 4), np.float32)), h.empty((4, 4))
    calls = {"matmul": lambda: df.ops.matmul(h, a, a, out=c, stream=2**40),
             "record": lambda: h.record(stream="0"),
             "sync": lambda: h.sync(stream=2**40),
             "set_mem": lambda: h.set_mem(a, 0, stream=2**70),
             "from_numpy": lambda: h.from_numpy(np.ones(3), stream=-2**70)}
    with pytest.raises(df.BadArgumentError, match="an argument does not fit its C type"):
        calls[call]()


BAD_VALUES = [None, "x", 1.5, -1, 2**70, float("nan"), float("inf"), [], {}, True, np.ones((2, 2)), 10**400]


@pytest.fixture(scope="module")
def trained():
    model = df.models.Llama(df.Handle("host", device_memory="64MiB"), CFG)
    return model, df.Trainer(model)


@pytest.mark.parametrize("call", ["generate max_new_tokens", "generate temperature", "generate top_p", "generate seed",
                                  "step labels", "step documents", "Llama seed", "Llama dtype", "Llama save_level",
                                  "Trainer grad_clip", "kv_cache", "ring.plan seq_len", "ring.plan tokens_per_step",
                                  "ring.plan dtype"])
def test_malformed_arguments_raise_dataflow_errors(trained, call):
    """A sweep of the public API with values of every wrong kind: each is a DataflowError naming
    the argument (these raised TypeError, ValueError, OverflowError or IndexError)."""
    model, trainer = trained
    h = model.handle
    calls = {"generate max_new_tokens": lambda v: model.generate([1, 2], v),
             "generate temperature": lambda v: model.generate([1, 2], 2, temperature=v),
             "generate top_p": lambda v: model.generate([1, 2], 2, top_p=v),
             "generate seed": lambda v: model.generate([1, 2], 2, seed=v),
             "step labels": lambda v: trainer.step([[1, 2, 3]], labels=v),
             "step documents": lambda v: trainer.step([1, 2, 3, 4], documents=v),
             "Llama seed": lambda v: df.models.Llama(h, CFG, seed=v),
             "Llama dtype": lambda v: df.models.Llama(h, CFG, dtype=v),
             "Llama save_level": lambda v: df.models.Llama(h, CFG, save_level=v),
             "Trainer grad_clip": lambda v: df.Trainer(model, grad_clip=v),
             "kv_cache": lambda v: model.kv_cache(v),
             "ring.plan seq_len": lambda v: df.ring.plan(CFG, v, 2**30, 2**30),
             "ring.plan tokens_per_step": lambda v: df.ring.plan(CFG, 16, 2**30, 2**30, tokens_per_step=v),
             "ring.plan dtype": lambda v: df.ring.plan(CFG, 16, 2**30, 2**30, dtype=v)}
    for value in BAD_VALUES:  # some are valid for some calls (labels=None): those just run
        try:
            calls[call](value)
        except df.DataflowError:
            pass
