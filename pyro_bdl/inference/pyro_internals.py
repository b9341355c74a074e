"""Every private part of Pyro that pyro-bdl relies on, read here and nowhere else.

The speed code (a compiled ELBO, a leaner SVI step, a multi-tensor optimiser) and the MCMC
statistics need a few things Pyro does not promise to keep: attributes and functions with a leading
underscore, a method patched on an instance, and the method names by which a ``Messenger`` is called.
Each is listed in :data:`INTERNALS` (what it is, who uses it) and read through a function of this
module, which raises :class:`PyroInternalsError` naming the attribute and the installed Pyro version
when it is gone.  ``tests/inference/test_pyro_internals.py`` checks every entry on the installed Pyro, so an
upgrade that drops one fails there, by name, rather than deep inside a fit.

Checked against pyro-ppl 1.9.1 and 1.9.2 (:data:`CHECKED_PYRO_VERSIONS`: the sources of every file
below are the same in both, and the test passes on both); ``pyproject.toml`` admits that range only.

Example
-------
>>> import pyro.distributions as dist, pyro
>>> from pyro.infer import MCMC, NUTS
>>> kernel = NUTS(lambda: pyro.sample("x", dist.Normal(0.0, 1.0)))
>>> steps = []
>>> count_nuts_leapfrog_steps(kernel, lambda: steps.append(1))
>>> MCMC(kernel, num_samples=2, warmup_steps=2, disable_progbar=True).run()
>>> len(steps) > 0, mean_accept_prob(kernel) >= 0.0
(True, True)
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import math
import textwrap
from dataclasses import dataclass

import pyro
import pyro.infer.inspect
import pyro.ops.jit
from pyro import distributions as dist
from pyro.infer import SVI, RandomWalkKernel, TraceMeanField_ELBO

__all__ = [
    "CHECKED_PYRO_VERSIONS", "INTERNALS", "Internal", "PyroInternalsError",
    "compiled_graph", "count_nuts_leapfrog_steps", "divergence_count", "elbo_traces", "mean_accept_prob",
    "meanfield_particle_loss", "pending_optimiser_state", "potential_energy", "random_walk_step_size",
    "svi_step_fingerprint", "SVI_STEP_FINGERPRINT", "is_deterministic",
]

#: The Pyro versions whose sources were read for every entry of :data:`INTERNALS`.
CHECKED_PYRO_VERSIONS = ("1.9.1", "1.9.2")


class PyroInternalsError(AttributeError):
    """A private part of Pyro that pyro-bdl reads is missing from the installed Pyro."""


@dataclass(frozen=True)
class Internal:
    """One private part of Pyro: ``owner.name`` (``owner`` a dotted path), what it is, who uses it."""

    owner: str
    name: str
    what: str
    used_by: str

    @property
    def where(self) -> str:
        return f"{self.owner}.{self.name}"


#: Every private part of Pyro that pyro-bdl reads, patches, or relies on being called.
INTERNALS = (
    Internal("pyro.ops.jit", "_hashable_args_kwargs",
             "the key under which pyro.ops.jit.trace's CompiledFunction stores a traced graph in `.compiled`",
             "compiled_elbo.py: replay a compiled ELBO's graph directly (compiled_graph)"),
    Internal("pyro.ops.jit.CompiledFunction", "_param_names",
             "(instance) names of the params a traced graph takes as its first inputs, in order",
             "compiled_elbo.py: replay a compiled ELBO's graph directly (compiled_graph)"),
    Internal("pyro.ops.jit.CompiledFunction", "compiled",
             "(instance; no underscore, but its keys and calling convention are private) traced graphs by key",
             "compiled_elbo.py: replay a compiled ELBO's graph directly (compiled_graph)"),
    Internal("pyro.infer.elbo.ELBO", "_get_traces",
             "generator of (model_trace, guide_trace), one per particle (vectorised or not)",
             "compiled_elbo.py: the compiled ELBOs' eager loss (elbo_traces)"),
    Internal("pyro.infer.TraceMeanField_ELBO", "_differentiable_loss_particle",
             "(loss, surrogate_loss) of one particle, the KL in closed form where one exists",
             "compiled_elbo.py: CompiledTraceMeanField_ELBO (meanfield_particle_loss)"),
    Internal("pyro.infer.NUTS", "_build_basetree",
             "builds a tree of one leapfrog step; called through the instance, so patching it counts steps",
             "mcmc/methods.py: n_steps and tree_depth per draw (count_nuts_leapfrog_steps)"),
    Internal("pyro.infer.HMC", "_divergences",
             "(instance, NUTS too) list of the divergent post-warmup iterations so far",
             "mcmc/methods.py: diverging per draw (divergence_count)"),
    Internal("pyro.infer.HMC", "_potential_energy_last",
             "(instance, NUTS too) potential energy (minus log joint, unconstrained) at the current state",
             "mcmc/methods.py: lp per draw (potential_energy)"),
    Internal("pyro.infer.HMC", "_mean_accept_prob",
             "(instance, NUTS and RandomWalkKernel too) running mean acceptance probability",
             "mcmc/methods.py: mean_accept_prob of a chain (mean_accept_prob)"),
    Internal("pyro.infer.RandomWalkKernel", "_energy_last",
             "(instance) potential energy at the current state", "mcmc/methods.py: lp per draw (potential_energy)"),
    Internal("pyro.infer.RandomWalkKernel", "_log_step_size",
             "(instance) log of the adapted proposal scale", "mcmc/methods.py: step_size per draw (random_walk_step_size)"),
    Internal("pyro.optim.PyroOptim", "_state_waiting_to_be_consumed",
             "(instance) state loaded by set_state for parameters not yet stepped, by param name",
             "optim.py: FastClippedAdam resumes a checkpoint (pending_optimiser_state)"),
    Internal("pyro.poutine.messenger.Messenger", "_process_message",
             "calls the handler's `_pyro_<type>(msg)` on the way down the stack "
             "(the zoo's handlers define _pyro_sample and _pyro_dense)",
             "guides.py (_DropPriors), dropout.py (DropoutMessenger), local_reparam.py (_Answer)"),
    Internal("pyro.poutine.messenger.Messenger", "_postprocess_message",
             "calls the handler's `_pyro_post_<type>(msg)` on the way back up", "local_reparam.py (_Record)"),
    Internal("pyro.infer.inspect", "site_is_deterministic",
             "(public name, private marker) True for a pyro.deterministic site: a sample site with "
             "is_observed=True and infer['_deterministic']",
             "base.py: deterministic sites go to the posterior, never the likelihood (is_deterministic)"),
    Internal("pyro.infer.SVI", "step",
             "(public, but copied) pyro_bdl's SVI.step redoes its steps: capture the params with "
             "poutine.trace(param_only=True), step them, clear their gradients; tests/inference/test_bbb_path.py checks "
             "that both give the same numbers, tests/inference/test_pyro_internals.py that Pyro's step is the one copied",
             "svi.py: SVI.step"),
)


def _missing(owner, name: str) -> PyroInternalsError:
    what = owner if isinstance(owner, str) else getattr(owner, "__name__", type(owner).__name__)
    return PyroInternalsError(
        f"pyro-ppl {pyro.__version__} has no '{name}' on {what}; pyro-bdl reads it "
        f"(see pyro_bdl/inference/pyro_internals.py) and was checked with pyro-ppl {', '.join(CHECKED_PYRO_VERSIONS)}"
    )


def _read(obj, name: str):
    try:
        return getattr(obj, name)
    except AttributeError:
        raise _missing(type(obj), name) from None


_hashable_args_kwargs = getattr(pyro.ops.jit, "_hashable_args_kwargs", None)


# ---- pyro.ops.jit -------------------------------------------------------------------------------

def compiled_graph(function, args: tuple, kwargs: dict):
    """``(graph, param_names)`` that ``function`` (a :func:`pyro.ops.jit.trace` result) traced for these
    arguments, or None if it has not traced them: ``graph(*params, *args)`` with the params'
    unconstrained values in the order of ``param_names`` computes ``function(*args, **kwargs)``."""
    if _hashable_args_kwargs is None:
        raise _missing("pyro.ops.jit", "_hashable_args_kwargs")
    graph = _read(function, "compiled").get(_hashable_args_kwargs(args, kwargs))
    return None if graph is None else (graph, tuple(_read(function, "_param_names")))


# ---- ELBOs --------------------------------------------------------------------------------------

def elbo_traces(elbo, model, guide, args: tuple, kwargs: dict):
    """The (model_trace, guide_trace) pairs of ``elbo``'s particles, as its own loss draws them."""
    return _read(elbo, "_get_traces")(model, guide, args, kwargs)


