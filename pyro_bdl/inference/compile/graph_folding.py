r"""Constant folding and simplification of a traced ``torch.fx`` graph: what the traced sampler step need not redo.

A model's potential traced to ATen operations (:func:`~pyro_bdl.inference.compile.aten_trace.trace_aten`) keeps every
operation Pyro ran, including those whose values are fixed once the shapes are: the log of a constant noise scale
broadcast to every row, ``zeros_like`` of a parameter for an identity transform's log-Jacobian, a constant turned
into a tensor.  Whatever runs the traced step pays for
every operation, so these cost real time on a small model (benchmarks/history/nuts_speed.md, "NUTS speed").
:func:`fold_constants` evaluates, once, every operation whose inputs are constants (and the tensor creators whose
value follows from a shape: ``zeros_like``, ``new_zeros``, ``ones_like``, ``full_like``, ...), stores the result on
the graph module, and drops additions of zeros and multiplications by ones where that changes neither shape nor
dtype.  Random and in-place operations are never folded.

:func:`simplify` then makes the remaining operations fewer and cheaper for the same values: a Python number
operand becomes a 0-dim tensor of the operand's dtype (a number is wrapped and cast at every call, which costs
more than the operation), ``x ** 2`` becomes ``x * x``, the gradient of a flat vector read in slices becomes one
``cat`` instead of a zero tensor per slice added up, sums over size-1 dimensions and reshapes that give back their
source go, a repeated operation is computed once (benchmarks/history/nuts_speed.md, "static runtime"), and additions and
``isnan`` take the equivalent forms that the static runtime runs with reused output buffers.

Example
-------
>>> import torch
>>> from pyro_bdl.inference.compile.aten_trace import trace_aten
>>> def f(x):
...     scale = torch.full((3,), 2.0)
...     return (x - torch.zeros_like(x)) / scale + torch.log(scale)
>>> gm = trace_aten(f, torch.randn(3))
>>> operations(gm), operations(fold_constants(gm))  # full, zeros_like, sub and log go; div and add stay
(6, 2)
>>> x = torch.randn(3)
>>> bool(torch.allclose(gm(x), f(x)))
True
>>> g = trace_aten(lambda x: (x * 0.5) ** 2 + (x * 0.5) ** 2, x)
>>> operations(g), operations(simplify(g))  # one product by a 0-dim tensor, one square, one sum
(5, 3)
"""

from __future__ import annotations

import torch
import torch.fx as fx

__all__ = ["fold_constants", "simplify", "operations"]

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
    # the traced values are meta tensors (shapes only); folding computes real ones, on the CPU: the traced runtimes
    # run there alone (Fusion.fuse runs an accelerator's steps op by op)
    shape, like = tuple(val.shape), {"dtype": val.dtype, "device": "cpu"}
    if node.target in _ZEROS:
        return torch.zeros(shape, **like)
    if node.target in _ONES:
        return torch.ones(shape, **like)
    if node.target in _FULL:
        fill = node.args[_FULL[node.target]]
        return None if isinstance(fill, fx.Node) else torch.full(shape, fill, **like)
    inputs = [a for a in node.all_input_nodes]
    if any(a not in known for a in inputs):
        return None
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: known[a])
    out = node.target(*args, **kwargs)
    if not isinstance(out, torch.Tensor) or out.shape != val.shape or out.dtype != val.dtype:
        return None
    return out.clone()


def _is(known: dict, node, fill: float) -> bool:
    return isinstance(node, fx.Node) and node in known and bool((known[node] == fill).all())


def _same_meta(a: fx.Node, b) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val") if isinstance(b, fx.Node) else None
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.shape == vb.shape
            and va.dtype == vb.dtype)


def _all(known: dict, node, truth: bool) -> bool:
    """Whether ``node`` is a known boolean constant, all ``truth`` (an integer's ones are no mask: x & 1 is not x)."""
    return _is(known, node, truth) and known[node].dtype == torch.bool


