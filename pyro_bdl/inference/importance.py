r"""Self-normalised importance sampling.

Draw :math:`\theta_s \sim q`, weight :math:`w_s \propto p(y, \theta_s) / q(\theta_s)`, normalise.
Posterior expectations are :math:`\sum_s \bar w_s f(\theta_s)`; their accuracy is governed by the
effective sample size of the weights, :math:`\mathrm{ESS} = (\sum_s w_s)^2 / \sum_s w_s^2`.

Proposals:

* ``"prior"``: :math:`q = p(\theta)`, so :math:`w_s = p(y \mid \theta_s)` (the textbook case; it
  collapses when the data are informative).
* ``"laplace"`` (default): a multivariate Student-t (5 degrees of freedom, heavier tails than the
  target) at the Laplace approximation in the unconstrained space: the mode found by L-BFGS and
  the inverse Hessian there.  The Jacobian of the map to the constrained space enters the
  weights through Pyro's potential function.

The posterior draws handed on are a systematic resample of the weighted draws (so the ArviZ
posterior is an ordinary unweighted sample); the log weights are kept in ``sample_stats``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.mcmc.util import initialize_model

from pyro_bdl.inference.base import ConvergenceWarning, Draws, latent_sites, observed_sites
from pyro_bdl.inference.diagnose import JudgeWeights
from pyro_bdl.inference.outputs import MethodInfo
from pyro_bdl.inference.method import Method, register_method

#: Degrees of freedom of the Student-t proposal: heavier tails than the Gaussian it approximates.
PROPOSAL_DF = 5.0


def effective_sample_size(log_weights: torch.Tensor) -> float:
    """Kish's ESS of unnormalised log weights: (sum w)^2 / sum w^2."""
    w = torch.softmax(log_weights.double(), dim=0)
    return float(1.0 / (w**2).sum())


def systematic_resample(log_weights: torch.Tensor, num: int) -> torch.Tensor:
    """Indices of a systematic resample of size ``num`` (lower variance than multinomial)."""
    w = torch.softmax(log_weights.double(), dim=0)
    like = {"dtype": torch.float64, "device": log_weights.device}
    positions = (torch.rand(1, **like) + torch.arange(num, **like)) / num
    return torch.searchsorted(torch.cumsum(w, 0), positions).clamp(max=len(w) - 1)


@torch.no_grad()
def _prior_proposal(model, data, num):
    names = latent_sites(model, data)
    obs = observed_sites(model, data)
    values, log_w = {n: [] for n in names}, []
    for _ in range(num):
        trace = poutine.trace(model).get_trace(**data)
        trace.compute_log_prob()
        terms = [trace.nodes[o]["log_prob_sum"] for o in obs]  # none for a density: every weight is 1
        log_w.append(sum(terms[1:], terms[0]) if terms else torch.zeros((), device=trace.nodes[names[0]]["value"].device))
        for n in names:
            values[n].append(trace.nodes[n]["value"])
    return {n: torch.stack(v) for n, v in values.items()}, torch.stack(log_w)


