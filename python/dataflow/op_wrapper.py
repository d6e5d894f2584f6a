"""The one wrapper builder of the default ops: WRAPPERS[name] is an op's catalogue entry
(dataflow.catalogue.OPS: dtype slots, arguments, tensor shapes) made into a function

    call(h, stream, **arguments) -> the op's out and inout tensors (a tuple when several)

that checks every tensor (an Array, usable, on h or a peer), binds the dtype slots (the first
array typed by a slot fixes it, the others must agree) and the dims of the shapes (a dim named
alone is bound by the first array that has it, every later use must agree; a dim written as an
expression is checked once the names in it are bound), allocates the out tensors not given
(inout ones must be given), fills the int scalars that are dims, and submits.
An array's shape is read as k dims for a shape of k: more leading dimensions multiply into the
first (rows over the last dimension, as torch's linear layers take them), fewer are 1s; arrays
declared with the same shape must have the same shape, which an output not given copies.
Errors name the op and the argument (as the calling function names it: renamed()); the C layer
checks the submit again against the op's signature."""
import ast
import copy
import math

from .array import Array
from .catalogue import OPS
from .errors import BadArgumentError

_INTS = {"int64": (-2**63, 2**63), "int32": (-2**31, 2**31), "uint64": (0, 2**64)}  # [low, high)
_EVAL_GLOBALS = {"__builtins__": {}, "cdiv": lambda a, b: -(-a // b)}


def check_array(h, x, what):
    """x if it is an Array whose memory an op on h may use, else a BadArgumentError naming what."""
    if not isinstance(x, Array):
        raise BadArgumentError(f"{what}: expected a dataflow Array, got {type(x).__name__}")
    x._ptr_for(h, what)
    return x


class _Dim:
    """One dim of a catalogue shape: a name bound by arrays, a number, or an expression over the
    scalars (C's integer arithmetic: / truncates, cdiv rounds up) that arrays only check."""

    def __init__(self, text):
        self.text = text
        tree = ast.parse(text, mode="eval").body
        self.name = tree.id if isinstance(tree, ast.Name) else None
        self.names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - {"cdiv"}
        tree = _CIntegers().visit(ast.Expression(tree))
        self.code = compile(ast.fix_missing_locations(tree), f"<dim {text}>", "eval")

    def value(self, bound):
        if self.name is not None:
            return bound[self.name]
        return eval(self.code, _EVAL_GLOBALS, bound)  # noqa: S307 (the catalogue's own expressions)


class _CIntegers(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod, ast.Add, ast.Sub, ast.Mult)):
            node.op = ast.FloorDiv() if isinstance(node.op, ast.Div) else node.op
            return node
        raise ValueError(f"operator {type(node.op).__name__} in a shape")


def _flat(shape, k):
    """shape as k dims: its leading dimensions multiplied into the first, or 1s before it."""
    if len(shape) < k:
        return (1,) * (k - len(shape)) + tuple(shape)
    lead = len(shape) - k + 1
    return (math.prod(shape[:lead]),) + tuple(shape[lead:])


def _shape_text(dims):
    return "[" + ", ".join(d.text for d in dims) + "]"


class _Wrapper:
    def __init__(self, info):
        self.info, self.name = info, info.name
        self.tensors = [a for a in info.args if a.role]
        self.scalars = [a for a in info.args if not a.role]
        self.kind = {a.name: a.dtype.removesuffix("_scalar") for a in self.scalars}  # "int64_scalar": int64
        self.dims = {a.name: tuple(_Dim(d) for d in a.dims) for a in self.tensors}
        self.shape_of = {a.name: a.dims for a in self.tensors}  # equal for tensors declared alike
        self.computed = {name for name, dims in self.dims.items() if any(d.name is None for d in dims)}
        self.outputs = [a.name for a in self.tensors if a.role != "in"]
        self.allowed = {s: tuple(dict.fromkeys(v[i] for v in info.variants)) for i, s in enumerate(info.slots)}
        self.known = set(info.slots) | {a.name for a in info.args}
        self._label({})

    def _label(self, python_names):
        """Errors name the arguments as the caller's function does (python_names: catalogue name:
        Python name, for those that differ)."""
        self.label = {a.name: python_names.get(a.name, a.name) for a in self.info.args}
        self.label["given"] = "given"
        self.what = {a.name: f"{self.name}: {self.label[a.name]}" for a in self.tensors}
        self.typed_by = {s: "/".join(self.label[a.name] for a in self.tensors if a.dtype == s) for s in self.info.slots}

    def renamed(self, **python_names):
        """This wrapper with errors naming the arguments python_names gives (catalogue name=Python name)."""
        unknown = python_names.keys() - self.label.keys()
        if unknown:
            raise ValueError(f"{self.name} has no arguments {sorted(unknown)}")
        other = copy.copy(self)
        other._label(python_names)
        return other

    def __call__(self, h, stream, **given):
        op = self.name
        unknown = given.keys() - self.known
        if unknown:
            raise TypeError(f"{op}: unexpected arguments {sorted(unknown)}; it takes {sorted(self.known)}")
        arrays = {a.name: check_array(h, given[a.name], self.what[a.name])
                  for a in self.tensors if given.get(a.name) is not None}
        slots = self._bind_slots(given, arrays)
        bound, first = self._bind_dims(given, arrays)
        for a in self.tensors:
            if a.name in arrays or a.nullable:
                continue
            if a.role != "out":
                raise BadArgumentError(f"{op}: {self.label[a.name]} is required ({a.dtype}"
                                       f"{_shape_text(self.dims[a.name])})")
            like = first.get(self.shape_of[a.name])
            shape = arrays[like].shape if like else self.shape(a.name, bound)
            arrays[a.name] = h.empty(shape, slots.get(a.dtype, a.dtype))
        scalars = {a.name: self._scalar(a, given.get(a.name, bound.get(a.name))) for a in self.scalars}
        self.info.submit(h, stream, **slots, **{a.name: arrays.get(a.name) for a in self.tensors}, **scalars)
        outs = tuple(arrays.get(name) for name in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _bind_slots(self, given, arrays):
        slots = {s: given[s] for s in self.info.slots if given.get(s) is not None}
        source = dict.fromkeys(slots, "given")
        for a in self.tensors:
            x = arrays.get(a.name)
            if x is None:
                continue
            if a.dtype in self.info.slots:
                if x.dtype not in self.allowed[a.dtype]:
                    raise BadArgumentError(f"{self.name}: {self.typed_by[a.dtype]} dtype must be one of "
                                           f"{{{', '.join(self.allowed[a.dtype])}}}, got {x.dtype}")
                expected = slots.setdefault(a.dtype, x.dtype)
                source.setdefault(a.dtype, a.name)
                like = f" (like {self.label[source[a.dtype]]})" if source[a.dtype] not in (a.name, "given") else ""
            else:
                expected, like = a.dtype, ""
            if x.dtype != expected:
                raise BadArgumentError(f"{self.name}: {self.label[a.name]} must be {expected}{like}, got {x.dtype}")
        for s, dtype in slots.items():
            if dtype not in self.allowed[s]:
                raise BadArgumentError(f"{self.name}: {s} must be one of {{{', '.join(self.allowed[s])}}}, got {dtype}")
        for s, allowed in self.allowed.items():
            if s not in slots:
                if len(allowed) != 1:
                    raise BadArgumentError(f"{self.name}: give {s} (one of {', '.join(allowed)}): no array fixes it")
                slots[s] = allowed[0]
        return slots

    def _bind_dims(self, given, arrays):
        """(dim values, the first array given for each distinct shape), checking each array."""
        op = self.name
        bound = {a.name: given[a.name] for a in self.scalars
                 if self.kind[a.name] in _INTS and given.get(a.name) is not None}
        source = dict.fromkeys(bound, "given")
        first = {}
        for name, x in arrays.items():
            dims = self.dims[name]
            for dim, size in zip(dims, x.shape if len(x.shape) == len(dims) else _flat(x.shape, len(dims))):
                if dim.name is None:
                    continue
                if dim.name not in bound:
                    bound[dim.name], source[dim.name] = size, name
                elif bound[dim.name] != size:
                    raise BadArgumentError(f"{op}: {self.label[name]} must have shape {_shape_text(dims)} with "
                                           f"{dim.name} = {bound[dim.name]} (from {self.label[source[dim.name]]}), "
                                           f"got {x.shape}")
        for name, x in arrays.items():
            if name in self.computed:  # numbers and expressions, once every array has bound its dims
                self.shape(name, bound, x.shape)
            like = first.setdefault(self.shape_of[name], name)
            if like != name and x.shape != arrays[like].shape:
                raise BadArgumentError(f"{op}: {self.label[name]} must have the shape of {self.label[like]}, "
                                       f"{arrays[like].shape}, "
                                       f"got {x.shape}")
        return bound, first

    def shape(self, name, bound, got=None):
        """The shape the dims of tensor name give, checked against got (an array's shape)."""
        dims = self.dims[name]
        missing = sorted(set().union(*(d.names for d in dims)) - bound.keys())
        if missing:
            if got is not None:
                return None
            raise BadArgumentError(f"{self.name}: give {self.label[name]} or {', '.join(missing)}: no array fixes "
                                   f"its shape "
                                   f"{_shape_text(dims)}")
        shape = tuple(d.value(bound) for d in dims)
        if got is not None and _flat(got, len(dims)) != shape:
            raise BadArgumentError(f"{self.name}: {self.label[name]} must have shape {_shape_text(dims)} = {shape}, "
                                   f"got {got}")
        return shape

    def _scalar(self, a, value):
        if value is None:
            raise BadArgumentError(f"{self.name}: give {self.label[a.name]} ({self.kind[a.name]}): no array fixes it")
        try:
            kind = self.kind[a.name]
            if kind == "bool":
                return int(bool(value))
            if kind in _INTS:
                low, high = _INTS[kind]
                if isinstance(value, bool) or int(value) != value or not low <= value < high:
                    raise ValueError
                return int(value)
            return float(value)
        except (TypeError, ValueError, OverflowError):
            raise BadArgumentError(f"{self.name}: {self.label[a.name]} must be {self.kind[a.name]}, got {value!r}") \
                from None


WRAPPERS = {name: _Wrapper(info) for name, info in OPS.items() if info.submit}
"""Every catalogue op with a dataflow_submit_<op> (not the halves of a composite), wrapped."""