def _identity_operand(node: fx.Node, known: dict):
    """The operand ``node`` equals (x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, x ** 1; where(true, x, y) and
    where(false, y, x); x & true, true & x, x | false, false | x; ``detach(x)``: the graph runs without autograd),
    or None."""
    t, args = node.target, node.args
    if t is _aten.detach.default:
        return args[0]
    if t is _aten.where.self and len(args) == 3 and not node.kwargs:
        return args[1] if _all(known, args[0], True) else args[2] if _all(known, args[0], False) else None
    if len(args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    a, b = args
    if t in (_aten.bitwise_and.Tensor, _aten.logical_and.default):
        return a if _all(known, b, True) else b if _all(known, a, True) else None
    if t in (_aten.bitwise_or.Tensor, _aten.logical_or.default):
        return a if _all(known, b, False) else b if _all(known, a, False) else None
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
    _fold(gm)
    gm.graph.lint()
    gm.recompile()
    return gm


def _written(graph: fx.Graph) -> set:
    """The nodes whose tensors an in-place operation writes into, with every view of them and every tensor they
    view: none may be folded into a buffer, or the write would change it for every later call (capture-recapture's
    ``mask |= captured``, on a mask made by ``zeros``, made the second chain start from the first chain's mask)."""
    written, views = set(), {}
    for node in graph.nodes:
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
            continue
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        schema = getattr(node.target, "_schema", None)
        writes = (name.endswith("_") and not name.startswith("_")) or (schema is not None and any(
            a.alias_info is not None and a.alias_info.is_write for a in schema.arguments))
        if writes:
            written.add(node.args[0])
        elif _aliases(node.target):  # a view: one tensor with its input
            views.setdefault(node, set()).add(node.args[0])
            views.setdefault(node.args[0], set()).add(node)
    frontier = list(written)
    while frontier:
        for other in views.get(frontier.pop(), ()):
            if other not in written:
                written.add(other)
                frontier.append(other)
    return written


def _fold(gm: fx.GraphModule) -> None:
    """:func:`fold_constants` on the graph, without generating ``gm``'s code (``simplify`` generates it once)."""
    known: dict = {}
    graph = gm.graph
    written = _written(graph)
    for node in list(graph.nodes):
        if node in written:
            continue
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


# --- simplification: fewer and cheaper operations, same values -------------------------------------------------

#: Binary operations whose Python-number operand becomes a 0-dim tensor of the result's dtype.
_BINARY = {_aten.add.Tensor: _aten.add.Tensor, _aten.sub.Tensor: _aten.sub.Tensor, _aten.mul.Tensor: _aten.mul.Tensor,
           _aten.div.Tensor: _aten.div.Tensor, _aten.add.Scalar: _aten.add.Tensor, _aten.sub.Scalar: _aten.sub.Tensor,
           _aten.mul.Scalar: _aten.mul.Tensor, _aten.div.Scalar: _aten.div.Tensor}
#: Comparisons with a number: the number becomes a 0-dim tensor of the compared tensor's dtype.
_COMPARE = {_aten.lt.Scalar: _aten.lt.Tensor, _aten.le.Scalar: _aten.le.Tensor, _aten.gt.Scalar: _aten.gt.Tensor,
            _aten.ge.Scalar: _aten.ge.Tensor, _aten.eq.Scalar: _aten.eq.Tensor, _aten.ne.Scalar: _aten.ne.Tensor}
#: Operations that only reshape (their output is a view of their first input).
_VIEWS = {_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default, _aten.expand.default,
          _aten.unsqueeze.default, _aten.squeeze.dim, _aten.squeeze.dims, _aten.squeeze.default, _aten.alias.default}


def _meta(node):
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _constant(gm: fx.GraphModule, value: float, dtype: torch.dtype) -> fx.Node:
    """A 0-dim tensor constant on ``gm``, one node per value and dtype, placed before the first operation."""
    spelled = repr(value).replace(".", "p").replace("-", "m").replace("+", "")  # an identifier: 0.5 -> 0p5
    key = f"_scalar_{str(dtype).split('.')[-1]}_{spelled}"
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target == key:
            return node
    gm.register_buffer(key, torch.tensor(value, dtype=dtype, device="cpu"))  # 0-dim: combines with any device
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    with gm.graph.inserting_before(first):
        node = gm.graph.get_attr(key)
    node.meta["val"] = gm._buffers[key]
    return node


def _scalars_as_tensors(gm: fx.GraphModule) -> None:
    """``x * 0.5`` -> ``x * c`` with ``c`` a 0-dim tensor of x's dtype, likewise +, -, /, comparisons, clamps and
    masked fills: a Python number is wrapped and cast at every call (benchmarks/history/nuts_speed.md, "static
    runtime"); ``x ** 2`` -> ``x * x``; a masked fill -> ``where`` (where no view, write or output depends on its
    strides, or every operand is contiguous and of its shape)."""
    for node in list(gm.graph.nodes):
        out = _meta(node)
        if node.op != "call_function" or out is None:
            continue
        t, args = node.target, list(node.args)
        if t is _aten.pow.Tensor_Scalar and args[1] == 2 and _meta(args[0]) is not None \
                and _meta(args[0]).dtype == out.dtype:
            node.target, node.args = _aten.mul.Tensor, (args[0], args[0])
            continue
        if t in _BINARY and out.is_floating_point() and len(args) == 2 and node.kwargs.get("alpha", 1) == 1:
            numbers = [i for i, a in enumerate(args) if isinstance(a, (int, float)) and not isinstance(a, bool)]
            tensors = [a for a in args if _meta(a) is not None]
            if len(numbers) == 1 and len(tensors) == 1 and _meta(tensors[0]).dtype == out.dtype:
                i = numbers[0]
                args[i] = _constant(gm, float(args[i]), out.dtype)
                node.target, node.args = _BINARY[t], tuple(args)
            continue
        if t in _COMPARE and _meta(args[0]) is not None and _meta(args[0]).is_floating_point() \
                and isinstance(args[1], (int, float)) and not isinstance(args[1], bool):
            args[1] = _constant(gm, float(args[1]), _meta(args[0]).dtype)
            node.target, node.args = _COMPARE[t], tuple(args)
            continue
        if t is _aten.clamp.default and out.is_floating_point() and len(args) in (2, 3) and not node.kwargs:
            low, high = (args + [None])[1:3]
            numbers = [v for v in (low, high) if v is not None]
            if len(numbers) == 1 and isinstance(numbers[0], (int, float)):
                bound = _constant(gm, float(numbers[0]), out.dtype)
                node.target = _aten.clamp_min.Tensor if low is not None else _aten.clamp_max.Tensor
                node.args = (args[0], bound)
            continue
        if t is _aten.masked_fill.Scalar and out.is_floating_point() and isinstance(args[2], (int, float)):
            node.target, node.args = _aten.masked_fill.Tensor, (args[0], args[1],
                                                                _constant(gm, float(args[2]), out.dtype))
            t, args = node.target, list(node.args)
        if t is _aten.masked_fill.Tensor and _meta(args[0]) is not None and _meta(args[2]) is not None \
                and _meta(args[2]).dtype == _meta(args[0]).dtype == out.dtype \
                and (not _strided(node) or _contiguous_like(out, args[0], args[1])):
            node.target, node.args = _aten.where.self, (args[1], args[2], args[0])  # cheaper: RESULTS, "a draw's start"


def _contiguous_like(out, *nodes) -> bool:
    """Whether ``out`` and every one of ``nodes`` is contiguous and of ``out``'s shape: an elementwise operation
    on them gives ``out``'s strides whatever it is, so a view of its result sees the same layout."""
    metas = [_meta(node) for node in nodes]
    return out.is_contiguous() and all(m is not None and m.shape == out.shape and m.is_contiguous() for m in metas)


def _aliases(target) -> bool:
    """An operation whose output is a view of an input or which writes into one (``view``, ``add_``, ...)."""
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns) or any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


