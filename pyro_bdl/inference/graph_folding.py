r"""Constant folding of a traced ``torch.fx`` graph: what the traced (TorchScript) sampler step need not redo.

A model's potential traced by ``make_fx`` keeps every operation Pyro ran, including those whose values are fixed
once the shapes are: the log of a constant noise scale broadcast to every row, ``zeros_like`` of a parameter for
an identity transform's log-Jacobian, a constant turned into a tensor.  The TorchScript interpreter pays about half
a microsecond per operation, so these cost real time on a small model (benchmarks/RESULTS.md, "NUTS speed").
:func:`fold_constants` evaluates, once, every operation whose inputs are constants (and the tensor creators whose
value follows from a shape: ``zeros_like``, ``new_zeros``, ``ones_like``, ``full_like``, ...), stores the result on
the graph module, and drops additions of zeros and multiplications by ones where that changes neither shape nor
dtype.  Random and in-place operations are never folded.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def f(x):
...     scale = torch.full((3,), 2.0)
...     return (x - torch.zeros_like(x)) / scale + torch.log(scale)
>>> gm = make_fx(f)(torch.randn(3))
>>> operations(gm), operations(fold_constants(gm))  # full, zeros_like, sub and log go; div and add stay
(6, 2)
>>> x = torch.randn(3)
>>> bool(torch.allclose(gm(x), f(x)))
True
"""

from __future__ import annotations

import torch
import torch.fx as fx

__all__ = ["fold_constants", "operations"]

_aten = torch.ops.aten
#: Creators whose value is fixed by the output's shape and dtype (and, for full, the fill value).
_ZEROS = {_aten.zeros_like.default, _aten.new_zeros.default, _aten.zeros.default}
_ONES = {_aten.ones_like.default, _aten.new_ones.default, _aten.ones.default}
_FULL = {_aten.full_like.default: 1, _aten.new_full.default: 2, _aten.full.default: 1}
#: Words in an operation's name that mark it random, uninitialised or in place: never folded.
_UNSAFE = ("rand", "normal", "bernoulli", "multinomial", "uniform", "exponential", "poisson", "empty", "dropout",
           "copy_", "fill_", "zero_", "set_")
#: A folded constant is kept on the module: no larger than this many elements.
_MAX_ELEMENTS = 1 << 20


def operations(gm: fx.GraphModule) -> int:
    """The number of operations (``call_function`` nodes) in ``gm``'s graph."""
    return sum(node.op == "call_function" for node in gm.graph.nodes)


def _safe(target) -> bool:
    """An ATen operation that is neither random, uninitialised nor in place."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    name = target.__name__  # e.g. "add.Tensor", "add_.Tensor"
    return not any(word in name for word in _UNSAFE) and not name.split(".")[0].endswith("_")


def _value(node: fx.Node, known: dict):
    """The constant value of ``node``, or None."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not _safe(node.target):
        return None
    shape, dtype = tuple(val.shape), val.dtype
    if node.target in _ZEROS:
        return torch.zeros(shape, dtype=dtype)
    if node.target in _ONES:
        return torch.ones(shape, dtype=dtype)
    if node.target in _FULL:
        fill = node.args[_FULL[node.target]]
        return None if isinstance(fill, fx.Node) else torch.full(shape, fill, dtype=dtype)
    inputs = [a for a in node.all_input_nodes]
    if any(a not in known for a in inputs):
        return None
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: known[a])
    out = node.target(*args, **kwargs)
    if not isinstance(out, torch.Tensor) or out.shape != val.shape or out.dtype != dtype:
        return None
    return out.clone()


def _is(known: dict, node, fill: float) -> bool:
    return isinstance(node, fx.Node) and node in known and bool((known[node] == fill).all())


def _same_meta(a: fx.Node, b) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val") if isinstance(b, fx.Node) else None
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.shape == vb.shape
            and va.dtype == vb.dtype)


def _identity_operand(node: fx.Node, known: dict):
    """The operand ``node`` equals (x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, x ** 1), or None."""
    t, args = node.target, node.args
    if len(args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    a, b = args
    if t in (_aten.add.Tensor, _aten.sub.Tensor) and _is(known, b, 0.0):
        return a
    if t is _aten.add.Tensor and _is(known, a, 0.0):
        return b
    if t in (_aten.mul.Tensor, _aten.div.Tensor) and _is(known, b, 1.0):
        return a
    if t is _aten.mul.Tensor and _is(known, a, 1.0):
        return b
    if t in (_aten.pow.Tensor_Scalar, _aten.mul.Scalar, _aten.div.Scalar) and not isinstance(b, fx.Node) and b == 1:
        return a
    return None


def fold_constants(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with its constant operations evaluated once and its identities removed (in place; returned).
    The inputs (placeholders) and outputs keep their order; where nothing folds the graph is unchanged."""
    known: dict = {}
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if isinstance(value, torch.Tensor):
                known[node] = value
            continue
        if node.op != "call_function":
            continue
        same = _identity_operand(node, known)
        if same is not None and _same_meta(node, same):
            node.replace_all_uses_with(same)
            continue
        value = _value(node, known)
        if value is None or value.numel() > _MAX_ELEMENTS:
            continue
        name = f"_folded_{len(known)}"
        gm.register_buffer(name, value)
        with graph.inserting_before(node):
            constant = graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant)
        known[constant] = value
    graph.eliminate_dead_code()
    graph.lint()
    gm.recompile()
    return gm
