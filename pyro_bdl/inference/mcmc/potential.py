r"""The potential of a Pyro model on one flat unconstrained vector, for Hamiltonian samplers.

:class:`FlatPotential` traces a model once, finds its latent sites, and maps each to unconstrained
space with Pyro's own bijections (``biject_to(site.support)``, the transforms Pyro's NUTS uses).  A
point is one vector ``theta`` of D coordinates; the potential is

.. math::

    U(\theta) = -\log p(y, T(\theta)) - \log\,\lvert\det J_T(\theta)\rvert .

:meth:`FlatPotential.value_and_grad` evaluates U and its gradient for a batch of points (one per
chain), shape (chains, D) -> ((chains,), (chains, D)).  The batched function is built once per model,
non-tensor settings and data shapes (:func:`flat_potential` caches it across chains and fits):
U mapped over the chains by ``torch.func.vmap`` and its gradient taken by autograd is traced to one graph of
tensor operations (:func:`~pyro_bdl.inference.compile.aten_trace.trace_aten`, which needs no ``torch._dynamo``: Pyro's
effect handlers run once, at the trace, not at every leapfrog step), with the
data tensors as inputs of the graph, and that graph is compiled with ``torch.compile`` (``compile=True``;
it takes seconds to a minute to compile) or run traced (``compile=False``: by the static runtime,
:func:`~pyro_bdl.inference.compile.static_runtime.script`, built in well under a second; see benchmarks/RESULTS.md for both).
Where a step
fails for a model (a model that reads values into Python, say), the next simpler form is used, with
one warning naming the failure: the traced graph without compiling, then eager ``vmap``, then a loop
over chains.

:meth:`FlatPotential.fuse` traces a sampler's step together with this graph (one function: the
leapfrog step and the sampler's bookkeeping with the potential's graph spliced in where the step calls it, not
traced again), run traced (the static runtime) or
compiled by inductor directly on the traced graph (no dynamo guards at each call, no stride checks where every
input is contiguous, and found again in inductor's on-disk cache by a later process); it is kept on the potential.

Discrete latent sites (Pyro's NUTS would enumerate them) are refused, as is a model with no latent
site.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y):
...     s = pyro.sample("s", dist.HalfNormal(1.0))
...     with pyro.plate("data", len(y)):
...         pyro.sample("y", dist.Normal(0.0, s), obs=y)
>>> data = {"y": torch.randn(20)}
>>> pot = FlatPotential(model, data, compile=False)
>>> pot.dim
1
>>> u, g = pot.value_and_grad(torch.zeros(3, 1), pot.data_tensors(data))  # three chains at s = 1
>>> u.shape, g.shape
(torch.Size([3]), torch.Size([3, 1]))
>>> float(pot.unpack(torch.zeros(3, 1))["s"][0])
1.0
"""

from __future__ import annotations

import contextlib
import copy
import functools
import warnings

import torch
from torch.distributions import biject_to

import pyro
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from pyro_bdl.inference.compile.aten_trace import trace_aten
from pyro_bdl.inference.compile.static_runtime import same_outputs, script

__all__ = ["FlatPotential", "flat_potential", "PotentialCompileWarning"]


class PotentialCompileWarning(UserWarning):
    """The potential did not compile (or trace) for this model; a slower form is used."""


