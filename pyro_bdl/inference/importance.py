r"""Self-normalised importance sampling.

Draw :math:`\theta_s \sim q`, weight :math:`w_s \propto p(y, \theta_s) / q(\theta_s)`, normalise.
Posterior expectations are :math:`\sum_s \bar w_s f(\theta_s)`; their accuracy is governed by the
effective sample size of the weights, :math:`\mathrm{ESS} = (\sum_s w_s)^2 / \sum_s w_s^2`.

Proposals:

* ``"prior"``: :math:`q = p(\theta)`, so :math:`w_s = p(y \mid \theta_s)` (the textbook case; it
  collapses when the data are informative).
* ``"laplace"`` (default): a multivariate Student-t (5 degrees of freedom, heavier tails than the
  target) centred on a short full-rank SVI fit, in the unconstrained space; the Jacobian of the
  map to the constrained space enters the weights through Pyro's potential function.

The posterior draws handed on are a systematic resample of the weighted draws (so the ArviZ
posterior is an ordinary unweighted sample); the log weights are kept in ``sample_stats``.
"""

from __future__ import annotations

import numpy as np
import torch

import pyro.distributions as dist
from pyro import poutine
from pyro.infer.autoguide import AutoMultivariateNormal
from pyro.infer.mcmc.util import initialize_model
from pyro.infer import Trace_ELBO

from .base import Draws, latent_sites, observed_sites
from .svi import optimise


def effective_sample_size(log_weights: torch.Tensor) -> float:
    """Kish's ESS of unnormalised log weights: (sum w)^2 / sum w^2."""
    w = torch.softmax(log_weights.double(), dim=0)
    return float(1.0 / (w**2).sum())


def systematic_resample(log_weights: torch.Tensor, num: int) -> torch.Tensor:
    """Indices of a systematic resample of size ``num`` (lower variance than multinomial)."""
    w = torch.softmax(log_weights.double(), dim=0)
    positions = (torch.rand(1, dtype=torch.float64) + torch.arange(num, dtype=torch.float64)) / num
    return torch.searchsorted(torch.cumsum(w, 0), positions).clamp(max=len(w) - 1)


@torch.no_grad()
def _prior_proposal(model, data, num):
    names = latent_sites(model, data)
    obs = observed_sites(model, data)
    values, log_w = {n: [] for n in names}, []
    for _ in range(num):
        trace = poutine.trace(model).get_trace(**data)
        trace.compute_log_prob()
        log_w.append(sum(trace.nodes[o]["log_prob_sum"] for o in obs))
        for n in names:
            values[n].append(trace.nodes[n]["value"])
    return {n: torch.stack(v) for n, v in values.items()}, torch.stack(log_w)


def _laplace_proposal(model, data, num, *, steps, lr, progress):
    guide = AutoMultivariateNormal(model)
    optimise(model, guide, Trace_ELBO(), data, steps=steps, lr=lr, progress=progress, desc="importance proposal")
    _, potential_fn, transforms, _ = initialize_model(model, model_kwargs=data)
    with torch.no_grad():
        fitted = guide.get_posterior()
        loc, scale_tril = fitted.loc.detach(), fitted.scale_tril.detach()
        q = dist.MultivariateStudentT(torch.tensor(5.0), loc, scale_tril)
        z = q.sample((num,))
        log_q = q.log_prob(z)
        values = {}
        log_p = torch.empty(num)
        for s in range(num):
            unconstrained = {site["name"]: u for site, u in guide._unpack_latent(z[s])}
            # potential = -log p(y, theta(u)) - log|d theta / d u|: the density of u under the model.
            log_p[s] = -potential_fn(unconstrained)
            for name, u in unconstrained.items():
                values.setdefault(name, []).append(transforms[name].inv(u))
    return {n: torch.stack(v) for n, v in values.items()}, log_p - log_q


def run_importance(model, data: dict, *, samples: int, proposal: str, steps: int, lr: float, progress: bool) -> Draws:
    if proposal == "prior":
        values, log_w = _prior_proposal(model, data, samples)
    elif proposal == "laplace":
        values, log_w = _laplace_proposal(model, data, samples, steps=steps, lr=lr, progress=progress)
    else:
        raise ValueError(f"unknown importance proposal '{proposal}'; choose 'laplace' or 'prior'")
    log_w = torch.where(torch.isnan(log_w), torch.tensor(-float("inf")), log_w)
    idx = systematic_resample(log_w, samples)
    draws = {n: v[idx].unsqueeze(0) for n, v in values.items()}
    ess = effective_sample_size(log_w)
    stats = {"log_weight": log_w[idx].unsqueeze(0).numpy()}
    info = {"importance_ess": ess, "importance_draws": samples, "proposal": proposal,
            "log_evidence": float(torch.logsumexp(log_w.double(), 0) - np.log(samples))}
    return Draws(draws, sample_stats=stats, info=info)
