r"""The potential of a Pyro model on one flat unconstrained vector, for Hamiltonian samplers.

:class:`FlatPotential` traces a model once, finds its latent sites, and maps each to unconstrained
space with Pyro's own bijections (``biject_to(site.support)``, the transforms Pyro's NUTS uses).  A
point is one vector ``theta`` of D coordinates; the potential is

.. math::

    U(\theta) = -\log p(y, T(\theta)) - \log\,\lvert\det J_T(\theta)\rvert .

:meth:`FlatPotential.value_and_grad` evaluates U and its gradient for a batch of points (one per
chain), shape (chains, D) -> ((chains,), (chains, D)).  The batched function is built once per model,
non-tensor settings and data shapes (:func:`flat_potential` caches it across chains and fits):
U mapped over the chains by ``torch.func.vmap`` and its gradient taken by autograd (:meth:`FlatPotential._vmapped`,
with the data tensors as arguments) is handed to the compiler in one call
(:func:`~pyro_bdl.inference.compile.fastest.fastest`), which traces it to one graph of tensor operations (Pyro's
effect handlers run once, at the trace, not at every leapfrog step) and compiles that graph with ``torch.compile``
(``compile=True``; seconds to a minute) or runs it traced (``compile=False``: by the static runtime, built in well
under a second; benchmarks/history/nuts_speed.md).  Where a step fails for a model (a model that reads values into
Python, say), the next simpler form is used, with one warning naming the failure
(:class:`~pyro_bdl.inference.compile.fastest.PotentialCompileWarning`): the traced graph without compiling, then
eager ``vmap``, then a loop over chains.

The potential holds no sampler's step: the sampler fuses its steps with :attr:`FlatPotential.graph` itself
(:func:`~pyro_bdl.inference.mcmc.dynamics.fuse_with`).

Discrete latent sites marked for enumeration (``@config_enumerate``: :mod:`pyro_bdl.inference.enumeration`) are
summed out: U is then minus the log of the marginal density :math:`\sum_z p(y, z, T(\theta))`, computed as Pyro's
NUTS computes it (the model run under ``poutine.enum``, its log densities contracted by Pyro's
``TraceEinsumEvaluator``), and theta holds the continuous sites only.  ``torch.func.vmap`` cannot map Pyro's
enumeration, so such a potential loops over the chains inside the one traced graph (the loop runs once, at the
trace).  A discrete latent site not marked for enumeration is refused, as is a model with no latent site.

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

import functools
import warnings

import pyro
import torch
from pyro import poutine
from pyro.infer.mcmc.util import TraceEinsumEvaluator
from pyro.poutine.util import site_is_subsample
from torch.distributions import biject_to

from pyro_bdl.inference.compile.fastest import PotentialCompileWarning, fastest, fell_back
from pyro_bdl.inference.enumeration import enumerating, is_enumerated, plate_nesting

__all__ = ["FlatPotential", "flat_potential", "PotentialCompileWarning"]  # the warning: re-exported (compile/)


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
        #: the latent sites summed out (marked for enumeration), and the plates they go left of
        self.enumerated, self.nesting = [], plate_nesting(trace)
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                continue
            if site["infer"].get("is_auxiliary"):
                continue
            support = site["fn"].support
            if is_enumerated(site):
                self.enumerated.append(name)
                continue
            if support.is_discrete:
                raise ValueError(f"latent site '{name}' is discrete ({type(site['fn']).__name__}): the zoo's NUTS "
                                 "samples continuous sites and sums out those marked for enumeration; mark it "
                                 "(@pyro.infer.config_enumerate, or infer={'enumerate': 'parallel'})")
            transform = biject_to(support)
            unconstrained = transform.inv(site["value"])
            self.sites.append(name)
            self.transforms[name] = transform
            self.shapes[name] = (tuple(site["value"].shape), tuple(unconstrained.shape))
            self.sizes[name] = unconstrained.numel()
        if not self.sites:
            raise ValueError("the model has no latent sample site: nothing for NUTS to sample")
        self.dim = sum(self.sizes.values())
        self._evaluator = None  # the contraction of an enumerated trace's log densities (None: nothing enumerated)
        if self.enumerated:
            with torch.no_grad(), pyro.validation_enabled(False):
                prototype = poutine.trace(poutine.condition(
                    self._enumerated_model(), data={s: trace.nodes[s]["value"] for s in self.sites})).get_trace(**data)
            self._evaluator = TraceEinsumEvaluator(prototype, True, self.nesting)
        self.dtype = next(iter(trace.nodes[s]["value"] for s in self.sites)).dtype
        self.device = next(iter(trace.nodes[s]["value"] for s in self.sites)).device
        self._batched = None
        self._graph = None  # the traced FX graph of the batched potential, once built (None if untraceable)
        self.fallbacks: list[str] = []  # why the potential runs slower than compiled (each message once)
        self._mode = None
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
            if self._evaluator is None:
                trace = poutine.trace(poutine.condition(self.model, data=values)).get_trace(**data)
                log_joint = trace.log_prob_sum()
            else:  # the enumerated sites summed out
                trace = poutine.trace(poutine.condition(self._enumerated_model(), data=values)).get_trace(**data)
                log_joint = self._evaluator.log_prob(trace)
        return -(log_joint + log_det)

    def _enumerated_model(self):
        """The model with its enumerated sites enumerated in parallel, left of its plates."""
        return enumerating(self.model, self.enumerated, self.nesting)

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
            self.build(theta, tensors)
        self.evaluations += 1
        grad, value = self._batched(theta, *tensors)
        return value, grad

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

    def build(self, theta: torch.Tensor, tensors: tuple) -> None:
        """Builds the batched function (once; :meth:`value_and_grad` does at its first call) on these example
        arguments, theta (chains, D) and the data tensors: the fastest form that gives :meth:`_vmapped`'s values
        (:func:`~pyro_bdl.inference.compile.fastest.fastest`), else :meth:`_looped` where ``vmap`` fails; for a model
        with enumerated sites, the fastest form of :meth:`_looped` (``vmap`` cannot map the enumeration)."""
        if self._batched is not None:
            return
        if self.enumerated:  # vmap cannot map Pyro's enumeration: the loop over chains, traced
            form = fastest(self._looped, (theta, *tensors), self._looped(theta, *tensors), compile=self.compile,
                           mode="loop", what="the model's potential", stacklevel=3, notes=self.fallbacks)
            self._batched, self._graph, self._mode = form.run, form.graph, form.mode
            return
        try:
            reference = self._vmapped(theta, *tensors)
        except Exception as error:  # noqa: BLE001 - any failure of vmap: a loop over chains still works
            fell_back(self.fallbacks, f"the model's potential runs loop, slower than compiled: torch.func.vmap "
                      f"failed ({type(error).__name__}: {error})", stacklevel=3)
            self._batched, self._mode = self._looped, "loop"
            return
        form = fastest(self._vmapped, (theta, *tensors), reference, compile=self.compile, mode="vmap",
                       what="the model's potential", stacklevel=3, notes=self.fallbacks)
        self._batched, self._graph, self._mode = form.run, form.graph, form.mode

    @property
    def graph(self) -> torch.fx.GraphModule | None:
        """The traced ``torch.fx`` graph of the batched function, ``(theta (chains, D), *tensors) -> (dU/dtheta
        (chains, D), U (chains,))``; None before :meth:`build`, or where the potential did not trace."""
        return self._graph

    @property
    def batched(self):
        """The batched function as built (:meth:`build`), ``(theta, *tensors) -> (dU/dtheta, U)``, uncounted in
        :attr:`evaluations`; None before."""
        return self._batched


def _differentiable(theta: torch.Tensor) -> torch.Tensor:
    """``theta`` as a new leaf that autograd differentiates by; a copy where it was made in inference mode (the
    static runtime's outputs are), which autograd refuses."""
    return (theta.clone() if theta.is_inference() else theta.detach()).requires_grad_()


def _gradient(u: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """d(sum u)/d theta, zero where u does not depend on theta (a site whose density is flat, as
    ``ImproperUniform``'s, and that nothing else reads)."""
    grad = torch.autograd.grad(u.sum(), theta, allow_unused=True)[0] if u.requires_grad else None
    return torch.zeros_like(theta) if grad is None else grad


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
    shapes = tuple((k, tuple(v.shape), v.dtype, v.device) if isinstance(v, torch.Tensor) else (k, _hashable(v))
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
