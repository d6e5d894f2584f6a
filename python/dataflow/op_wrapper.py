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
checks the submit again against the op's signature.
A wrapper's __call__ is generated per op (_fast_call): a plain valid call costs about what a
hand-written wrapper did; checked_call does the general checks and words every error."""
import ast
import copy
import math

from . import dtypes
from ._ffi import ffi
from .array import Array
from .catalogue import OPS
from .errors import BadArgumentError, check
from .handle import Handle

_INTS = {"int64": (-2**63, 2**63), "int32": (-2**31, 2**31), "uint64": (0, 2**64)}  # [low, high)
_ABSENT = object()  # a scalar not given to a generated __call__
_EVAL_GLOBALS = {"__builtins__": {}, "cdiv": lambda a, b: -(-a // b)}


def check_array(h, x, what):
    """x if it is an Array whose memory an op on h may use, else a BadArgumentError naming what."""
    if x.__class__ is Array and x.handle is h and x.ptr and x._base is None and h._alive():
        return x  # the common case, checked as _ptr_for would
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
        tree = ast.fix_missing_locations(_CIntegers().visit(ast.Expression(tree)))
        self.code = compile(tree, f"<dim {text}>", "eval")
        self.source = ast.unparse(_Renamed().visit(tree))  # for the fast path: names as its locals

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


class _Renamed(ast.NodeTransformer):
    """A dim's names as the fast path's locals (_d_<name>; cdiv is _cdiv)."""

    def visit_Name(self, node):
        return ast.Name("_cdiv" if node.id == "cdiv" else "_d_" + node.id, node.ctx)


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
        self.parameters = info.slots + tuple(a.name for a in info.args)
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

    def checked_call(self, h, stream, **given):
        """The call with every check spelled out, naming what is wrong; the generated __call__
        (_fast_call) comes here for anything but a plain valid call."""
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

    def fallback(self, h, stream, more, *values):
        """checked_call with the generated __call__'s arguments (values in its order: slots, then
        the op's arguments), leaving out the scalars not given."""
        given = {n: v for n, v in zip(self.parameters, values) if v is not _ABSENT}
        return self.checked_call(h, stream, **given, **more)

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


