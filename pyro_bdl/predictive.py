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
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from pyro import poutine

__all__ = ["PredictiveDraws", "evaluate", "summarise"]

#: Predictive draws pooled for intervals: at least this many per data point.
MIN_PREDICTIVE_DRAWS = 2000


@dataclass
class PredictiveDraws:
    """Per likelihood site, arrays with leading dims (chains, draws).

    mean, variance : (chains, draws, *obs_shape), moments of p(y | x, theta).
    draws : (chains, draws, k, *obs_shape), k draws of y ~ p(y | x, theta) per posterior draw.
    log_likelihood : (chains, draws, *obs_shape) of log p(y_obs | x, theta), when y is observed.
    observed : the observed values, when y is observed.
    """

    mean: dict
    variance: dict
    draws: dict
    log_likelihood: dict
    observed: dict


def _moments(fn, extra: int):
    sample = fn.sample((extra,))
    try:
        mean, var = fn.mean, fn.variance
    except NotImplementedError:
        mean, var = sample.mean(0), sample.var(0) if extra > 1 else torch.zeros_like(sample[0])
    return mean, var, sample


@torch.no_grad()
def evaluate(model, samples: dict, data: dict, sites: list[str]) -> PredictiveDraws:
    """Run ``model(**data)`` once per posterior draw; collect the predictive at ``sites``."""
    first = next(iter(samples.values()))
    chains, num = first.shape[:2]
    extra = max(1, math.ceil(MIN_PREDICTIVE_DRAWS / (chains * num)))
    out = {key: {s: [] for s in sites} for key in ("mean", "variance", "draws", "log_likelihood")}
    observed = {}
    for c in range(chains):
        for i in range(num):
            draw = {name: value[c, i] for name, value in samples.items()}
            trace = poutine.trace(poutine.condition(model, data=draw)).get_trace(**data)
            for s in sites:
                node = trace.nodes[s]
                mean, var, sample = _moments(node["fn"], extra)
                out["mean"][s].append(mean)
                out["variance"][s].append(var)
                out["draws"][s].append(sample)
                if node["is_observed"]:
                    out["log_likelihood"][s].append(node["fn"].log_prob(node["value"]))
                    observed[s] = node["value"].numpy()

    def stack(values):
        return torch.stack(values).reshape((chains, num) + values[0].shape).numpy()

    return PredictiveDraws(
        **{key: {s: stack(v) for s, v in per_site.items() if v} for key, per_site in out.items()},
        observed=observed,
    )


def summarise(pred: PredictiveDraws, site: str, prob: float = 0.94) -> pd.DataFrame:
    """Per data point: ``mean``, ``sd`` (total), ``aleatoric_sd``, ``epistemic_sd``, ``lower``, ``upper``.

    ``lower``/``upper`` bound the central ``prob`` interval of the pooled predictive draws.
    """
    mean = pred.mean[site].reshape((-1,) + pred.mean[site].shape[2:])  # (S, n)
    var = pred.variance[site].reshape(mean.shape)
    draws = pred.draws[site].reshape((-1,) + pred.draws[site].shape[3:])  # (S * k, n)
    aleatoric = var.mean(0)
    epistemic = mean.var(0)
    tail = (1.0 - prob) / 2.0
    lower, upper = np.quantile(draws, [tail, 1.0 - tail], axis=0)
    return pd.DataFrame(
        {
            "mean": mean.mean(0).reshape(-1),
            "sd": np.sqrt(aleatoric + epistemic).reshape(-1),
            "aleatoric_sd": np.sqrt(aleatoric).reshape(-1),
            "epistemic_sd": np.sqrt(epistemic).reshape(-1),
            "lower": lower.reshape(-1),
            "upper": upper.reshape(-1),
        }
    )