#: In-place operations whose out-of-place form :func:`_out_of_place` may use.
_WRITES = {"masked_fill_", "add_", "sub_", "mul_", "div_", "clamp_", "clamp_min_", "clamp_max_", "neg_", "exp_",
           "log_", "where_"}


def _strided(node: fx.Node) -> bool:
    """Whether something depends on ``node``'s strides: a view of it, a write into it, or the graph's output (the
    next call may take it back as an input, whose views were traced on these strides)."""
    return any(user.op == "output" or (user.op == "call_function" and _aliases(user.target)) for user in node.users)


def _out_of_place(gm: fx.GraphModule) -> bool:
    """In-place operations on a fresh result nothing reads later (Pyro's ``masked_fill_`` of a log-density) ->
    their out-of-place forms, and ``empty_like(x).fill_(v)`` -> ``full_like(x, v)``.  -> whether the graph is
    free of in-place operations."""
    pure = True
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        packet, overload = node.target.__name__.split(".")[0], node.target._overloadname
        if not packet.endswith("_") or packet.startswith("_"):
            continue
        target = node.args[0] if node.args else None
        # fresh: a result that is no view, read before the write only (as autograd's saved copy of it is)
        fresh = (isinstance(target, fx.Node) and target.op == "call_function" and not _aliases(target.target)
                 and all(user is node or order[user] < order[node] for user in target.users))
        if fresh and packet == "fill_" and overload == "Scalar" and target.target is _aten.empty_like.default:
            node.target, node.args, node.kwargs = _aten.full_like.default, (target.args[0], node.args[1]), \
                dict(target.kwargs)
            continue
        functional = getattr(getattr(_aten, packet[:-1], None), overload, None)
        if packet not in _WRITES or functional is None or not fresh:
            pure = False
            continue
        node.target = functional
    return pure