class FlatPotential:
    """U(theta) and its gradient on flat unconstrained vectors; see the module docstring.

    Parameters
    ----------
    model : a Pyro model, called as ``model(**data)``.
    data : its keyword arguments; tensors among them become inputs of the traced graph.
    compile : whether to ``torch.compile`` the traced graph (else it runs as traced).
    """

    def __init__(self, model, data: dict, *, compile: bool = True):
        self.model, self.compile = model, compile
        self._tensor_keys = [k for k, v in data.items() if isinstance(v, torch.Tensor)]
        self._static = {k: v for k, v in data.items() if k not in self._tensor_keys}
        with torch.no_grad(), pyro.validation_enabled(False):
            trace = poutine.trace(model).get_trace(**data)
        self.has_params = any(site["type"] == "param" for site in trace.nodes.values())
        self.sites, self.shapes, self.transforms, self.sizes = [], {}, {}, {}
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                continue
            if site["infer"].get("is_auxiliary"):
                continue
            support = site["fn"].support
            if support.is_discrete:
                raise ValueError(f"latent site '{name}' is discrete ({type(site['fn']).__name__}): the zoo's NUTS "
                                 "samples continuous sites only; use kernel='pyro' (it enumerates discrete sites)")
            transform = biject_to(support)
            unconstrained = transform.inv(site["value"])
            self.sites.append(name)
            self.transforms[name] = transform
            self.shapes[name] = (tuple(site["value"].shape), tuple(unconstrained.shape))
            self.sizes[name] = unconstrained.numel()
        if not self.sites:
            raise ValueError("the model has no latent sample site: nothing for NUTS to sample")
        self.dim = sum(self.sizes.values())
        self.dtype = next(iter(trace.nodes[s]["value"] for s in self.sites)).dtype
        self._batched = None
        self._graph = None  # the traced FX graph of the batched potential, once built (None if untraceable)
        self._mode = None
        self._fused = {}
        self._traces = {}  # (step, argument shapes) -> the step traced with the potential inlined
        self.evaluations = 0  # batched potential-and-gradient evaluations so far (one per leapfrog step)

    # --- the single-point potential ------------------------------------------------------------
    def _split(self, theta: torch.Tensor) -> dict:
        """theta (..., D) -> site -> unconstrained value (..., *unconstrained_shape)."""
        out, start = {}, 0
        for name in self.sites:
            n = self.sizes[name]
            out[name] = theta[..., start:start + n].reshape(tuple(theta.shape[:-1]) + self.shapes[name][1])
            start += n
        return out

    def _potential(self, theta: torch.Tensor, *tensors) -> torch.Tensor:
        """U at one point theta (D,), the data tensors given positionally (so a trace takes them as inputs)."""
        data = {**self._static, **dict(zip(self._tensor_keys, tensors))}
        values, log_det = {}, theta.new_zeros(())
        for name, u in self._split(theta).items():
            x = self.transforms[name](u)
            values[name] = x
            log_det = log_det + self.transforms[name].log_abs_det_jacobian(u, x).sum()
        with pyro.validation_enabled(False):
            trace = poutine.trace(poutine.condition(self.model, data=values)).get_trace(**data)
            log_joint = trace.log_prob_sum()
        return -(log_joint + log_det)

    # --- public ---------------------------------------------------------------------------------
    def unpack(self, theta: torch.Tensor) -> dict:
        """theta (..., D) -> site -> constrained value (..., *site_shape)."""
        with torch.no_grad():
            return {name: self.transforms[name](u) for name, u in self._split(theta).items()}

    def pack(self, values: dict) -> torch.Tensor:
        """Constrained site values (..., *site_shape) -> theta (..., D); inverse of :meth:`unpack`."""
        parts = []
        for name in self.sites:
            u = self.transforms[name].inv(values[name])
            parts.append(u.reshape(*u.shape[:u.dim() - len(self.shapes[name][1])], -1))
        return torch.cat(parts, -1)

    def value_and_grad(self, theta: torch.Tensor, tensors: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """U (chains,) and dU/dtheta (chains, D) at theta (chains, D); ``tensors``: the data tensors in
        the order of the model's keyword arguments (:meth:`data_tensors`)."""
        if self._batched is None:
            self._build(theta, tensors)
        self.evaluations += 1
        grad, value = self._batched(theta, *tensors)
        return value, grad

    def fuse(self, key, step, example: tuple, tensors: tuple, *, compile: bool, evaluates: bool = True,
             fixed: dict | None = None):
        """``step(grad_and_value, *args)`` (tensors in, a tuple of tensors out, one potential evaluation,
        no Python branching on values) as one function ``fused(*args) -> tuple``, with this potential's
        traced graph inlined: run traced (:func:`~pyro_bdl.inference.compile.static_runtime.script`), or compiled by inductor
        (``compile=True``; seconds).
        ``evaluates``: whether ``step`` calls the potential (counted in :attr:`evaluations`).
        ``example``: arguments of the shapes it will be called with, and, where they are contiguous, of their
        strides (the compiled form does not check them at each call: ``_inductor``); ``key``: names the step
        and those shapes (the fused function is kept on the potential, so later fits reuse it).
        ``fixed``: argument index -> the value that argument always has in the calls of this form: the graph
        computes with it as a constant (folded where it decides a selection), the argument is still passed
        and not read.  Forms of one step that fix other arguments share one trace.  Where fusing
        fails, ``step`` runs eagerly on :meth:`value_and_grad`'s function, with one warning."""
        cache_key = (key, compile)
        tensors = tuple(t if t.is_contiguous() else t.contiguous() for t in tensors)  # as compiled (_inductor)
        if cache_key not in self._fused:
            self._fused[cache_key] = self._fuse(step, example, tensors, compile, fixed or {})
        fused = self._fused[cache_key]

        def call(*args):
            self.evaluations += evaluates
            return fused(*args, *tensors)

        return call

    def data_tensors(self, data: dict) -> tuple:
        """The tensors of ``data``, in the order :meth:`value_and_grad` takes them."""
        return tuple(data[k] for k in self._tensor_keys)

    @property
    def mode(self) -> str:
        """How the potential runs: 'compiled', 'traced', 'vmap' or 'loop' (None before the first call)."""
        return self._mode

    # --- building the batched function, simplest fallback last ----------------------------------
    def _vmapped(self, theta: torch.Tensor, *tensors) -> tuple[torch.Tensor, torch.Tensor]:
        """(dU/dtheta (chains, D), U (chains,)) at theta (chains, D), eagerly: U mapped over the chains by
        ``torch.func.vmap``, its gradient by autograd (the chains are independent: the gradient of their sum is
        each chain's own).  Not ``torch.func.grad_and_value``, which imports ``torch._dynamo`` (seconds)."""
        theta = _differentiable(theta)
        with torch.enable_grad():
            u = torch.func.vmap(self._potential, in_dims=(0,) + (None,) * len(tensors))(theta, *tensors)
        return _gradient(u, theta), u.detach()

    def _looped(self, theta: torch.Tensor, *tensors) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`_vmapped`, one chain at a time (for a model ``vmap`` cannot map)."""
        theta = _differentiable(theta)
        with torch.enable_grad():
            u = torch.stack([self._potential(t, *tensors) for t in theta])
        return _gradient(u, theta), u.detach()

    def _build(self, theta, tensors):
        try:
            reference = self._vmapped(theta, *tensors)
        except Exception as error:  # noqa: BLE001 - any failure of vmap: a loop over chains still works
            self._fallback("loop", f"torch.func.vmap failed ({type(error).__name__}: {error})")
            self._batched = self._looped
            return
        try:
            graph = trace_aten(self._vmapped, theta, *tensors)
            _check_same(graph(theta, *tensors), reference)
            self._graph = graph
        except Exception as error:  # noqa: BLE001
            self._fallback("vmap", f"tracing the potential failed ({type(error).__name__}: {error})")
            self._batched = self._vmapped
            return
        if not self.compile:  # the graph's operations run without Python between them
            try:
                scripted = script(copy.deepcopy(graph), (theta, *tensors))
                _check_same(scripted(theta, *tensors), reference)
                graph = scripted
            except Exception:  # noqa: BLE001 - the FX graph itself is as correct, a little slower
                pass
            self._batched, self._mode = graph, "traced"
            return
        try:
            compiled = torch.compile(graph, dynamic=False)
            _check_same(compiled(theta, *tensors), reference)
        except Exception as error:  # noqa: BLE001
            self._fallback("traced", f"torch.compile failed ({type(error).__name__}: {str(error)[:300]})")
            self._batched = graph
            return
        self._batched, self._mode = compiled, "compiled"

    def _fuse(self, step, example, tensors, compile, fixed):
        n = len(example)
        example = tuple(fixed.get(i, a) for i, a in enumerate(example))
        if self._batched is None:
            self._build(example[0], tensors)

        def unfused(*args):
            return step(lambda theta: self._batched(theta, *args[n:]), *args[:n])

        if self._graph is None:  # the potential itself did not trace (warned already)
            return unfused
        graph = self._graph

        def inlined(*args):
            return step(lambda theta: graph(theta, *args[n:]), *args[:n])

        contiguous = all(t.is_contiguous() for t in (*example, *tensors))
        # tracers follow tensors by identity: one object passed as two arguments would become one input
        example, tensors = tuple(t.clone() for t in example), tuple(t.clone() for t in tensors)
        try:
            reference = inlined(*example, *tensors)
            fused = _fix_inputs(self._trace(step, example, tensors), fixed)
            if compile:  # inductor on the traced graph directly: no dynamo guards to check at every call
                runner = _inductor(fused, (*example, *tensors), contiguous)
            else:  # constants evaluated once, cheaper operations, the static runtime (benchmarks/RESULTS.md)
                runner = script(fused, (*example, *tensors))
            _check_same(runner(*example, *tensors), reference)
            return runner
        except Exception as error:  # noqa: BLE001 - the step still runs, op by op
            warnings.warn(f"the sampler's step did not fuse with the model's potential and runs op by op (slower): "
                          f"{type(error).__name__}: {str(error)[:300]}", PotentialCompileWarning, stacklevel=4)
            return unfused

    def _trace(self, step, example, tensors) -> torch.fx.GraphModule:
        """``step`` with this potential's graph spliced in (:func:`_traced_with`) on ``example`` and ``tensors``
        (a copy: what runs it changes it), the trace kept for forms of the same step that fix other arguments."""
        key = (step, tuple((tuple(t.shape), t.dtype) for t in (*example, *tensors)))
        if key not in self._traces:
            self._traces[key] = _traced_with(step, self._graph, example, tensors)
        return copy.deepcopy(self._traces[key])

    def _fallback(self, mode, reason):
        self._mode = mode
        warnings.warn(f"the model's potential runs {mode}, slower than compiled: {reason}", PotentialCompileWarning,
                      stacklevel=4)


def _differentiable(theta: torch.Tensor) -> torch.Tensor:
    """``theta`` as a new leaf that autograd differentiates by; a copy where it was made in inference mode (the
    static runtime's outputs are), which autograd refuses."""
    return (theta.clone() if theta.is_inference() else theta.detach()).requires_grad_()


def _gradient(u: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """d(sum u)/d theta, zero where u does not depend on theta (a site whose density is flat, as
    ``ImproperUniform``'s, and that nothing else reads)."""
    grad = torch.autograd.grad(u.sum(), theta, allow_unused=True)[0] if u.requires_grad else None
    return torch.zeros_like(theta) if grad is None else grad


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


def _traced_with(step, potential: torch.fx.GraphModule, example: tuple, tensors: tuple) -> torch.fx.GraphModule:
    """``step(grad_and_value, *example)`` as one graph of ``(*example, *tensors)`` in which every call of
    ``grad_and_value`` is a copy of ``potential``'s nodes (a graph of ``(theta, *tensors) -> (grad, value)``).

    The step is traced with the results of its potential calls as stand-in inputs and the points it evaluates
    at as extra outputs; the potential's nodes are then copied in right after each point (they read nothing
    else of the step, and the step reads the results only after the point), instead of tracing its hundred-odd
    operations again (the larger part of a leaf's trace)."""
    n = len(example)
    points = []

    def probe(theta):
        points.append(theta)
        return potential(theta, *tensors)

    single = not isinstance(step(probe, *example), tuple)
    stand_ins = tuple(t.clone() for theta in points for t in potential(theta, *tensors))

    def with_stand_ins(*args):
        results, called = iter(zip(args[n::2], args[n + 1::2])), []

        def grad_and_value(theta):
            called.append(theta)
            return next(results)

        out = step(grad_and_value, *args[:n])
        return ((out,) if single else tuple(out)) + tuple(called)

    traced = trace_aten(with_stand_ins, *example, *stand_ins)
    graph = traced.graph
    inputs = [node for node in graph.nodes if node.op == "placeholder"]
    output = next(node for node in graph.nodes if node.op == "output")
    source_inputs = [node for node in potential.graph.nodes if node.op == "placeholder"]
    with graph.inserting_before(inputs[-1].next):  # after the step's inputs, in order
        data = []
        for i, node in enumerate(source_inputs[1:]):
            data.append(graph.placeholder(f"data_{i}"))
            data[-1].meta = dict(node.meta)
    last_input = data[-1] if data else inputs[-1]
    for j in range(len(points)):
        results = output.args[0]
        theta = results[len(results) - len(points) + j]  # read again: it may be an earlier call's result
        pair = inputs[n + 2 * j:n + 2 * j + 2]
        env = {source_inputs[0]: theta, **dict(zip(source_inputs[1:], data))}
        with graph.inserting_before((last_input if theta.op == "placeholder" else theta).next):
            for node in potential.graph.nodes:
                if node.op == "placeholder":
                    continue
                if node.op == "output":
                    for stand_in, result in zip(pair, node.args[0]):
                        stand_in.replace_all_uses_with(env[result])
                    continue
                if node.op == "get_attr":
                    name = f"_potential{j}{node.target}"
                    traced.register_buffer(name, functools.reduce(getattr, node.target.split("."), potential))
                    env[node] = graph.get_attr(name)
                    env[node].meta = dict(node.meta)
                else:
                    env[node] = graph.node_copy(node, env.__getitem__)
    outs = output.args[0][:len(output.args[0]) - len(points)]  # read again: stand-ins among them were replaced
    output.args = (outs[0] if single else tuple(outs),)
    for node in inputs[n:]:
        graph.erase_node(node)
    graph.eliminate_dead_code()
    graph.lint()
    traced.recompile()
    return traced


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


def _inductor(graph: torch.fx.GraphModule, example: tuple, contiguous: bool):
    """``graph`` compiled by inductor for inputs like ``example``.  Where every input is contiguous (as the
    sampler passes them: its own tensors, the data made contiguous by :meth:`FlatPotential.fuse`, and the
    outputs of the same steps), the per-call check of every input's sizes and strides is left out (a large part
    of a small model's compiled step: benchmarks/RESULTS.md, "without stride checks"), unless an output comes
    out non-contiguous (it could be fed back in)."""
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
    env") and every new process compiles again (benchmarks/RESULTS.md, "on-disk cache")."""
    from torch._inductor import compile as inductor_compile

    with _shape_env_context():  # (a null context on another torch: compiled each time, still correct)
        return inductor_compile(graph, list(example))


def _check_same(got, want):
    if not same_outputs(got, want, tolerance=1e-4):
        raise RuntimeError("the traced potential disagrees with the eager one")


def _hashable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return tuple(_hashable(v) for v in value)
    return ("id", id(value))  # an object: the same object only


def _model_key(model):
    if isinstance(model, functools.partial):
        return (_model_key(model.func), tuple(_hashable(a) for a in model.args),
                tuple(sorted((k, _hashable(v)) for k, v in model.keywords.items())))
    return ("id", id(model))


_CACHE: dict = {}
_CACHE_SIZE = 16


def flat_potential(model, data: dict, chains: int, *, compile: bool = True) -> FlatPotential:
    """The :class:`FlatPotential` of ``model`` on ``data``, shared with earlier calls on the same model
    (the same function, or a ``functools.partial`` of it with equal simple arguments), the same
    non-tensor data, the same data shapes and dtypes and the same number of chains.  A model that reads
    ``pyro.param`` values is not shared (the traced graph holds those values)."""
    shapes = tuple((k, tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else (k, _hashable(v))
                   for k, v in sorted(data.items()))
    key = (_model_key(model), shapes, chains, compile)
    potential = _CACHE.get(key)
    if potential is not None and potential.model is not model and isinstance(model, functools.partial):
        potential.model = model  # same function and arguments: the traced graph is the same
    if potential is None:
        potential = FlatPotential(model, data, compile=compile)
        if not potential.has_params:  # it holds the model, so an id in the key is not reused while cached
            _CACHE[key] = potential
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
    return potential
