"""Every Python object wrapping a C object refuses use after close (ClosedError naming it), or
after its handle closed, instead of calling C with freed memory: communicators (directly and
through a Trainer that sums over one), models, KV caches, ring executors. Each case runs in a
subprocess (tests/helpers/isolated.py): before the guards, several crashed it."""
import pytest

from isolated import assert_clean_error

SETUP = """
import dataflow as df
CFG = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
h = df.Handle("host", device_memory="256MiB")
tokens = [[1, 2, 3, 4, 5, 6, 7, 8]]
"""

CASES = {
    "communicator all_reduce after close": ("""
        comm = df.distributed.init(h)
        x = h.from_numpy([1.0, 2.0])
        comm.close()
        comm.all_reduce(x)
    """, "Communicator is closed"),
    "communicator after its handle closed": ("""
        own = df.Handle("host", streams=1, device_memory="16MiB")
        comm = df.distributed.init(own)
        own.close()
        comm.sum_host([1.0])
    """, "handle is closed"),
    "trainer step after its communicator closed": ("""
        m = df.models.Llama(h, CFG)
        comm = df.distributed.init(h)
        t = df.Trainer(m, comm=comm)
        t.step(tokens)
        comm.close()
        t.step(tokens)
    """, "Communicator is closed"),
    "model loss_backward after the trainer's communicator closed": ("""
        m = df.models.Llama(h, CFG)
        comm = df.distributed.init(h)
        t = df.Trainer(m, comm=comm)
        comm.close()
        df.training.loss_backward(m, tokens)
        print("local gradients", flush=True)
        t.step(tokens)
    """, "Communicator is closed"),
    "a trainer given a closed communicator of another handle": ("""
        comm = df.distributed.init()
        comm.close()
        df.Trainer(df.models.Llama(h, CFG), comm=comm)
    """, "Communicator is closed"),
    "closed llama forward": ("""
        m = df.models.Llama(h, CFG)
        m.close()
        m.forward(tokens)
    """, "Llama is closed"),
    "closed host-held llama state_dict": ("""
        m = df.models.Llama(h, CFG, placement="host")
        m.close()
        m.state_dict()
    """, "Llama is closed"),
    "trainer of a closed llama": ("""
        m = df.models.Llama(h, CFG)
        t = df.Trainer(m)
        m.close()
        t.step(tokens)
    """, "Llama is closed"),
    "llama after its handle closed": ("""
        m = df.models.Llama(h, CFG)
        h.close()
        m.loss(tokens)
    """, "Llama: its handle is closed"),
    "kv cache after its model closed": ("""
        m = df.models.Llama(h, CFG)
        c = m.kv_cache(16)
        m.close()
        c.forward([1, 2])
    """, "Llama is closed"),
    "kv cache after its handle closed": ("""
        m = df.models.Llama(h, CFG)
        c = m.kv_cache(16)
        h.close()
        c.length
    """, "closed"),
    "ring executor after close": ("""
        small = df.Handle("host", device_memory="200KiB")
        m = df.models.Llama(small, CFG, placement="host")
        t = df.Trainer(m, host_memory="64MiB", seq_len=8, profile="h100-sxm")
        x = t._engine.ring.executor
        x.close()
        x.read(0, 0)
    """, "RingExecutor is closed"),
    "ring trainer after its handle closed": ("""
        small = df.Handle("host", device_memory="200KiB")
        m = df.models.Llama(small, CFG, placement="host")
        t = df.Trainer(m, host_memory="64MiB", seq_len=8, profile="h100-sxm")
        small.close()
        t.step(tokens)
    """, "handle is closed"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_use_after_close_raises_closed_error(case):
    code, message = CASES[case]
    import textwrap
    assert_clean_error(SETUP + textwrap.dedent(code), "ClosedError", message)


def test_close_refused_while_a_model_shards_over_the_communicator():
    assert_clean_error(SETUP + """
m = df.models.Llama(h, CFG)
comm = df.distributed.init(h)
t = df.Trainer(m, comm=comm, shard_optimizer=True)
t.step(tokens)
try:
    comm.close()
except df.BadArgumentError as e:
    print("refused:", e, flush=True)
t.step(tokens)  # still open: the refused close changed nothing
m.close()
comm.close()
comm.all_reduce(h.from_numpy([1.0]))
""", "ClosedError", "Communicator is closed")
