"""The default op catalogue as Python sees it: each op's dtype slots and named arguments (tensors
with their shapes), read
from libdataflowops' table (dataflow/op_catalogue.h, generated from
libdataflowops/catalogue.toml). OPS[name].submit(h, stream, **by_name) calls the op's
dataflow_submit_<op> with its dtype slots and arguments given by name, so no wrapper repeats an
argument list by position."""
import keyword

from . import dtypes
from ._ffi import ffi, opslib
from .errors import check


class OpInfo:
    """One catalogue entry: name, doc, signature, dtype slots, arguments (name, role, dtype or
    slot, extent, shape dims), variants, its C submit function and `submit` by name (None for the halves
    of a composite)."""

    def __init__(self, info):
        text = lambda p: ffi.string(p).decode() if p != ffi.NULL else None  # noqa: E731
        self.name, self.doc, self.signature = text(info.name), text(info.doc), text(info.signature)
        self.external = info.kind == opslib.DATAFLOW_OP_EXTERNAL
        self.part_of = text(info.part_of)
        self.slots = tuple(text(info.slot_names[i]) for i in range(info.num_slots))
        roles = {opslib.DATAFLOW_ARG_SCALAR: None, opslib.DATAFLOW_ARG_IN: "in", opslib.DATAFLOW_ARG_OUT: "out",
                 opslib.DATAFLOW_ARG_INOUT: "inout"}
        self.args = tuple(Arg(text(a.name), roles[a.role], bool(a.nullable),
                              self.slots[a.slot] if a.slot >= 0 else dtypes.name_of(a.dtype), text(a.extent),
                              tuple(text(a.dims[d]) for d in range(a.num_dims)))
                          for a in (info.args[i] for i in range(info.num_args)))
        self.variants = tuple(tuple(dtypes.name_of(info.variants[v * info.num_slots + s]) for s in range(info.num_slots))
                              for v in range(info.num_variants))
        self.c_function = None if self.part_of else getattr(opslib, "dataflow_submit_" + self.name)
        self.submit = _by_name(self) if self.c_function else None

    def __repr__(self):
        return f"OpInfo({self.name}: {self.signature})"


class Arg:
    """A tensor's extent is its element count, the product of its shape's dims (expressions
    over the op's scalars, outermost first); a scalar has neither."""
    __slots__ = ("name", "role", "nullable", "dtype", "extent", "dims")

    def __init__(self, name, role, nullable, dtype, extent, dims):
        self.name, self.role, self.nullable, self.dtype, self.extent, self.dims = \
            name, role, nullable, dtype, extent, dims

    def __repr__(self):
        kind = f"{self.role}{'?' if self.nullable else ''} {self.dtype}[{', '.join(self.dims)}]" if self.role \
            else self.dtype
        return f"{self.name}: {kind}"


def _by_name(info):
    """submit(h, stream, *, <slots>, <arguments>) for op info: an Array or None for a tensor, a
    number for a scalar, a dtype name for a slot; the C layer checks them against the op's
    signature. Built once from the metadata, as a function that calls the C function
    positionally, so a call costs what a hand-written wrapper's does."""
    names = list(info.slots) + [a.name for a in info.args]
    if len(set(names)) != len(names) or any(keyword.iskeyword(n) or not n.isidentifier() or n.startswith("_")
                                            or n in ("h", "stream") for n in names):
        raise RuntimeError(f"{info.name}: slot and argument names must be distinct Python identifiers: {names}")
    values = [f"_enum({s})" for s in info.slots] + \
        [f"_NULL if {a.name} is None else _cast(_VOIDP, {a.name}.ptr)" if a.role else a.name for a in info.args]
    source = f"def submit(h, stream, *, {', '.join(names)}):\n    _check(_c(h._ptr(), stream, {', '.join(values)}))\n"
    scope = {"_enum": dtypes.enum, "_NULL": ffi.NULL, "_cast": ffi.cast, "_VOIDP": ffi.typeof("void *"),
             "_check": check, "_c": info.c_function}
    exec(compile(source, f"<dataflow.catalogue: {info.name}>", "exec"), scope)  # noqa: S102 (names checked above)
    return scope["submit"]


OPS = {info.name: info for info in (OpInfo(opslib.dataflow_op_catalogue_entry(i))
                                    for i in range(opslib.dataflow_op_catalogue_size()))}
