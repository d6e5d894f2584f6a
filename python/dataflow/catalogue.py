"""The default op catalogue as Python sees it: each op's dtype slots and named arguments, read
from libdataflowops' table (dataflow/op_catalogue.h, generated from
libdataflowops/catalogue.toml), and `submit`, which calls an op's dataflow_submit_<op> with
arguments given by name, so no wrapper repeats an argument list by position."""
from . import dtypes
from ._ffi import ffi, opslib
from .errors import BadArgumentError, check


class OpInfo:
    """One catalogue entry: name, doc, signature, dtype slots, arguments (name, role, dtype or
    slot, extent), variants, and the C submit function (None for the halves of a composite)."""

    def __init__(self, info):
        text = lambda p: ffi.string(p).decode() if p != ffi.NULL else None  # noqa: E731
        self.name, self.doc, self.signature = text(info.name), text(info.doc), text(info.signature)
        self.external = info.kind == opslib.DATAFLOW_OP_EXTERNAL
        self.part_of = text(info.part_of)
        self.slots = tuple(text(info.slot_names[i]) for i in range(info.num_slots))
        roles = {opslib.DATAFLOW_ARG_SCALAR: None, opslib.DATAFLOW_ARG_IN: "in", opslib.DATAFLOW_ARG_OUT: "out",
                 opslib.DATAFLOW_ARG_INOUT: "inout"}
        self.args = tuple(Arg(text(a.name), roles[a.role], bool(a.nullable),
                              self.slots[a.slot] if a.slot >= 0 else dtypes.name_of(a.dtype), text(a.extent))
                          for a in (info.args[i] for i in range(info.num_args)))
        self.variants = tuple(tuple(dtypes.name_of(info.variants[v * info.num_slots + s]) for s in range(info.num_slots))
                              for v in range(info.num_variants))
        self.submit = None if self.part_of else getattr(opslib, "dataflow_submit_" + self.name)
        self._params = tuple((a.name, a.role is not None) for a in self.args)
        if set(self.slots) & {a.name for a in self.args}:
            raise RuntimeError(f"{self.name}: a dtype slot and an argument share a name")

    def __repr__(self):
        return f"OpInfo({self.name}: {self.signature})"


class Arg:
    __slots__ = ("name", "role", "nullable", "dtype", "extent")

    def __init__(self, name, role, nullable, dtype, extent):
        self.name, self.role, self.nullable, self.dtype, self.extent = name, role, nullable, dtype, extent

    def __repr__(self):
        kind = f"{self.role}{'?' if self.nullable else ''} {self.dtype}[{self.extent}]" if self.role else self.dtype
        return f"{self.name}: {kind}"


OPS = {info.name: info for info in (OpInfo(opslib.dataflow_op_catalogue_entry(i))
                                    for i in range(opslib.dataflow_op_catalogue_size()))}


def submit(h, op, stream=0, **kw):
    """Submits catalogue op `op` on stream: dtype slots and arguments by name (an Array or
    None for a tensor, a number for a scalar); the C layer checks them against the op's
    signature."""
    info = OPS[op]
    if len(kw) != len(info.slots) + len(info._params):
        names = set(info.slots) | {a.name for a in info.args}
        raise BadArgumentError(f"{op}: expected arguments {sorted(names)}, got {sorted(kw)}")
    try:
        values = [dtypes.enum(kw[s]) for s in info.slots]
        for name, tensor in info._params:
            v = kw[name]
            values.append((ffi.NULL if v is None else v.cdata) if tensor else v)
    except KeyError as e:
        raise BadArgumentError(f"{op}: missing argument {e.args[0]}") from None
    check(info.submit(h._ptr(), stream, *values))