def _laplace_proposal(model, data, num):
    """Laplace approximation in the unconstrained space: mode by L-BFGS, covariance = inverse Hessian."""
    params, potential_fn, transforms, _ = initialize_model(model, model_kwargs=data)
    names = list(params)
    shapes = [params[n].shape for n in names]
    sizes = [params[n].numel() for n in names]

    def unflatten(z):
        return {n: part.reshape(shape) for n, part, shape in zip(names, torch.split(z, sizes), shapes)}

    def potential(z):
        return potential_fn(unflatten(z))

    z = torch.cat([params[n].detach().reshape(-1) for n in names]).clone().requires_grad_(True)
    optimiser = torch.optim.LBFGS([z], lr=1.0, max_iter=500, tolerance_grad=1e-6, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        value = potential(z)
        value.backward()
        return value

    try:
        optimiser.step(closure)
    except ValueError as exc:  # a distribution given invalid (non-finite) arguments along the search
        if "invalid values" not in str(exc):
            raise
        raise _no_mode(names) from None
    mode = z.detach()
    if not (bool(torch.isfinite(mode).all()) and math.isfinite(float(potential(mode)))):
        raise _no_mode(names)
    hessian = torch.autograd.functional.hessian(potential, mode).double()
    hessian = 0.5 * (hessian + hessian.T)
    eigval, eigvec = torch.linalg.eigh(hessian)
    if eigval.min() <= 0:
        warnings.warn("importance: the Hessian at the mode is not positive definite; its negative curvature is "
                      "replaced by a broad proposal", ConvergenceWarning, stacklevel=3)
    eigval = eigval.clamp(min=1e-3 * eigval.abs().max().clamp(min=1e-6))
    cov = (eigvec / eigval) @ eigvec.T
    scale_tril = torch.linalg.cholesky(0.5 * (cov + cov.T)).to(mode.dtype)
    q = dist.MultivariateStudentT(torch.tensor(PROPOSAL_DF, dtype=mode.dtype, device=mode.device), mode, scale_tril)
    with torch.no_grad():
        zs = q.sample((num,))
        log_q = q.log_prob(zs)
        log_p = torch.empty(num, dtype=mode.dtype, device=mode.device)
        values = {n: [] for n in names}
        for s in range(num):
            unconstrained = unflatten(zs[s])
            # potential = -log p(y, theta(u)) - log|d theta / d u|: the model's density of u.
            log_p[s] = -potential_fn(unconstrained)
            for n, u in unconstrained.items():
                values[n].append(transforms[n].inv(u))
    return {n: torch.stack(v) for n, v in values.items()}, log_p - log_q


def _no_mode(names) -> ValueError:
    return ValueError(f"importance: the search for the Laplace proposal's mode (L-BFGS over {', '.join(names)}) left the "
                      f"region where the model's density is finite: the density may have no mode (as a funnel's has "
                      f"not, where a scale goes to 0). Sample it with nuts, write it non-centred, or use "
                      f"proposal='prior' (--set proposal=prior)")


@dataclass
class ImportanceInfo(MethodInfo):
    """What ``importance`` returns beside its draws.

    Attributes
    ----------
    importance_ess : the effective sample size of the normalised weights, ``1 / sum(w^2)``.
    importance_draws : the number of draws from the proposal.
    proposal : ``"laplace"`` or ``"prior"``.
    log_evidence : the log of the mean unnormalised weight, an estimate of ``log p(y)``.
    """

    EVIDENCE: ClassVar[str] = ("importance sampling: the mean of the unnormalised weights p(y, theta) / q(theta) "
                               "(unbiased for p(y); its log's Monte Carlo sd about sqrt(1 / ESS - 1 / samples))")
    importance_ess: float = math.nan
    importance_draws: int = 0
    proposal: str | None = None
    log_evidence: float = math.nan

    def evidence_estimate(self) -> float:
        return self.log_evidence


def run_importance(model, data: dict, *, samples: int, proposal: str, progress: bool) -> Draws:
    if proposal == "prior":
        values, log_w = _prior_proposal(model, data, samples)
    elif proposal == "laplace":
        values, log_w = _laplace_proposal(model, data, samples)
    else:
        raise ValueError(f"unknown importance proposal '{proposal}'; choose 'laplace' or 'prior'")
    log_w = torch.where(torch.isnan(log_w), torch.full_like(log_w, -float("inf")), log_w)
    idx = systematic_resample(log_w, samples)
    draws = {n: v[idx].unsqueeze(0) for n, v in values.items()}
    ess = effective_sample_size(log_w)
    stats = {"log_weight": log_w[idx].unsqueeze(0).cpu().numpy()}
    info = ImportanceInfo(float(ess), samples, proposal, float(torch.logsumexp(log_w.double(), 0) - np.log(samples)))
    return Draws(draws, sample_stats=stats, info=info)


def _register() -> None:
    register_method(Method(
        "importance", "importance", "self-normalised importance sampling (proposal: laplace | prior), reports weight ESS",
        run_importance, {"samples": 4000, "proposal": "laplace"}, requires=frozenset({"continuous", "low-dimensional"}),
        resumable=False, quick={"samples": 200}, outputs=ImportanceInfo, diagnose=JudgeWeights()))


_register()
