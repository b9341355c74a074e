"""Inference methods: one table, :data:`METHODS`, maps a method name to its runner and settings.

Every runner has the signature ``run(model, data, *, guide, progress, **settings) -> Draws``.
:func:`pyro_bdl.fit` looks the method up here, checks the settings, and turns the
:class:`~pyro_bdl.inference.base.Draws` into a :class:`~pyro_bdl.result.FitResult`.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .base import Draws, latent_sites, observed_sites

__all__ = ["Method", "METHODS", "get_method", "Domain", "SETTING_DOMAINS", "Draws", "latent_sites", "observed_sites"]


@dataclass(frozen=True)
class Method:
    """An inference method: name, family, one-line summary, runner and default settings."""

    name: str
    family: str  # "svi", "point", "mcmc", "importance" or "ensemble"
    summary: str
    run: Callable[..., Draws]
    defaults: Mapping[str, Any]
    takes_guide: bool = False
    resumable: bool = True  # accepts checkpoint=... (all but importance sampling, which has no long loop)

    def resolve_settings(self, settings: Mapping[str, Any]) -> dict:
        """Defaults filled in; unknown settings rejected with the list of known ones."""
        unknown = sorted(k for k, v in settings.items() if k not in self.defaults and v is not None)
        if unknown:
            raise ValueError(
                f"unknown setting {', '.join(map(repr, unknown))} for inference '{self.name}'; "
                f"its settings are: {', '.join(self.defaults)}"
            )
        resolved = dict(self.defaults)
        resolved.update({k: self._number(k, v) for k, v in settings.items() if v is not None})
        return resolved

    def _number(self, key: str, value):
        """A numeric setting (its default is a number, or it has a :data:`SETTING_DOMAINS` entry) as that
        number: text such as the CLI's ``--set steps=500`` is read, whole numbers stay whole, and the value
        must lie in the setting's domain; anything else is a clear error."""
        domain = SETTING_DOMAINS.get(key)
        default = self.defaults[key]
        if domain is None and (isinstance(default, bool) or not isinstance(default, (int, float))):
            return value  # flags (pyro_bdl.inference.base.as_flag reads text too) and names
        kind = domain.kind if domain is not None else type(default)
        what = f"setting '{key}' of inference '{self.name}'"
        number = value
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                raise ValueError(f"{what} must be a number, got {value!r}") from None
        if isinstance(number, bool) or not isinstance(number, numbers.Real) or math.isnan(number):
            raise ValueError(f"{what} must be a number, got {value!r}")
        if kind is int:  # a count
            if not math.isfinite(number) or number != int(number):
                raise ValueError(f"{what} must be a whole number, got {value!r}")
            number = int(number)
        else:
            number = float(number)
        if domain is not None and not domain.admits(number):
            raise ValueError(f"{what} must be {domain.describe()}, got {value!r}")
        return number


@dataclass(frozen=True)
class Domain:
    """The values a numeric setting admits: ``kind`` (``int``: a count, or ``float``) in the interval from
    ``low`` to ``high``, each end included unless ``open_low`` / ``open_high``; infinity only where an
    end is infinite and ``finite`` is False (``grad_clamp=inf`` means no clamp; ``lr=inf`` means nothing)."""

    kind: type
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    open_high: bool = False
    finite: bool = False

    def admits(self, x) -> bool:
        above = x > self.low if self.open_low else x >= self.low
        below = x < self.high if self.open_high else x <= self.high
        return above and below and (math.isfinite(x) or not self.finite)

    def describe(self) -> str:
        """E.g. 'a whole number >= 1', 'a finite number > 0', 'a number in (0, 1)'."""
        noun = "a whole number" if self.kind is int else ("a finite number" if self.finite else "a number")
        if self.high == math.inf:
            return f"{noun} {'>' if self.open_low else '>='} {self.low:g}"
        return f"{noun} in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"


#: What each numeric setting admits, for every method that has it (the one place these are declared;
#: ``batch_size``'s default, None = the whole data, shows no type, so its kind comes from here).
SETTING_DOMAINS: dict[str, Domain] = {
    "steps": Domain(int, 1), "samples": Domain(int, 1), "chains": Domain(int, 1), "warmup": Domain(int, 0),
    "particles": Domain(int, 1), "members": Domain(int, 1), "batch_size": Domain(int, 1),
    "max_tree_depth": Domain(int, 1),
    "lr": Domain(float, 0, open_low=True, finite=True), "grad_clamp": Domain(float, 0, open_low=True),
    "lr_hold": Domain(float, 0, 1, open_high=True),
    "target_accept": Domain(float, 0, 1, open_low=True, open_high=True),
    "p": Domain(float, 0, 1, open_high=True),  # the dropout probability
}


