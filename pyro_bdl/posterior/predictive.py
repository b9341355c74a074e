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

import functools
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.messenger import Messenger

from pyro_bdl.inference.base import deterministic_sites
from pyro_bdl.inference.enumeration import enumerated_sites, marginal_log_likelihood
from pyro_bdl.posterior.uncertainty import predictive_moments, regression_summary
from pyro_bdl.storage.checkpoint import kept_rng

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
    latent_variance : (chains, draws, *obs_shape), for a likelihood that declares it (``fn.latent_variance``: a
        Gaussian process's predictive, the latent function marginalised): the part of ``variance`` that is
        uncertainty about the mean, counted as epistemic by :func:`summarise`.
    """

    mean: dict
    variance: dict
    draws: dict
    log_likelihood: dict
    observed: dict
    probs: dict
    gaussian: dict
    deterministic: dict = field(default_factory=dict)
    latent_variance: dict = field(default_factory=dict)


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


class _Unbroadcast(Exception):
    """A site of a run under the plate of draws holds more than the draws times its own elements."""


class _Bounded(Messenger):
    """Stops a run under a plate of ``count`` draws at the first sample site whose batch holds more elements than
    ``count`` times its batch in ``ref`` (a one-draw trace): a program indexing with a drawn value (an HMM's
    ``probs_x[x]``) multiplies its arrays by the draws at every step, 2 ** 30 elements by its 30th."""

    def __init__(self, ref, count: int):
        super().__init__()
        self.ref, self.count = ref, count

    def _pyro_post_sample(self, msg):
        node = self.ref.nodes.get(msg["name"])
        if node is None or node["type"] != "sample" or not hasattr(msg["fn"], "batch_shape"):  # a plate's subsample
            return
        if msg["fn"].batch_shape.numel() > self.count * max(1, node["fn"].batch_shape.numel()):
            raise _Unbroadcast(msg["name"])


def _vectorised(model, samples: dict, data: dict, sites: list[str], computed, extra: int):
    """Every posterior draw in one run of the model under a plate over the draws (left of the model's own
    plates, as Pyro's parallel ``Predictive``): the same outputs as the loop, or None when the model does not
    broadcast over that plate (e.g. ``X @ w`` with a batch of ``w``) or disagrees with the loop on the first
    draw."""
    first = next(iter(samples.values()))
    chains, num = first.shape[:2]
    S = chains * num
    flat = {k: v.reshape((S,) + tuple(v.shape[2:])) for k, v in samples.items() if k not in computed}
    ref = poutine.trace(poutine.condition(model, data={k: v[0] for k, v in flat.items()})).get_trace(**data)
    nesting = max((-f.dim for node in ref.nodes.values() if node["type"] == "sample"
                   for f in node["cond_indep_stack"] if f.vectorized and f.dim is not None), default=0)
    cond = {}
    for k, v in flat.items():
        node = ref.nodes.get(k)
        if node is None or node["type"] != "sample":
            return None
        cond[k] = v.reshape((S,) + (1,) * (nesting - len(node["fn"].batch_shape)) + tuple(v.shape[1:]))

    def run(count: int, quiet: bool = False):
        """The model on the first ``count`` draws under the plate of draws; None where shapes do not broadcast
        over it (as one draw at a time: every site's batch shape is the draws' then its own).  ``quiet``: the
        program's own warnings not shown (a probe runs it as it was not written to run)."""
        try:
            with warnings.catch_warnings(), _Bounded(ref, count), \
                    pyro.plate("_pyro_bdl_draws", count, dim=-nesting - 1):
                if quiet:
                    warnings.simplefilter("ignore")
                trace = poutine.trace(poutine.condition(model, data={k: v[:count] for k, v in cond.items()})) \
                    .get_trace(**data)
        except (RuntimeError, ValueError, IndexError, _Unbroadcast):
            return None
        for s in sites:
            batch = tuple(ref.nodes[s]["fn"].batch_shape)
            if tuple(trace.nodes[s]["fn"].batch_shape) != (count,) + (1,) * (nesting - len(batch)) + batch:
                return None
        return trace

    # two draws first: a model that does not broadcast can make arrays of (draws x draws x ...) on all of them
    if run(min(S, 2), quiet=True) is None:
        return None
    trace = run(S)
    if trace is None:
        return None
    out = {key: {} for key in ("mean", "variance", "draws", "log_likelihood", "probs")}
    observed, gaussian, latent = {}, {}, {}
    for s in sites:
        fn, ref_fn = trace.nodes[s]["fn"], ref.nodes[s]["fn"]
        shape = tuple(ref_fn.batch_shape) + tuple(ref_fn.event_shape)
        if tuple(fn.batch_shape) != (S,) + (1,) * (nesting - len(ref_fn.batch_shape)) + tuple(ref_fn.batch_shape):
            return None
        ref_value = ref.nodes[s]["value"] if ref.nodes[s]["is_observed"] else ref_fn.sample()
        lp = fn.log_prob(ref_value.expand(tuple(fn.batch_shape) + tuple(fn.event_shape))).reshape((S,) + shape[:len(ref_fn.batch_shape)])
        if not torch.allclose(lp[0], ref_fn.log_prob(ref_value), rtol=1e-4, atol=1e-4):
            return None  # broadcast, but not as one draw at a time: keep the loop
        mean, var, sample = _moments(fn, extra)

        def per_draw(t, lead=()):
            return t.reshape(tuple(lead) + (chains, num) + shape).cpu().numpy()

        out["mean"][s], out["variance"][s] = per_draw(mean), per_draw(var)
        if hasattr(fn, "latent_variance"):
            latent[s] = per_draw(fn.latent_variance)
        out["draws"][s] = np.moveaxis(per_draw(sample, (extra,)), 0, 2)
        gaussian[s] = isinstance(fn, dist.Normal)
        if isinstance(fn, dist.Categorical):
            out["probs"][s] = fn.probs.reshape((chains, num) + tuple(fn.probs.shape[-2:])).cpu().numpy()
        if trace.nodes[s]["is_observed"]:
            value = trace.nodes[s]["value"]
            out["log_likelihood"][s] = per_draw(fn.log_prob(value))
            observed[s] = value.reshape(shape).cpu().numpy()
    deterministic = {name: trace.nodes[name]["value"].reshape((chains, num) + tuple(ref.nodes[name]["value"].shape)).cpu().numpy()
                     for name in computed}
    return PredictiveDraws(**{key: {s: v for s, v in per_site.items()} for key, per_site in out.items()},
                           observed=observed, gaussian=gaussian, deterministic=deterministic, latent_variance=latent)


@torch.no_grad()
def check_draw_shapes(model, samples: dict, data: dict) -> None:
    """Refuse, naming the site, new data under which a latent site of the posterior has another shape than its
    draws (``samples``: site -> (chains, draws, *shape)): a hierarchical model's group effects, drawn for the groups
    it was fitted on, asked for another number of groups.  One run of the model on the prior, leaving the random
    streams as they were."""
    with kept_rng():
        trace = poutine.trace(model).get_trace(**data)
    for name, node in trace.nodes.items():
        if node["type"] != "sample" or node["is_observed"] or name not in samples:
            continue
        fitted, wanted = tuple(samples[name].shape[2:]), tuple(node["value"].shape)
        if fitted != wanted:
            raise ValueError(
                f"the new data give latent site '{name}' the shape {wanted}, but its posterior draws have the shape "
                f"{fitted} (from the data the model was fitted on): its entries belong to the rows or groups of that "
                f"data (a hierarchical model's group effects, say), and the posterior says nothing of others.  "
                f"Predict with data of the same groups, or write the new groups into the model (draw their effects "
                f"from the population: theta_new ~ N(mu, tau)) and predict that site")


def _enumerated_marginal(function):
    """``predictive_draws`` whose log-likelihood, for a model with discrete sites marked for enumeration
    (:mod:`pyro_bdl.inference.enumeration`), is the marginal one: log p(y_i | theta_s) with those sites summed out
    within y_i's plates (:func:`~pyro_bdl.inference.enumeration.marginal_log_likelihood`), not log p(y_i | theta_s,
    z_i) at a draw of z_i from its prior.  The predictive draws and moments stay those given such a draw: y for a new
    row, whose z is drawn as the model draws it."""
    @functools.wraps(function)
    def predictive(model, samples: dict, data: dict, sites: list[str]) -> PredictiveDraws:
        pred = function(model, samples, data, sites)
        if samples and pred.log_likelihood and enumerated_sites(model, data, strict=False):
            pred.log_likelihood = marginal_log_likelihood(model, samples, data, list(pred.log_likelihood))
        return pred

    return predictive


@_enumerated_marginal
@torch.no_grad()
def predictive_draws(model, samples: dict, data: dict, sites: list[str]) -> PredictiveDraws:
    """The predictive at ``sites`` for every posterior draw: in one vectorised run of ``model(**data)`` where
    the model broadcasts over a plate of draws (the zoo's networks do), else one run per draw."""
    first = next(iter(samples.values()), None)
    chains, num = first.shape[:2] if first is not None else (1, 1)  # no latent site: the model as it is, once
    extra = max(1, math.ceil(MIN_PREDICTIVE_DRAWS / (chains * num)))
    computed_names = deterministic_sites(model, data)
    if chains * num > 1:
        fast = _vectorised(model, samples, data, sites, computed_names, extra)
        if fast is not None:
            return fast
    out = {key: {s: [] for s in sites} for key in ("mean", "variance", "draws", "log_likelihood", "probs",
                                                   "latent_variance")}
    observed, gaussian = {}, {}
    computed = {name: [] for name in computed_names}  # from the latents, for these data
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
                if hasattr(node["fn"], "latent_variance"):
                    out["latent_variance"][s].append(node["fn"].latent_variance)
                gaussian[s] = isinstance(node["fn"], dist.Normal)
                if isinstance(node["fn"], dist.Categorical):
                    out["probs"][s].append(node["fn"].probs)
                if node["is_observed"]:
                    out["log_likelihood"][s].append(node["fn"].log_prob(node["value"]))
                    observed[s] = node["value"].cpu().numpy()

    def stack(values):
        return torch.stack(values).reshape((chains, num) + values[0].shape).cpu().numpy()

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
        table = regression_summary(mean, sd, prob)
        if site in pred.latent_variance:  # the latent function's part of each draw's variance is epistemic
            latent = pred.latent_variance[site].reshape(mean.shape)
            aleatoric = (sd ** 2 - latent).clip(min=0.0).mean(0)
            table["aleatoric_sd"] = np.sqrt(aleatoric)
            table["epistemic_sd"] = np.sqrt((table["sd"].to_numpy() ** 2 - aleatoric).clip(min=0.0))
        return table
    table = predictive_moments(mean, sd)
    draws = pred.draws[site].reshape((-1, mean.shape[1]))  # (S * k, n)
    tail = (1.0 - prob) / 2.0
    table["lower"], table["upper"] = np.quantile(draws, [tail, 1.0 - tail], axis=0)
    return table
