r"""A function as one ``torch.fx`` graph of the ATen operations it runs on real values, without ``torch._dynamo``.

:func:`trace_aten` runs ``function(*args)`` once under a ``TorchDispatchMode`` that writes every ATen operation
reaching the dispatcher into a graph, forward and backward alike (``torch.autograd.grad`` and ``torch.func.vmap``
inside the function are recorded as the operations they run).  It gives the graph ``make_fx`` gives on real values
(placeholders for the arguments, ``get_attr`` buffers for tensors made outside the function, ``meta["val"]`` with
each result's shape, strides and dtype, on the meta device) but imports neither ``torch._dynamo`` nor
``torch._inductor``, which ``make_fx`` does (seconds, once per process: the larger part of a short NUTS fit in a
fresh process; benchmarks/history/nuts_speed.md, "without torch._dynamo").

What it records is what ran: a Python branch on a value, or a number read from a tensor (``.item()``), is taken
as it was at the trace, as with ``make_fx``.  A tensor that reaches an operation and is neither an argument nor a
recorded result becomes a constant of the graph (a copy of its value), unless it shares memory with an argument or
a result: such a tensor was made from a traced value outside torch's operations (``torch.from_numpy(x.numpy())``),
and would be wrong as a constant, so the trace fails with a ``RuntimeError`` (where ``make_fx`` keeps the value).

Example
-------
>>> import torch
>>> def value_and_grad(x):
...     x = x.detach().requires_grad_()
...     with torch.enable_grad():
...         u = (x.sin() * 2.0).sum()
...         g, = torch.autograd.grad(u, x)
...     return u.detach(), g
>>> gm = trace_aten(value_and_grad, torch.randn(3))
>>> y = torch.randn(3)
>>> u, g = gm(y)
>>> bool(torch.allclose(g, 2.0 * y.cos())), bool(torch.allclose(u, (2.0 * y.sin()).sum()))
(True, True)
"""

from __future__ import annotations

import operator
import weakref

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

__all__ = ["trace_aten"]

try:  # code generated at the first call (or ``.code``), not at each of the changes the graph goes through before
    from torch.fx._lazy_graph_module import _LazyGraphModule as _GraphModule
except ImportError:  # an older torch: generated at each change (slower, the same graph)
    _GraphModule = fx.GraphModule


def trace_aten(function, *args) -> fx.GraphModule:
    """``function(*args)`` (tensors in, a tensor or a tuple of tensors out) as a graph module of ATen operations
    with one input per argument; see the module docstring.  The module generates its Python code when first called
    (or its ``code`` is read), not at each ``recompile()``, where torch can (``torch.fx``'s lazy graph module): the
    sampler's steps change their graphs five or six times before running them (benchmarks/history/nuts_speed.md,
    "without torch._dynamo")."""
    recorder = _Recorder()
    for i, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            raise TypeError(f"trace_aten takes tensors only; argument {i} is {type(arg).__name__}")
        recorder.bind(arg, recorder.graph.placeholder(f"arg{i}"))
    with recorder:
        out = function(*args)
    single = isinstance(out, torch.Tensor)
    outs = (out,) if single else tuple(out)
    if not all(isinstance(t, torch.Tensor) for t in outs):
        raise TypeError("trace_aten: the function must return a tensor or a tuple of tensors")
    nodes = tuple(recorder.node_of(t) for t in outs)
    recorder.graph.output(nodes[0] if single else nodes)
    recorder.graph.eliminate_dead_code()
    return _GraphModule(recorder.root, recorder.graph)


class _Recorder(TorchDispatchMode):
    """Writes each ATen call into :attr:`graph`; a tensor is found by object.

    Tensors are held by weak references: a strong one would make autograd and the factories copy the tensors they
    wrap (one ``detach`` each, recorded; ``make_fx`` holds weak ones too).  Their storages are held, so that no
    later tensor reuses a recorded result's memory while the trace runs."""

    def __init__(self):
        super().__init__()
        self.graph = fx.Graph()
        self.root = torch.nn.Module()
        self._by_id: dict = {}  # id(tensor) -> (weak reference, node)
        self._memory: dict = {}  # storage address -> the storage, of the arguments and results
        self._constants = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch (2.5+) otherwise wraps __torch_dispatch__ in torch._dynamo.disable, which imports torch._dynamo;
        # nothing here is ever compiled
        return False

    def bind(self, tensor: torch.Tensor, node: fx.Node) -> None:
        self._by_id[id(tensor)] = (weakref.ref(tensor), node)
        if node.op != "get_attr":
            storage = tensor.untyped_storage()
            self._memory[storage.data_ptr()] = storage
        node.meta["val"] = _meta_like(tensor)

    def node_of(self, tensor: torch.Tensor) -> fx.Node:
        entry = self._by_id.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        if tensor.numel() and tensor.untyped_storage().data_ptr() in self._memory:
            raise RuntimeError("a tensor made from a traced value outside torch's operations (numpy, a raw pointer) "
                               "reaches an operation: it cannot be traced as a constant")
        return self._constant(tensor)

    def _constant(self, tensor: torch.Tensor) -> fx.Node:
        name = f"_tensor_constant{self._constants}"
        self._constants += 1
        with torch.no_grad():
            self.root.register_buffer(name, tensor.detach().clone())
        node = self.graph.get_attr(name)
        self.bind(tensor, node)
        return node

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not _has_tensor(out):  # a number read into Python (.item()): taken as it is, as make_fx does
            return out
        node_args, node_kwargs = tree_map(self._as_node, (args, kwargs))
        node = self.graph.call_function(func, tuple(node_args), dict(node_kwargs))
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        else:
            node.meta["val"] = tree_map(lambda t: _meta_like(t) if isinstance(t, torch.Tensor) else t, out)
            for i, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    self.bind(t, self.graph.call_function(operator.getitem, (node, i)))
        return out

    def _as_node(self, value):
        return self.node_of(value) if isinstance(value, torch.Tensor) else value


def _has_tensor(out) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    return isinstance(out, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in out)


def _meta_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(tensor.shape), tuple(tensor.stride()), dtype=tensor.dtype, device="meta")