def meanfield_particle_loss(elbo, model_trace, guide_trace):
    """``TraceMeanField_ELBO``'s differentiable negative ELBO of one particle (its surrogate loss)."""
    method = getattr(TraceMeanField_ELBO, "_differentiable_loss_particle", None)
    if method is None:
        raise _missing(TraceMeanField_ELBO, "_differentiable_loss_particle")
    return method(elbo, model_trace, guide_trace)[1]


# ---- MCMC kernels -------------------------------------------------------------------------------

def count_nuts_leapfrog_steps(kernel, on_step) -> None:
    """Call ``on_step()`` at every leapfrog step of the NUTS ``kernel`` (NUTS builds its trees from base
    trees of one step each), by wrapping its ``_build_basetree`` on the instance."""
    build = _read(kernel, "_build_basetree")

    def counting_build(*args, **kwargs):
        on_step()
        return build(*args, **kwargs)

    kernel._build_basetree = counting_build


def divergence_count(kernel) -> int:
    """Number of divergent post-warmup iterations of an HMC or NUTS kernel so far (0 for random-walk Metropolis)."""
    if isinstance(kernel, RandomWalkKernel):
        return 0
    return len(_read(kernel, "_divergences"))


def potential_energy(kernel) -> float:
    """The potential energy (minus the log joint, unconstrained space) at the kernel's current state."""
    name = "_energy_last" if isinstance(kernel, RandomWalkKernel) else "_potential_energy_last"
    return float(_read(kernel, name))


