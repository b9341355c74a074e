r"""Posterior predictive and pointwise log-likelihood: one pass over the posterior draws.

For each posterior draw :math:`\theta_s` the model is run conditioned on :math:`\theta_s`; at each
likelihood site we read the conditional distribution :math:`p(y \mid x, \theta_s)` and keep its mean,
variance, a few draws from it and, when :math:`y` is observed, :math:`\log p(y \mid x, \theta_s)`.
The predictive summary follows the law of total variance:

.. math::

    \mathbb E[y] = \overline{\mu_s}, \qquad
    \mathrm{Var}[y] = \underbrace{\overline{\sigma_s^2}}_{\text{aleatoric}}
                    + \underbrace{\mathrm{Var}_s[\mu_s]}_{\text{epistemic}} .

This works for point estimates too (one draw: all the spread is aleatoric).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

import pyro.distributions as dist
from pyro import poutine

from .inference.base import deterministic_sites
from .uncertainty import predictive_moments, regression_summary

__all__ = ["PredictiveDraws", "predictive_draws", "summarise"]

#: Predictive draws pooled for intervals: at least this many per data point.
MIN_PREDICTIVE_DRAWS = 2000


@dataclass
class PredictiveDraws:
    """Per likelihood site, arrays with leading dims (chains, draws).

    mean, variance : (chains, draws, *obs_shape), moments of p(y | x, theta).
    draws : (chains, draws, k, *obs_shape), k draws of y ~ p(y | x, theta) per posterior draw.
    log_likelihood : (chains, draws, *obs_shape) of log p(y_obs | x, theta), when y is observed.
    observed : the observed values, when y is observed.
    probs : (chains, draws, n, C) class probabilities, for Categorical likelihoods.
    gaussian : site -> True when its likelihood is Normal (exact predictive intervals).
    deterministic : (chains, draws, *shape) of each ``pyro.deterministic`` site, for these data.
    """

    mean: dict
    variance: dict
    draws: dict
    log_likelihood: dict
    observed: dict
    probs: dict
    gaussian: dict
    deterministic: dict = field(default_factory=dict)


def _moments(fn, extra: int):
    sample = fn.sample((extra,))
    try:
        mean, var = fn.mean, fn.variance
        if isinstance(fn, dist.Categorical):  # class labels have no meaningful mean; keep the spread of draws
            raise NotImplementedError
    except NotImplementedError:
        flt = sample.double()
        mean, var = flt.mean(0), flt.var(0) if extra > 1 else torch.zeros_like(flt[0])
    return mean, var, sample


@torch.no_grad()
def predictive_draws(model, samples: dict, data: dict, sites: list[str]) -> PredictiveDraws:
    """Run ``model(**data)`` once per posterior draw; collect the predictive at ``sites``."""
    first = next(iter(samples.values()))
    chains, num = first.shape[:2]
    extra = max(1, math.ceil(MIN_PREDICTIVE_DRAWS / (chains * num)))
    out = {key: {s: [] for s in sites} for key in ("mean", "variance", "draws", "log_likelihood", "probs")}
    observed, gaussian = {}, {}
    computed = {name: [] for name in deterministic_sites(model, data)}  # from the latents, for these data
    for c in range(chains):
        for i in range(num):
            draw = {name: value[c, i] for name, value in samples.items() if name not in computed}
            trace = poutine.trace(poutine.condition(model, data=draw)).get_trace(**data)
            for name, values in computed.items():
                values.append(trace.nodes[name]["value"])
            for s in sites:
                node = trace.nodes[s]
                mean, var, sample = _moments(node["fn"], extra)
                out["mean"][s].append(mean)
                out["variance"][s].append(var)
                out["draws"][s].append(sample)
                gaussian[s] = isinstance(node["fn"], dist.Normal)
                if isinstance(node["fn"], dist.Categorical):
                    out["probs"][s].append(node["fn"].probs)
                if node["is_observed"]:
                    out["log_likelihood"][s].append(node["fn"].log_prob(node["value"]))
                    observed[s] = node["value"].numpy()

    def stack(values):
        return torch.stack(values).reshape((chains, num) + values[0].shape).numpy()

    return PredictiveDraws(
        **{key: {s: stack(v) for s, v in per_site.items() if v} for key, per_site in out.items()},
        observed=observed,
        gaussian=gaussian,
        deterministic={name: stack(v) for name, v in computed.items()},
    )


def summarise(pred: PredictiveDraws, site: str, prob: float = 0.94) -> pd.DataFrame:
    """Per data point: ``mean``, ``sd`` (total), ``aleatoric_sd``, ``epistemic_sd``, ``lower``, ``upper``.

    For a Gaussian likelihood ``lower``/``upper`` are the exact quantiles of the predictive
    mixture (1/S) sum_s N(mu_s, sigma_s^2); for any other likelihood they are quantiles of the
    pooled predictive draws.
    """
    mean = pred.mean[site].reshape((-1, int(np.prod(pred.mean[site].shape[2:], dtype=int))))  # (S, n)
    sd = np.sqrt(pred.variance[site].reshape(mean.shape))
    if pred.gaussian.get(site, False):
        return regression_summary(mean, sd, prob)
    table = predictive_moments(mean, sd)
    draws = pred.draws[site].reshape((-1, mean.shape[1]))  # (S * k, n)
    tail = (1.0 - prob) / 2.0
    table["lower"], table["upper"] = np.quantile(draws, [tail, 1.0 - tail], axis=0)
    return table