def _fast_call(w):
    """w's __call__: the plain valid call (arrays of h itself, dtypes and dims that agree, int
    scalars as ints) checked and submitted in straight-line code generated once per op; any
    other call goes to w.checked_call, which raises its errors or takes the rare cases (peer
    arrays, dims or int scalars given as numpy ints). Its result is checked_call's."""
    slots, tensors, scalars = w.info.slots, w.tensors, w.scalars
    int_scalars = [a.name for a in scalars if w.kind[a.name] in _INTS]
    alone = {d.name for dims in w.dims.values() for d in dims if d.name}
    bindable = alone | set(int_scalars)  # what checked_call's bound can hold
    params = w.parameters
    # a scalar's default is _ABSENT, as checked_call tells a scalar given None from one not given
    slow = f"return _self.fallback(h, stream, _more, {', '.join(params)})"
    defaults = [f"{n}=None" for n in list(slots) + [a.name for a in tensors]] + [f"{a.name}=_ABSENT" for a in scalars]
    lines = [f"def __call__(_self, h, stream, *, {', '.join(defaults)}, **_more):",
             f"    if _more or not isinstance(h, _Handle) or getattr(h, '_h', None) is None: {slow}"]
    for a in tensors:  # usable arrays of h (a view's base not freed); absent only where allowed
        t = a.name
        absent = "pass" if a.nullable or a.role == "out" else slow
        lines += [f"    if {t} is None: {absent}",
                  f"    elif {t}.__class__ is not _Array or {t}.handle is not h or not {t}.ptr or "
                  f"({t}._base is not None and not {t}._base.ptr): {slow}"]
    required = {a.name for a in tensors if not (a.nullable or a.role == "out")}  # given, past this point

    def when(t, condition):
        return condition if t in required else f"{t} is not None and {condition}"
    for s in slots:  # given, else the first array typed by it, else its only allowed dtype
        typed = [a.name for a in tensors if a.dtype == s]
        lines.append(f"    _s_{s} = {s}")
        for t in typed:
            lines.append(f"    if {when(t, f'_s_{s} is None')}: _s_{s} = {t}.dtype")
            if t in required:
                break
        if len(w.allowed[s]) == 1:
            lines.append(f"    if _s_{s} is None: _s_{s} = {w.allowed[s][0]!r}")
        lines.append(f"    if _s_{s} not in {w.allowed[s]!r}: {slow}")
    for a in tensors:
        expected = f"_s_{a.dtype}" if a.dtype in slots else repr(a.dtype)
        lines.append(f"    if {when(a.name, f'{a.name}.dtype != {expected}')}: {slow}")
    for n in sorted(bindable):
        if n in int_scalars:
            lines += [f"    if {n} is None or ({n} is not _ABSENT and {n}.__class__ is not int): {slow}",
                      f"    _d_{n} = None if {n} is _ABSENT else {n}"]
        else:
            lines.append(f"    _d_{n} = None")
    for a in tensors:  # bind the dims named alone, in argument order, each later use agreeing
        k, t = len(w.dims[a.name]), a.name
        flat = f"(_prod(_f_{t}),)" if k == 1 else f"_flat(_f_{t}, {k})"
        pad = "    " if t in required else "        "
        if t not in required:
            lines.append(f"    if {t} is not None:")
        lines += [f"{pad}_f_{t} = {t}.shape",
                  f"{pad}if len(_f_{t}) != {k}: _f_{t} = {flat}"]
        for i, d in enumerate(w.dims[a.name]):
            if d.name:
                lines += [f"{pad}if _d_{d.name} is None: _d_{d.name} = _f_{t}[{i}]",
                          f"{pad}elif _d_{d.name} != _f_{t}[{i}]: {slow}"]
    for a in tensors:  # numbers and expressions, where every name in them is bound
        t, dims = a.name, w.dims[a.name]
        names = set().union(*(d.names for d in dims))
        if a.name not in w.computed or not names <= bindable:
            continue
        differs = " and ".join([f"_d_{n} is not None" for n in sorted(names)] +
                             [f"_f_{t} != ({', '.join(d.source for d in dims)},)"])
        lines.append(f"    if {when(t, differs)}: {slow}")
    groups = {}
    for a in tensors:
        groups.setdefault(w.shape_of[a.name], []).append(a.name)
    for i, group in enumerate(groups.values()):  # tensors declared alike: the first given one's shape
        if group[0] in required:
            lines.append(f"    _like{i} = {group[0]}.shape")
            lines += [f"    if {when(t, f'{t}.shape != _like{i}')}: {slow}" for t in group[1:]]
            continue
        lines.append(f"    _like{i} = None")
        for t in group:
            lines += [f"    if {t} is not None:",
                      f"        if _like{i} is None: _like{i} = {t}.shape",
                      f"        elif {t}.shape != _like{i}: {slow}"]
    lines.append("    try:")  # scalars as checked_call converts them, else its error
    for a in scalars:
        n, kind = a.name, w.kind[a.name]
        value = f"_d_{n}" if n in bindable else n
        lines.append(f"        if {value} is None: {slow}" if n in bindable else
                     f"        if {value} is None or {value} is _ABSENT: {slow}")
        if kind == "bool":
            lines.append(f"        _v_{n} = 1 if {value} else 0")
        elif kind in _INTS:
            low, high = _INTS[kind]
            lines += [f"        if {value}.__class__ is not int or not {low} <= {value} < {high}: {slow}",
                      f"        _v_{n} = {value}"]
        else:
            lines.append(f"        _v_{n} = float({value})")
    lines.append(f"    except (TypeError, ValueError, OverflowError): {slow}")
    allocations = []  # outputs not given, once every check passed
    for i, group in enumerate(groups.values()):
        for t in group:
            a = next(x for x in tensors if x.name == t)
            if a.role != "out" or a.nullable:
                continue
            dims = w.dims[t]
            names = sorted(set().union(*(d.names for d in dims)))
            if not set(names) <= bindable:
                lines.append(f"    if {t} is None and _like{i} is None: {slow}")
            elif names:
                lines.append(f"    if {t} is None and _like{i} is None and "
                             f"({' or '.join(f'_d_{n} is None' for n in names)}): {slow}")
            shape = f"({', '.join(d.source for d in dims)},)"
            dtype = f"_s_{a.dtype}" if a.dtype in slots else repr(a.dtype)
            allocations.append(f"    if {t} is None: {t} = h.empty(_like{i} if _like{i} is not None else {shape}, "
                               f"{dtype})")
    lines += allocations
    pointer = {a.name: f"({a.name}._cdata or {a.name}.cdata)" for a in tensors}
    values = [f"_ENUM[_s_{s}]" for s in slots] + \
        [(f"_NULL if {a.name} is None else {pointer[a.name]}" if a.nullable else pointer[a.name]) if a.role
         else f"_v_{a.name}" for a in w.info.args]
    lines.append(f"    _check(_c(h._h, stream, {', '.join(values)}))")
    lines.append(f"    return {', '.join(w.outputs) or '()'}")
    scope = {"_Handle": Handle, "_Array": Array, "_flat": _flat, "_prod": math.prod, "_cdiv": _EVAL_GLOBALS["cdiv"], "_ABSENT": _ABSENT,
             "_NULL": ffi.NULL, "_check": check, "_c": w.info.c_function,
             "_ENUM": {d: dtypes.enum(d) for allowed in w.allowed.values() for d in allowed}}
    exec(compile("\n".join(lines) + "\n", f"<dataflow.op_wrapper: {w.name}>", "exec"), scope)  # noqa: S102
    return scope["__call__"]


def _wrapper(info):
    """info's _Wrapper, of a class of its own whose __call__ is generated for the op."""
    w = _Wrapper(info)
    return type(f"_Wrapper_{info.name}", (_Wrapper,), {"__call__": _fast_call(w)})(info)


WRAPPERS = {name: _wrapper(info) for name, info in OPS.items() if info.submit}
"""Every catalogue op with a dataflow_submit_<op> (not the halves of a composite), wrapped."""