def random_walk_step_size(kernel) -> float:
    """The adapted proposal scale of a :class:`~pyro.infer.RandomWalkKernel`."""
    return math.exp(_read(kernel, "_log_step_size"))


def mean_accept_prob(kernel) -> float:
    """The kernel's running mean acceptance probability."""
    return float(_read(kernel, "_mean_accept_prob"))


# ---- optimisers ---------------------------------------------------------------------------------

def pending_optimiser_state(optim, param_name: str):
    """Pop the state that ``PyroOptim.set_state`` left for ``param_name`` (None if there is none)."""
    return _read(optim, "_state_waiting_to_be_consumed").pop(param_name, None)


# ---- trace sites ---------------------------------------------------------------------------------

def is_deterministic(site: dict) -> bool:
    """Whether a trace site is a function of the latents, observed in the trace but not data: a
    ``pyro.deterministic`` site, or the site a reparameteriser (``poutine.reparam``: ``LocScaleReparam`` and the
    others) leaves in the original's place, an observed ``Delta`` at the value computed from its new latents."""
    check = getattr(pyro.infer.inspect, "site_is_deterministic", None)
    if check is None:
        raise _missing("pyro.infer.inspect", "site_is_deterministic")
    if check(site):
        return True
    fn = site.get("fn")
    while isinstance(fn, (dist.MaskedDistribution, dist.Independent, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return bool(site.get("is_observed")) and isinstance(fn, dist.Delta)


# ---- pyro.infer.SVI.step, copied by pyro_bdl.inference.svi.SVI ----------------------------------

#: :func:`svi_step_fingerprint` of ``pyro.infer.SVI.step`` in the checked versions (the same code in both).
SVI_STEP_FINGERPRINT = "d603cba1917a979b"


def svi_step_fingerprint() -> str:
    """A hash of the code of the installed ``pyro.infer.SVI.step``, without its docstring and comments
    (``ast.unparse`` of its body): it changes when the step does, not when it is reformatted."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(SVI.step)))
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    code = "\n".join(ast.unparse(node) for node in body)
    return hashlib.sha256(code.encode()).hexdigest()[:16]
