"""One trace of a model, read for everything a fit needs to know of its structure before and after it runs.

A fit asks many questions of a model that one run of it answers: which sites are observed, latent, deterministic,
which ``pyro.param`` sites it has and their initial values, which discrete sites it enumerates and how its plates
nest, which batch dimensions lie outside every plate, how large its largest operation is, the support of every
latent site.  :class:`Prototype` takes that run once (hidden from outer handlers, without gradients, at the centre of
the model's priors, :func:`~pyro_bdl.inference.starts.init_to_prior_mean`, not at a prior draw that its density may
not hold finite, any draws moving no stream, and the parameters it makes left out of the param store) and reads the
answers from it, as Pyro's
``initialize_model`` returns one prototype trace for reuse.

:func:`pyro_bdl.fit` takes one prototype per fit and shares it (:func:`sharing`) with the checks and the method's
runner: within the fit, :func:`prototype_of` (and the helpers built on it: ``latent_sites``, ``observed_sites``,
...) answer from it for the model and data it was taken of, and trace afresh for any other.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y=None):
...     scale = pyro.param("scale", torch.tensor(2.0))
...     mu = pyro.sample("mu", dist.Normal(0.0, scale))
...     with pyro.plate("rows", 3):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> p = Prototype.of(model, {"y": torch.zeros(3)})
>>> p.latent, p.observed, {k: float(v) for k, v in p.params.items()}, sorted(p.traits)
(['mu'], ['y'], {'scale': 2.0}, ['continuous'])
>>> "scale" in pyro.get_param_store()  # the trace made no parameter
False
"""

from __future__ import annotations

import contextlib
import contextvars
from functools import cached_property
from typing import Callable

import pyro
import torch
from pyro import poutine
from pyro.distributions.transforms import biject_to
from pyro.poutine.util import site_is_subsample
from pyro.infer.autoguide.initialization import InitMessenger

from pyro_bdl.inference.program_errors import watching
from pyro_bdl.inference.pyro_internals import is_deterministic
from pyro_bdl.inference.starts import init_to_prior_mean
from pyro_bdl.storage.checkpoint import kept_rng

__all__ = ["ENUMERATED", "Prototype", "is_enumerated", "is_latent", "plate_nesting", "prototype_of", "sharing"]

#: the trait of a model with enumerated discrete latent sites
ENUMERATED = "enumerated"


