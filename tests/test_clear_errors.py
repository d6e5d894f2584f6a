"""Silent wrong answers turned into errors that name what to fix: a NUL inside a string handed to
C (which would cut it short: a signature losing its requirement, two op names colliding, a dtype
or profile name read as another), and C size helpers' -1 ("beyond my range") never taken as a
size."""
import pytest

import dataflow as df

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
    from dataflow import ring_training
    with pytest.raises(df.BadArgumentError, match="beyond what the C library sizes"):
        ring_training.resident_training_bytes(model, 2**31 + 1)


def test_a_collective_range_error_keeps_the_message_it_prefixes(h):
    """libdataflowcomm prefixes the range check's message with the collective's name; formatting
    into the buffer it read from garbled it ("all_reduce: all_reduce: of 256 bytes ...")."""
    import numpy as np
    comm = df.distributed.init(h)
    x, small = h.from_numpy(np.ones(64, np.float32)), h.from_numpy(np.ones(8, np.float32))
    with pytest.raises(df.BadArgumentError) as e:
        comm.all_reduce(x, out=small)
    assert str(e.value).startswith("all_reduce: recv: range of 256 bytes at "), e.value
    comm.close()
