"""Checks of fitted draws against an exact posterior, with tolerances from the Monte Carlo error.

A posterior mean estimated from draws of effective sample size ESS has standard error sd / sqrt(ESS);
a posterior sd has relative standard error about 1 / sqrt(2 ESS).  Checks allow K = 4.5 standard
errors, a two-sided event of probability below 1e-5 per check for a correct method.

ESS is measured, not assumed: ArviZ's ``ess`` (method "mean" / "sd") for MCMC, the number of
independent draws for SVI, and for importance sampling the Kish ESS of the weights combined
with the resampling (1 / ESS_eff = 1 / ESS_weights + 1 / draws).
"""

from __future__ import annotations

import arviz as az
import numpy as np

from pyro_bdl.inference import METHODS
from pyro_bdl.registry import get_model

K = 4.5


def flat_draws(result, site):
    """Draws of a site as (chains, draws, elements) numpy."""
    value = result.samples[site].double().numpy()
    return value.reshape(value.shape[0], value.shape[1], -1)


def ess(result, site, kind):
    """Effective sample size per element of ``site``; ``kind`` is ArviZ's "mean" or "sd"."""
    draws = flat_draws(result, site)
    family = METHODS[result.method].family
    if family == "mcmc":
        return np.array([float(az.ess(draws[:, :, j], method=kind)) for j in range(draws.shape[2])])
    n = draws.shape[0] * draws.shape[1]
    if family == "importance":
        w = result.info.importance_ess
        return np.full(draws.shape[2], 1.0 / (1.0 / w + 1.0 / n))
    return np.full(draws.shape[2], float(n))


def check_means(result, exact):
    """Every site's mean within K standard errors of the exact ``{site: (mean, sd)}``."""
    for site, (mean, sd) in exact.items():
        est = flat_draws(result, site).reshape(-1, np.size(mean.numpy())).mean(0)
        tol = K * sd.numpy().reshape(-1) / np.sqrt(ess(result, site, "mean"))
        err = np.abs(est - mean.numpy().reshape(-1))
        assert np.all(err < tol), f"{site}: mean {est} vs exact {mean.numpy()}, |err| {err} >= tol {tol}"


def check_sds(result, exact):
    """Every site's sd within K standard errors of the exact ``{site: (mean, sd)}``."""
    for site, (mean, sd) in exact.items():
        est = flat_draws(result, site).reshape(-1, np.size(mean.numpy())).std(0, ddof=1)
        sd = sd.numpy().reshape(-1)
        tol = K * sd / np.sqrt(2 * ess(result, site, "sd"))
        err = np.abs(est - sd)
        assert np.all(err < tol), f"{site}: sd {est} vs exact {sd}, |err| {err} >= tol {tol}"


def exact_posterior_of(result) -> dict:
    """The exact posterior of a zoo model's fit, ``{site: (mean, sd)}``, on the data the model saw (for a
    model that standardises, ``result.standardized_data``)."""
    return result.spec.hooks.exact_posterior(**result.standardized_data, **result.record.options)


def exact_posterior_on(model: str, data, options: dict) -> dict:
    """The zoo model's exact posterior on ``data`` (a Dataset), ``{site: (mean, sd)}``."""
    spec = get_model(model)
    return spec.hooks.exact_posterior(**spec.data_kwargs(data), **options)