class Prototype:
    """What one trace of ``model(**data)`` says of the model's structure.

    Attributes (each read from the trace on first use)
    ----------
    observed : the observed sample sites (likelihood terms; not ``pyro.deterministic`` sites).
    latent : the latent sample sites (unobserved, not subsample, not auxiliary), in the order the model runs them.
    deterministic : the ``pyro.deterministic`` sites (and the sites a reparameteriser leaves in an original's place).
    params : the model's ``pyro.param`` / ``pyro.module`` sites, name -> detached tensor: the param store's value
        where it held the site when the trace was taken, else the initial value.
    unplated : sample site -> how many of its rightmost batch dimensions lie outside every plate (sites with none
        left out; :mod:`pyro_bdl.inference.site_shapes`).
    enumerated : the latent sites marked for enumeration and discrete (an unmarked discrete site left out).
    plate_nesting : how many plates nest (what ``TraceEnum_ELBO`` takes as ``max_plate_nesting``).
    traits : ``{"continuous"}`` or ``{"continuous", "enumerated"}``; a ``ValueError`` naming a discrete latent site
        that is not marked for enumeration.
    largest_site : the entries of the largest latent or parameter site (a weight matrix: inputs x outputs).
    supports : latent site -> the bijection from its unconstrained space (sites with one).
    """

    def __init__(self, trace):
        self.trace = trace

    @classmethod
    def of(cls, model: Callable, data: dict) -> Prototype:
        """One run of ``model(**data)`` at its priors' centre: hidden, without gradients, moving no random stream, the
        parameters it makes left out of the param store (their initial values are kept in :attr:`params`).  A prior
        that cannot be sampled (``ImproperUniform``) is a ``ValueError`` that says so."""
        store = pyro.get_param_store()
        before = set(store.keys())  # the run sees them (a loaded fit's feature map reads its layers from the store)
        try:
            with torch.no_grad(), poutine.block(), kept_rng(), watching():  # at the start, not a prior draw (inference.starts)
                trace = poutine.trace(InitMessenger(init_to_prior_mean)(model)).get_trace(**data)
        except NotImplementedError as error:
            raise ValueError(f"the model's prior cannot be sampled ({error}): pyro-bdl reads a model's sites from "
                             f"one run of it at the centre of its priors; give every latent site a proper prior") from None
        finally:
            for name in set(store.keys()) - before:  # those the run made: left out
                del store[name]
        for site in trace.nodes.values():
            if site["type"] == "param":  # a module's parameter is the tensor training will move: keep a copy
                site["value"] = site["value"].detach().clone()
        return cls(trace)

    def _sites(self, keep) -> list[str]:
        return [name for name, site in self.trace.nodes.items() if keep(site)]

    @cached_property
    def observed(self) -> list[str]:
        return self._sites(lambda s: s["type"] == "sample" and s["is_observed"] and not is_deterministic(s))

    @cached_property
    def latent(self) -> list[str]:
        return self._sites(is_latent)

    @cached_property
    def deterministic(self) -> list[str]:
        return self._sites(lambda s: s["type"] == "sample" and is_deterministic(s))

    @cached_property
    def params(self) -> dict[str, torch.Tensor]:
        return {name: site["value"] for name, site in self.trace.nodes.items() if site["type"] == "param"}

    @cached_property
    def unplated(self) -> dict[str, int]:
        found = {}
        for name, site in self.trace.nodes.items():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            shape = site["fn"].batch_shape
            plated = {frame.dim for frame in site["cond_indep_stack"] if frame.vectorized and frame.dim is not None}
            k = 0
            while k < len(shape) and -(k + 1) not in plated:
                k += 1
            if k and any(size != 1 for size in shape[len(shape) - k:]):
                found[name] = k
        return found

    def enumerated_sites(self, strict: bool = True) -> list[str]:
        """The latent sites marked for enumeration; ``strict``: a discrete latent site that is not marked is a
        ``ValueError`` that says how to mark it (else it is left out)."""
        found = []
        for name in self.latent:
            site = self.trace.nodes[name]
            if not site["fn"].support.is_discrete:
                continue
            if is_enumerated(site):
                found.append(name)
            elif strict:
                raise ValueError(
                    f"latent site '{name}' is discrete ({type(site['fn']).__name__}) and not marked for enumeration: "
                    "mark it so that the fit sums it out (decorate the model with @pyro.infer.config_enumerate, or "
                    "pass infer={'enumerate': 'parallel'} to its pyro.sample)"
                    + ("" if site["fn"].has_enumerate_support else
                       "; its distribution has infinite support, so it cannot be enumerated: sum it out by hand"))
        return found

    @property
    def enumerated(self) -> list[str]:
        return self.enumerated_sites(strict=False)

    @property
    def traits(self) -> frozenset:
        return frozenset({"continuous"} | ({ENUMERATED} if self.enumerated_sites(strict=True) else set()))

    @cached_property
    def plate_nesting(self) -> int:
        return plate_nesting(self.trace)

    @cached_property
    def largest_site(self) -> int:
        return max((site["value"].numel() for site in self.trace.nodes.values()
                    if site["type"] in ("sample", "param") and isinstance(site.get("value"), torch.Tensor)
                    and not site.get("is_observed", False)), default=1)

    @cached_property
    def supports(self) -> dict:
        out = {}
        for name in self.latent:
            try:
                out[name] = biject_to(self.trace.nodes[name]["fn"].support)
            except NotImplementedError:  # a discrete site: no unconstrained space
                continue
        return out


def is_latent(site) -> bool:
    """Whether a trace site is a latent sample site: unobserved, not a subsample index, not auxiliary."""
    return (site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
            and not site["infer"].get("is_auxiliary"))


def is_enumerated(site) -> bool:
    """Whether a trace's sample site is marked for enumeration (``infer={"enumerate": "parallel"}`` or
    ``"sequential"``) and discrete."""
    fn = site["fn"]
    return site["infer"].get("enumerate") in ("parallel", "sequential") and fn.support.is_discrete \
        and fn.has_enumerate_support


def plate_nesting(trace) -> int:
    """How many plates of a trace nest (the leftmost vectorised plate dim, negated): enumeration goes left of
    them."""
    return max((-f.dim for site in trace.nodes.values() if site["type"] == "sample"
                for f in site["cond_indep_stack"] if f.vectorized and f.dim is not None), default=0)


_SHARED: contextvars.ContextVar[tuple] = contextvars.ContextVar("pyro_bdl_prototypes", default=())


@contextlib.contextmanager
def sharing(prototype: Prototype, models, data: dict):
    """Within the block, :func:`prototype_of` answers ``prototype`` for each of ``models`` (forms of one model
    with the same sites: the model as written and the form a method runs) called with ``data`` (the same dict)."""
    token = _SHARED.set(_SHARED.get() + tuple((model, data, prototype) for model in models))
    try:
        yield prototype
    finally:
        _SHARED.reset(token)


def prototype_of(model: Callable, data: dict) -> Prototype:
    """The prototype of ``model(**data)``: the one the running fit shares (:func:`sharing`) for this model and data
    dict, else one fresh trace."""
    for shared_model, shared_data, prototype in reversed(_SHARED.get()):
        if shared_model is model and shared_data is data:
            return prototype
    return Prototype.of(model, data)