def _singleton_sums_as_views(graph: fx.Graph) -> None:
    """A sum over dimensions of size 1 (a log-density summed over an event of one value) -> a view."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _aten.sum.dim_IntList or node.kwargs:
            continue
        x, dims = node.args[:2]
        val, out = _meta(x), _meta(node)
        if val is None or out is None or val.dtype != out.dtype or not dims or len(node.args) > 3:
            continue
        if all(val.shape[d] == 1 for d in dims) and not _strided(node):
            try:
                meta = val.view(list(out.shape))
            except Exception:  # noqa: BLE001 - a shape view cannot give: leave the sum
                continue
            with graph.inserting_before(node):
                new = graph.call_function(_aten.view.default, (x, list(out.shape)))
            new.meta = {**node.meta, "val": meta}
            node.replace_all_uses_with(new)


def _drop_identity_views(graph: fx.Graph) -> None:
    """A chain of reshapes that gives back its source's shape -> the source, e.g. ``unsqueeze`` then a view
    back, or an ``expand`` to the same shape (where no later view or write depends on the chain's strides)."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _VIEWS:
            continue
        out = _meta(node)
        strided = _strided(node)
        source = node.args[0]
        while out is not None and isinstance(source, fx.Node):
            val = _meta(source)
            if val is not None and val.shape == out.shape and val.dtype == out.dtype \
                    and (val.stride() == out.stride() or not strided):
                node.replace_all_uses_with(source)
                break
            if source.op != "call_function" or source.target not in _VIEWS:
                break
            source = source.args[0]


def _buffered_forms(graph: fx.Graph) -> None:
    """Operations the static runtime of torch 2.13 runs without a reused output buffer, as equivalents it runs
    with one (benchmarks/history/nuts_speed.md, "a third of the time"), bit for bit the same values:

    - ``add(a, b, alpha=k)`` -> ``sub(a, b, alpha=-k)``: ATen's ``sub`` is its ``add`` kernel with alpha negated.
      ``b`` may be a Python number; ``sub`` refuses booleans, so additions with a boolean stay;
    - ``isnan(x)`` -> ``x != x``.
    """
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is _aten.isnan.default and len(node.args) == 1 and not node.kwargs:
            node.target, node.args = _aten.ne.Tensor, (node.args[0], node.args[0])
            continue
        if node.target is not _aten.add.Tensor or len(node.args) != 2:
            continue
        a, b = _meta(node.args[0]), node.args[1]
        b = _meta(b) if isinstance(b, fx.Node) else (b if type(b) in (int, float) else None)
        alpha = node.kwargs.get("alpha", 1)
        if a is None or b is None or torch.bool in (a.dtype, getattr(b, "dtype", None)) \
                or type(alpha) not in (int, float):
            continue
        node.target, node.kwargs = _aten.sub.Tensor, {"alpha": -alpha}


def _slice_sums_as_cat(gm: fx.GraphModule) -> None:
    """The gradient of a flat vector read in slices, ``slice_backward(g1, ...) + slice_backward(g2, ...) + ...``
    (each a zero tensor with one slice filled), -> ``cat([g1, g2, ...])``, zeros where no slice covers."""
    graph = gm.graph
    pieces: dict = {}  # node -> (sizes, dim, [(start, end, source)])
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is _aten.slice_backward.default:
            grad, sizes, dim, start, end, step = node.args
            sizes = list(sizes)
            dim = dim % len(sizes)
            start, end = max(start if start >= 0 else start + sizes[dim], 0), min(end, sizes[dim])
            if step == 1 and _meta(grad) is not None and _meta(node) is not None \
                    and _meta(grad).shape[dim] == end - start and _meta(grad).dtype == _meta(node).dtype:
                pieces[node] = (sizes, dim, [(start, end, grad)])
        elif node.target is _aten.add.Tensor and not node.kwargs and len(node.args) == 2 \
                and all(a in pieces for a in node.args):
            (sa, da, pa), (sb, db, pb) = pieces[node.args[0]], pieces[node.args[1]]
            spans = sorted(pa + pb, key=lambda p: p[0])
            if sa == sb and da == db and all(a[1] <= b[0] for a, b in zip(spans, spans[1:])):
                pieces[node] = (sa, da, spans)
    for node, (sizes, dim, spans) in pieces.items():
        if len(spans) < 2 or all(user in pieces for user in node.users) or _meta(node) is None:
            continue
        dtype, parts, at = _meta(node).dtype, [], 0
        for start, end, source in spans + [(sizes[dim], sizes[dim], None)]:
            if start > at:  # a gap no slice covers: zeros
                shape = list(sizes)
                shape[dim] = start - at
                name = f"_gap_{len(gm._buffers)}"
                gm.register_buffer(name, torch.zeros(shape, dtype=dtype))
                with graph.inserting_before(node):
                    parts.append(graph.get_attr(name))
            if source is not None:
                parts.append(source)
            at = end
        with graph.inserting_before(node):
            cat = graph.call_function(_aten.cat.default, (parts, dim))
        cat.meta = dict(node.meta)
        node.replace_all_uses_with(cat)


def _common_subexpressions(graph: fx.Graph) -> None:
    """The same (non-random, not in-place) operation on the same inputs, computed once."""
    seen: dict = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or not _safe(node.target):
            continue
        try:
            key = (node.target, repr(node.args), repr(sorted(node.kwargs.items())))
        except Exception:  # noqa: BLE001
            continue
        if key in seen:
            node.replace_all_uses_with(seen[key])
        else:
            seen[key] = node


def simplify(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with cheaper operations for the same values (in place; returned): Python numbers as tensors,
    sums over size-1 dimensions and reshapes that change nothing removed, a flat vector's slice gradients
    concatenated, common subexpressions computed once (benchmarks/history/nuts_speed.md, "static runtime"), additions
    and ``isnan`` in the forms the static runtime runs with reused buffers (:func:`_buffered_forms`)."""
    pure = _out_of_place(gm)
    _fold(gm)  # what writing out of place made constant (a full_like)
    _scalars_as_tensors(gm)
    _slice_sums_as_cat(gm)
    if pure:  # with no writes into tensors, values alone decide what may be shared
        _singleton_sums_as_views(gm.graph)
        _drop_identity_views(gm.graph)
        _common_subexpressions(gm.graph)
    _buffered_forms(gm.graph)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return gm
