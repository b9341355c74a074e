"""What every inference runner returns, and the site bookkeeping they share."""

from __future__ import annotations

import inspect
from enum import Enum
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pyro
import torch
from pyro import poutine

from pyro_bdl.inference.prototype import prototype_of

__all__ = ["Choice", "ConvergenceWarning", "Draws", "RunContext", "as_flag", "deterministic_sites", "latent_sites", "observed_sites", "with_deterministic",
           "model_params", "takes_minibatches"]


class Choice(str, Enum):
    """A setting's named values (a method's family, an ELBO): each compares, hashes, prints and formats as its
    text, so ``"mcmc"`` and ``Family.MCMC`` are one value.

    >>> class Colour(Choice):
    ...     RED = "red"
    >>> Colour("red") is Colour.RED, Colour.RED == "red", f"{Colour.RED}"
    (True, True, 'red')
    """

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def as_flag(value) -> bool:
    """A boolean setting given as a bool, a number or text (``--set jit=false``); unclear text is an error."""
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise ValueError(f"expected a boolean setting (true or false), got '{value}'")
        return value.lower() in ("true", "1", "yes", "on")
    return bool(value)


@dataclass(frozen=True)
class RunContext:
    """What a fit hands every inference method besides its settings.

    Attributes
    ----------
    model : the Pyro model, options bound; called as ``model(**data)``.
    data : its keyword arguments (in the units the model works in).
    progress : show a progress bar.
    checkpoint : a :class:`~pyro_bdl.storage.checkpoint.Checkpoint` to save progress in and resume from, or None.
    extra : what the model and the plan add for this method: the guide (methods that take one), where
        optimisation starts (``init_loc_fn``), the model's own runner arguments (e.g. MC dropout's sites).
    """

    model: Any
    data: dict
    progress: bool = True
    checkpoint: Any = None
    extra: dict = field(default_factory=dict)


@dataclass
class Draws:
    """The raw output of an inference runner.

    Attributes
    ----------
    samples : site name -> tensor of shape (chains, draws, *site_shape), constrained space.
    sample_stats : per-draw statistics (MCMC: diverging, step_size, n_steps, tree_depth, lp;
        importance: log_weight), each an array of shape (chains, draws).
    losses : SVI loss trace, shape (steps,), or None.
    guide : the fitted guide, for SVI-type methods.
    info : what the method returns beside the draws, its typed record (the method's
        :attr:`~pyro_bdl.inference.method.Method.outputs`: acceptance rate, importance ESS, the drift record, ...),
        or None.
    params : tensors to keep with the fit besides the draws, saved and restored with the model's own parameters
        (``params.pt``): what the method's predictive needs (its ``Method.predictive_model``), or learned
        parameters besides the model's (an amortised guide's encoder), name -> value.
    """

    samples: dict[str, torch.Tensor]
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    losses: np.ndarray | None = None
    guide: Any = None
    info: Any = None
    params: dict = field(default_factory=dict)


def latent_sites(model, data: dict) -> list[str]:
    """Names of the model's latent (unobserved, non-auxiliary) sample sites (its prototype trace,
    :mod:`pyro_bdl.inference.prototype`)."""
    return prototype_of(model, data).latent


def observed_sites(model, data: dict) -> list[str]:
    """Names of the model's observed sample sites (the likelihood terms; not ``pyro.deterministic`` sites)."""
    return prototype_of(model, data).observed


def deterministic_sites(model, data: dict) -> list[str]:
    """Names of the model's ``pyro.deterministic`` sites (functions of the latents: posterior, not likelihood)."""
    return prototype_of(model, data).deterministic


@torch.no_grad()
def with_deterministic(model, data: dict, samples: dict) -> dict:
    """``samples`` (site -> (chains, draws, *shape)) with the model's deterministic sites added: each
    computed from the latent draws by running ``model(**data)`` on them (unchanged if it has none)."""
    names = deterministic_sites(model, data)
    if not names:
        return samples
    chains, num = next(iter(samples.values())).shape[:2]
    values = {name: [] for name in names}
    for c in range(chains):
        for i in range(num):
            draw = {name: value[c, i] for name, value in samples.items() if name not in values}
            trace = poutine.trace(poutine.condition(model, data=draw)).get_trace(**data)
            for name in names:
                values[name].append(trace.nodes[name]["value"])
    return {**samples, **{name: torch.stack(v).reshape((chains, num) + v[0].shape) for name, v in values.items()}}


def model_params(model, data: dict) -> dict:
    """The model's own learned parameters (its ``pyro.param`` and ``pyro.module`` sites, not a guide's):
    name -> constrained value, detached: the param store's where it holds the site, else the initial value.  Empty
    for a model whose every unknown is a sample site."""
    store = pyro.get_param_store()
    return {name: (store[name] if name in store else initial).detach().clone()
            for name, initial in prototype_of(model, data).params.items()}


class ConvergenceWarning(UserWarning):
    """A fit finished but its diagnostics say the result should not be trusted."""


def takes_minibatches(model: Callable) -> bool:
    """Whether ``model`` subsamples its data: it takes a ``batch_size`` argument (as the networks do, for
    ``pyro.plate(..., subsample_size=batch_size)``) or any keyword.  True when no signature can be read
    (the model then decides).

    >>> takes_minibatches(lambda X, y=None, batch_size=None: None), takes_minibatches(lambda X, y=None: None)
    (True, False)
    """
    try:
        params = inspect.signature(model).parameters
    except (TypeError, ValueError):  # no signature to read (some builtins and C callables)
        return True
    return "batch_size" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
