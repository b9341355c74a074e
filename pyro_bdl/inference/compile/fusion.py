r"""A step function fused with a traced graph it calls: one function, run traced or compiled by inductor.

A step ``step(grad_and_value, *args)`` (tensors in, a tuple of tensors out, no Python branching on values) calls
a function that has been traced to a graph ``(x, *tensors) -> outputs`` (by
:func:`~pyro_bdl.inference.compile.fastest.fastest`).  :func:`fuse` traces the step with that graph spliced in
where the step calls it (:func:`traced_with`: the graph's nodes copied in, not traced again) and runs the whole as
one function of ``(*args, *tensors)``: traced (the static runtime,
:func:`~pyro_bdl.inference.compile.static_runtime.script`), or compiled by inductor directly on the traced graph
(``compile=True``: no dynamo guards at each call, no stride checks where every input is contiguous, and found again
in inductor's on-disk cache by a later process).  The fused function is checked against the step calling the graph;
where fusing fails, it warns (:class:`~pyro_bdl.inference.compile.fastest.PotentialCompileWarning`) and gives None.

:class:`Fusion` keeps one graph's fused steps (and their traces, which forms of a step that fix other arguments
share), so that whoever keeps it beside the graph's owner reuses them.

Example
-------
>>> import torch
>>> from pyro_bdl.inference.compile.aten_trace import trace_aten
>>> def value_and_grad(x, scale):  # the traced function: (x, *tensors) -> (grad, value)
...     return 2 * scale * x, scale * (x * x).sum(-1)
>>> x, scale = torch.randn(3, 2), torch.tensor(1.5)
>>> graph = trace_aten(value_and_grad, x, scale)
>>> def step(grad_and_value, z, r):  # a leapfrog step
...     r = r - 0.05 * grad_and_value(z)[0]
...     z = z + 0.1 * r
...     g, u = grad_and_value(z)
...     return z, r - 0.05 * g, u
>>> fusion = Fusion(graph)
>>> run = fusion.fuse("leapfrog", step, (x, x), (scale,), eager=value_and_grad, compile=False)
>>> z, r, u = run(x, x, scale)
>>> bool(torch.allclose(u, step(lambda z: value_and_grad(z, scale), x, x)[2]))
True
>>> len(fusion.steps), len(fusion.traces)
(1, 1)
"""

from __future__ import annotations

import contextlib
import copy
import functools
import warnings

import torch

from pyro_bdl.inference.compile.aten_trace import trace_aten
from pyro_bdl.inference.compile.fastest import PotentialCompileWarning, check_same, fell_back, torch_quietly
from pyro_bdl.inference.compile.static_runtime import script

__all__ = ["Fusion", "fuse", "traced_with", "contiguous_tensors", "inductor"]


def contiguous_tensors(tensors: tuple) -> tuple:
    """``tensors``, each made contiguous where it is not (as the compiled steps take them: :func:`inductor`)."""
    return tuple(t if t.is_contiguous() else t.contiguous() for t in tensors)


class Fusion:
    """The steps fused with one traced graph ``(x, *tensors) -> outputs`` (None: the function did not trace, every
    step runs unfused), kept: ``steps`` (key, compile) -> the fused function of ``(*args, *tensors)``, or None where
    fusing failed (warned once); ``traces`` (step, argument shapes and dtypes) -> the step traced with the graph."""

    def __init__(self, graph: torch.fx.GraphModule | None):
        self.graph = graph
        self.steps = {}
        self.traces = {}
        self.fallbacks: list[str] = []  # why a step runs slower than fused (each message once)

    def fuse(self, key, step, example: tuple, tensors: tuple, *, eager, compile: bool, fixed: dict | None = None,
             stacklevel: int = 1):
        """``step`` fused with the graph as a function ``(*args, *tensors) -> tuple``, found again by ``(key,
        compile)`` (``key`` names the step and the shapes of its arguments); see :func:`fuse` for ``example``,
        ``tensors`` (contiguous: :func:`contiguous_tensors`), ``compile`` and ``fixed``.  Where fusing fails (or
        the graph is None), ``step`` runs on ``eager`` (the function the graph was traced from, ``(x, *tensors) ->
        outputs``), op by op; where only the compiled form fails (inductor's result disagrees or it cannot compile),
        the traced one runs, as :func:`~pyro_bdl.inference.compile.fastest.fastest` does for a potential (benchmarks/
        RESULTS.md, "UCI networks: the compiled leaf had been refused").  ``stacklevel``:
        the frame a warning names, 1 for the caller of this method."""
        if any(t.device.type != "cpu" for t in (*example, *tensors)):
            # the traced runtimes (the static runtime, inductor on a folded graph) are the CPU's speed path, where
            # Python's overhead per operation dominates; on an accelerator the steps run op by op
            return _unfused(step, eager, len(example))
        cache_key = (key, compile)
        if cache_key not in self.steps:
            self.steps[cache_key] = None if self.graph is None else fuse(
                step, self.graph, example, tensors, compile=compile, fixed=fixed, trace=self._trace,
                stacklevel=stacklevel + 1, notes=self.fallbacks)
        fused = self.steps[cache_key]
        if fused is None and compile and self.graph is not None:
            return self.fuse(key, step, example, tensors, eager=eager, compile=False, fixed=fixed,
                             stacklevel=stacklevel + 1)
        return _unfused(step, eager, len(example)) if fused is None else fused

    def _trace(self, step, example, tensors) -> torch.fx.GraphModule:
        """:func:`traced_with` of ``step`` on ``example`` and ``tensors``, the trace kept for forms of the same step
        that fix other arguments (a copy: what runs it changes it)."""
        key = (step, tuple((tuple(t.shape), t.dtype) for t in (*example, *tensors)))
        if key not in self.traces:
            self.traces[key] = traced_with(step, self.graph, example, tensors)
        return copy.deepcopy(self.traces[key])