def _svi_methods():
    from . import svi

    adam = svi.ADAM_SETTINGS  # the optimiser's (svi.make_svi)
    common = {"steps": 2000, "lr": 0.02, "particles": 1, "samples": 1000, "batch_size": None, **adam,
              "jit": False, "vectorize": False, "local_reparam": False}  # see pyro_bdl.inference.svi
    return [
        Method("svi", "svi", "SVI, Trace_ELBO, reparameterised gradients (guide: normal | mvn | meanfield | callable)",
               svi.run_svi, common, takes_guide=True),
        Method("svi-meanfield", "svi", "SVI, TraceMeanField_ELBO: mean-field Gaussian guide, analytic KL where it exists",
               svi.run_svi_meanfield, common, takes_guide=True),
        Method("bbvi", "svi", "black-box VI: score-function gradients (TraceGraph_ELBO) with a decaying-average baseline",
               svi.run_bbvi, {"steps": 2000, "lr": 0.02, "particles": 4, "samples": 1000, "batch_size": None,
                             **adam}, takes_guide=True),
        Method("map", "point", "MAP point estimate (AutoDelta), maximises log p(y, theta)",
               svi.run_map, {"steps": 2000, "lr": 0.02, "batch_size": None, **adam}),
        Method("mle", "point", "maximum likelihood (AutoDelta with the priors dropped), maximises log p(y | theta)",
               svi.run_mle, {"steps": 2000, "lr": 0.02, "batch_size": None, **adam}),
    ]


def _mcmc_methods():
    from .mcmc import run_mcmc

    hmc_defaults = {"samples": 1000, "warmup": 500, "chains": 2, "target_accept": 0.8, "jit": False, "full_mass": False,
                   "kernel": "zoo"}  # "zoo" (pyro_bdl.inference.zoo_mcmc) or "pyro" (Pyro's NUTS / HMC)
    return [
        Method("nuts", "mcmc", "No-U-Turn sampler (adaptive HMC), the gold standard",
               functools.partial(run_mcmc, "nuts"), {**hmc_defaults, "max_tree_depth": 10}),
        Method("hmc", "mcmc", "Hamiltonian Monte Carlo, trajectory length pi/2, adapted step size and mass matrix (diagonal, or dense: full_mass)",
               functools.partial(run_mcmc, "hmc"), hmc_defaults),
        Method("metropolis", "mcmc", "random-walk Metropolis, step size adapted to 23.4% acceptance",
               functools.partial(run_mcmc, "metropolis"), {"samples": 5000, "warmup": 2000, "chains": 2}),
    ]


def _network_methods():
    from .dropout import run_mc_dropout
    from .ensemble import run_ensemble
    from .svi import ADAM_SETTINGS as adam

    return [
        Method("mc-dropout", "svi", "MC dropout (Gal & Ghahramani): dropout + prior-tied weight decay, dropout kept on at "
               "prediction; tau = 1/sigma^2", run_mc_dropout,
               {"p": 0.05, "steps": 3000, "lr": 0.01, "samples": 200, "batch_size": None, **adam}),
        Method("ensemble", "ensemble", "deep ensemble: independently initialised MAP fits, one chain each",
               run_ensemble, {"members": 5, "steps": 2000, "lr": 0.01, "batch_size": None, **adam}),
    ]


def _importance_methods():
    from .importance import run_importance

    return [
        Method("importance", "importance", "self-normalised importance sampling (proposal: laplace | prior), reports weight ESS",
               run_importance, {"samples": 4000, "proposal": "laplace"}, resumable=False),
    ]


METHODS: dict[str, Method] = {
    m.name: m for m in _svi_methods() + _mcmc_methods() + _importance_methods() + _network_methods()
}


def get_method(name: str) -> Method:
    """The :class:`Method` called ``name``; a clear error for unknown names."""
    if name not in METHODS:
        raise ValueError(f"unknown inference method '{name}'; known methods: {', '.join(METHODS)}")
    return METHODS[name]
