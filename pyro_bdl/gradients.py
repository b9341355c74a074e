r"""Gradient estimators of the ELBO, side by side: score function (REINFORCE) and reparameterised.

For :math:`q_\phi(\theta)` and :math:`f(\theta) = \log p(y, \theta) - \log q_\phi(\theta)`, both

.. math::

    \nabla_\phi \mathbb E_q[f] = \mathbb E_q[f(\theta)\, \nabla_\phi \log q_\phi(\theta)]
    \quad\text{(score function)} \qquad
    = \mathbb E_\epsilon[\nabla_\phi f(g_\phi(\epsilon))] \quad\text{(reparameterised)}

are unbiased; the reparameterised one usually has far lower variance.  :func:`gradient_draws`
returns single-particle draws of either estimator at fixed guide parameters, so their means
and variances can be compared (``scripts/gradient_variance.py`` prints the ratio), and checked against the exact gradient of
the closed-form ELBO of ``blr`` (:func:`exact_blr_gradient`).

Example
-------
>>> import pyro_bdl.gradients as g
>>> draws = g.gradient_draws("blr", "reparam", num=5)
>>> draws.shape[0]
5
"""

from __future__ import annotations

import numpy as np
import pyro
import torch
from pyro.infer import Trace_ELBO, TraceGraph_ELBO

from .data import load
from .inference.guides import MeanFieldGuide
from .registry import get_model

__all__ = ["gradient_draws", "exact_blr_gradient", "compare_estimators"]


def _setup(model, data, options, seed, reparameterized, shift):
    """Mean-field guide at a fixed point away from the optimum; returns (bound, kwargs, guide, params)."""
    spec = get_model(model)
    dataset = load(data or spec.default_data)
    kwargs = {"X": dataset.X if spec.uses_features else dataset.X[:, :0], "y": dataset.y}
    bound = spec.bind(options or ({"noise": 0.5} if model == "blr" else {}))
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    guide = MeanFieldGuide(bound, init_scale=0.2, reparameterized=reparameterized)
    guide = guide if reparameterized else _without_baseline(guide)
    guide(**kwargs)  # create the parameters
    with torch.no_grad():
        for name, value in pyro.get_param_store().named_parameters():
            if name.endswith(".loc"):
                value.fill_(shift)
    names = sorted(name for name, _ in pyro.get_param_store().named_parameters())
    return bound, kwargs, guide, names


def gradient_draws(model: str = "blr", estimator: str = "reparam", num: int = 200, seed: int = 0,
                   data=None, options=None, shift: float = 0.3) -> np.ndarray:
    """``num`` one-particle draws of the ELBO-loss gradient w.r.t. the mean-field guide's parameters.

    The guide sits at a fixed point away from the optimum (every location ``shift``, sd 0.2),
    so the gradient is not zero.  ``estimator`` is ``"reparam"`` (Trace_ELBO, rsample) or ``"score"`` (TraceGraph_ELBO, no rsample, no baseline: the plain estimator).
    Returns an array of shape (num, number of guide parameters), parameters in sorted name order.
    """
    if estimator not in ("reparam", "score"):
        raise ValueError(f"unknown estimator '{estimator}'; choose 'reparam' or 'score'")
    bound, kwargs, guide, names = _setup(model, data, options, seed, estimator == "reparam", shift)
    store = pyro.get_param_store()
    params = [store.get_param(n).unconstrained() for n in names]
    loss = Trace_ELBO() if estimator == "reparam" else TraceGraph_ELBO()
    draws = []
    for _ in range(num):
        for p in params:
            p.grad = None
        loss.loss_and_grads(bound, guide, **kwargs)
        draws.append(torch.cat([p.grad.reshape(-1) for p in params]).clone())
    return torch.stack(draws).double().numpy()


def exact_blr_gradient(data=None, noise: float = 0.5, prior_scale: float = 1.0, shift: float = 0.3) -> np.ndarray:
    r"""The exact gradient of the ELBO loss for ``blr`` with known noise, at the same guide point.

    With :math:`q = \mathcal N(m, \mathrm{diag}(s^2))` over :math:`\theta = (w, b)` and
    :math:`\phi_i = (x_i, 1)`, every term of the ELBO is closed-form:

    .. math::

        \mathbb E_q \log p(y \mid \theta) = \sum_i -\tfrac12 \log 2\pi\sigma^2
            - \frac{(y_i - \phi_i^\top m)^2 + \sum_j \phi_{ij}^2 s_j^2}{2\sigma^2},\quad
        \mathbb E_q \log p(\theta) = \sum_j -\tfrac12 \log 2\pi s_0^2 - \frac{m_j^2 + s_j^2}{2 s_0^2},\quad
        H[q] = \sum_j \tfrac12 \log 2\pi e s_j^2 .
    """
    options = {"noise": noise, "prior_scale": prior_scale}
    _, kwargs, _, names = _setup("blr", data, options, 0, True, shift)
    store = pyro.get_param_store()
    params = {n: store.get_param(n).unconstrained().detach().clone().requires_grad_(True) for n in names}
    X, y = kwargs["X"].double(), kwargs["y"].double()
    phi = torch.cat([X, torch.ones(len(y), 1, dtype=torch.float64)], 1)
    m = torch.cat([params["mf.w.loc"].double(), params["mf.b.loc"].double().reshape(1)])
    s = torch.nn.functional.softplus(torch.cat([params["mf.w.rho"].double(), params["mf.b.rho"].double().reshape(1)]))
    resid = (y - phi @ m) ** 2 + (phi**2) @ (s**2)
    loglik = (-0.5 * np.log(2 * np.pi * noise**2) - resid / (2 * noise**2)).sum()
    logprior = (-0.5 * np.log(2 * np.pi * prior_scale**2) - (m**2 + s**2) / (2 * prior_scale**2)).sum()
    entropy = (0.5 * torch.log(2 * np.pi * np.e * s**2)).sum()
    loss = -(loglik + logprior + entropy)
    grads = torch.autograd.grad(loss, [params[n] for n in names])
    return torch.cat([g.reshape(-1) for g in grads]).numpy()


def _without_baseline(guide):
    """The score-function guide without its baseline: the plain REINFORCE estimator."""

    def plain(*args, **kwargs):
        with pyro.poutine.infer_config(config_fn=lambda site: {"baseline": {}} if site["type"] == "sample" else {}):
            return guide(*args, **kwargs)

    return plain


def compare_estimators(num_score: int = 2000, num_reparam: int = 400, seed: int = 0) -> dict:
    """Both estimators on ``blr`` (known noise) against the exact gradient at the same guide point.

    Returns the exact gradient, each estimator's mean, its standard error (sd / sqrt(num)) and
    total variance (sum over parameters of the one-draw variance), and their variance ratio.
    """
    exact = exact_blr_gradient()
    out = {"exact": exact}
    for name, num, s in (("score", num_score, seed), ("reparam", num_reparam, seed + 1)):
        draws = gradient_draws("blr", name, num, s)
        out[f"{name}_mean"] = draws.mean(0)
        out[f"{name}_se"] = draws.std(0, ddof=1) / np.sqrt(num)
        out[f"{name}_variance"] = float(draws.var(0, ddof=1).sum())
    out["variance_ratio"] = out["score_variance"] / out["reparam_variance"]
    return out