def _unfused(step, eager, n: int):
    """``step`` calling ``eager`` op by op, as a function of ``(*args, *tensors)`` (``n`` arguments)."""
    def unfused(*args):
        return step(lambda theta: eager(theta, *args[n:]), *args[:n])

    return unfused


def fuse(step, graph: torch.fx.GraphModule, example: tuple, tensors: tuple, *, compile: bool,
         fixed: dict | None = None, trace=None, stacklevel: int = 1, notes: list | None = None):
    """``step(grad_and_value, *args)`` with ``graph`` (``(x, *tensors) -> (grad, value)``) spliced in where it calls
    ``grad_and_value``, as one function ``fused(*args, *tensors) -> tuple``: run traced (the static runtime), or
    compiled by inductor (``compile=True``; seconds); None, with one warning, where that fails.

    ``example``: arguments of the shapes it will be called with, and, where they are contiguous, of their strides
    (the compiled form does not check them at each call: :func:`inductor`); ``tensors``: the graph's other inputs.
    ``fixed``: argument index -> the value that argument always has in the calls of this form: the graph computes
    with it as a constant (folded where it decides a selection), the argument is still passed and not read.
    ``trace``: how to trace (``trace(step, example, tensors)``, :meth:`Fusion._trace` keeps the traces), else
    :func:`traced_with`.  ``stacklevel``: the frame the warning names, 1 for the caller of this function."""
    n, fixed = len(example), fixed or {}
    example = tuple(fixed.get(i, a) for i, a in enumerate(example))

    def inlined(*args):
        return step(lambda theta: graph(theta, *args[n:]), *args[:n])

    is_contiguous = all(t.is_contiguous() for t in (*example, *tensors))
    # tracers follow tensors by identity: one object passed as two arguments would become one input
    example, tensors = tuple(t.clone() for t in example), tuple(t.clone() for t in tensors)
    try:
        reference = inlined(*example, *tensors)
        fused = _fix_inputs((trace or traced_with)(step, example, tensors), fixed)
        if compile:  # inductor on the traced graph directly: no dynamo guards to check at every call
            runner = inductor(fused, (*example, *tensors), is_contiguous)
        else:  # constants evaluated once, cheaper operations, the static runtime (benchmarks/history/nuts_speed.md)
            runner = script(fused, (*example, *tensors))
        check_same(runner(*example, *tensors), reference)
        return runner
    except Exception as error:  # noqa: BLE001 - the step still runs: traced (Fusion.fuse) or op by op
        how = ("did not compile fused with the model's potential and runs traced instead" if compile else
               "did not fuse with the model's potential and runs op by op")
        fell_back(notes, f"the sampler's step {how} (slower): {type(error).__name__}: {str(error)[:300]}",
                  stacklevel=stacklevel + 1)
        return None


def _shape_env_context():
    """A tracing context holding a fake mode with a shape environment, as ``torch.compile`` gives inductor, for
    :func:`_cached_compile`; a null context on a torch without these APIs (the work is then slower, not wrong)."""
    try:
        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        return tracing(TracingContext(FakeTensorMode(shape_env=ShapeEnv())))
    except (ImportError, TypeError):
        return contextlib.nullcontext()


def traced_with(step, graph: torch.fx.GraphModule, example: tuple, tensors: tuple) -> torch.fx.GraphModule:
    """``step(grad_and_value, *example)`` as one graph of ``(*example, *tensors)`` in which every call of
    ``grad_and_value`` is a copy of ``graph``'s nodes (a graph of ``(theta, *tensors) -> (grad, value)``).

    The step is traced with the results of its calls as stand-in inputs and the points it evaluates at as extra
    outputs; the graph's nodes are then copied in right after each point (they read nothing else of the step, and
    the step reads the results only after the point), instead of tracing its hundred-odd operations again (the
    larger part of a leaf's trace)."""
    n = len(example)
    points = []

    def probe(theta):
        points.append(theta)
        return graph(theta, *tensors)

    single = not isinstance(step(probe, *example), tuple)
    stand_ins = tuple(t.clone() for theta in points for t in graph(theta, *tensors))

    def with_stand_ins(*args):
        results, called = iter(zip(args[n::2], args[n + 1::2])), []

        def grad_and_value(theta):
            called.append(theta)
            return next(results)

        out = step(grad_and_value, *args[:n])
        return ((out,) if single else tuple(out)) + tuple(called)

    traced = trace_aten(with_stand_ins, *example, *stand_ins)
    stand_ins = _splice(traced, graph, n, len(points))
    output = next(node for node in traced.graph.nodes if node.op == "output")
    outs = output.args[0][:len(output.args[0]) - len(points)]  # read again: stand-ins among them were replaced
    output.args = (outs[0] if single else tuple(outs),)
    for node in stand_ins:
        traced.graph.erase_node(node)
    traced.graph.eliminate_dead_code()
    traced.graph.lint()
    traced.recompile()
    return traced


def _splice(traced: torch.fx.GraphModule, source: torch.fx.GraphModule, n: int, calls: int) -> list:
    """In ``traced`` (inputs: ``n`` arguments, then a (grad, value) stand-in pair per call; the points of the
    ``calls`` calls its last outputs): ``source``'s data inputs added after those inputs, and a copy of
    ``source``'s nodes after each point, its results read in place of the call's stand-ins.  -> the stand-in
    inputs, no longer read."""
    graph = traced.graph
    inputs = [node for node in graph.nodes if node.op == "placeholder"]
    output = next(node for node in graph.nodes if node.op == "output")
    source_inputs = [node for node in source.graph.nodes if node.op == "placeholder"]
    with graph.inserting_before(inputs[-1].next):  # after the step's inputs, in order
        data = []
        for i, node in enumerate(source_inputs[1:]):
            data.append(graph.placeholder(f"data_{i}"))
            data[-1].meta = dict(node.meta)
    last_input = data[-1] if data else inputs[-1]
    for j in range(calls):
        results = output.args[0]
        theta = results[len(results) - calls + j]  # read again: it may be an earlier call's result
        pair = inputs[n + 2 * j:n + 2 * j + 2]
        env = {source_inputs[0]: theta, **dict(zip(source_inputs[1:], data))}
        with graph.inserting_before((last_input if theta.op == "placeholder" else theta).next):
            for node in source.graph.nodes:
                if node.op == "placeholder":
                    continue
                if node.op == "output":
                    for stand_in, result in zip(pair, node.args[0]):
                        stand_in.replace_all_uses_with(env[result])
                    continue
                if node.op == "get_attr":
                    name = f"_potential{j}{node.target}"
                    traced.register_buffer(name, functools.reduce(getattr, node.target.split("."), source))
                    env[node] = graph.get_attr(name)
                    env[node].meta = dict(node.meta)
                else:
                    env[node] = graph.node_copy(node, env.__getitem__)
    return inputs[n:]


def _fix_inputs(graph: torch.fx.GraphModule, fixed: dict) -> torch.fx.GraphModule:
    """``graph`` (changed in place) reading the constant ``fixed[i]`` where it read its input i."""
    inputs = [node for node in graph.graph.nodes if node.op == "placeholder"]
    for i, value in fixed.items():
        name = f"_fixed_input_{i}"
        graph.register_buffer(name, value.clone())
        with graph.graph.inserting_after(inputs[-1]):
            constant = graph.graph.get_attr(name)
        constant.meta = dict(inputs[i].meta)
        inputs[i].replace_all_uses_with(constant)
    if fixed:
        graph.recompile()
    return graph


def inductor(graph: torch.fx.GraphModule, example: tuple, contiguous: bool):
    """``graph`` compiled by inductor for inputs like ``example``.  Where every input is contiguous (as the
    sampler passes them: its own tensors, the data made contiguous (:func:`contiguous_tensors`), and the outputs
    of the same steps), the per-call check of every input's sizes and strides is left out (a large part of a
    small model's compiled step: benchmarks/history/nuts_speed.md, "without stride checks"), unless an output comes out
    non-contiguous (it could be fed back in)."""
    from torch._inductor import config

    if contiguous:
        with config.patch(size_asserts=False):
            runner = _cached_compile(graph, example)
        out = runner(*example)
        if all(t.is_contiguous() for t in (out if isinstance(out, (tuple, list)) else (out,))):
            return runner
    return _cached_compile(graph, example)


def _cached_compile(graph, example):
    """``graph`` compiled by inductor inside a tracing context whose fake mode has a shape environment, as
    ``torch.compile`` gives it: without one inductor bypasses its on-disk cache of compiled graphs ("No shape
    env") and every new process compiles again (benchmarks/history/nuts_speed.md, "on-disk cache")."""
    from torch._inductor import compile as inductor_compile

    with _shape_env_context(), torch_quietly():  # (a null context on another torch: compiled each time, still correct)
        return inductor_compile(graph, list(example))
