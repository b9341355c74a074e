r"""Gradient estimators of the ELBO, side by side: score function (REINFORCE) and reparameterised.

For :math:`q_\phi(\theta)` and :math:`f(\theta) = \log p(y, \theta) - \log q_\phi(\theta)`, both

.. math::

    \nabla_\phi \mathbb E_q[f] = \mathbb E_q[f(\theta)\, \nabla_\phi \log q_\phi(\theta)]
    \quad\text{(score function)} \qquad
    = \mathbb E_\epsilon[\nabla_\phi f(g_\phi(\epsilon))] \quad\text{(reparameterised)}

are unbiased; the reparameterised one usually has far lower variance.  :func:`gradient_draws`
returns single-particle draws of either estimator at fixed guide parameters, so their means
and variances can be compared (``scripts/gradient_variance.py`` prints the ratio on ``blr``), and checked against
the exact gradient of the closed-form ELBO of a Bayesian linear regression with known noise
(:func:`exact_linear_gradient`).  The study takes its model as an argument (a zoo name or spec).  :func:`expected_loglik_and_grad` checks the
reparameterised gradient of a last layer's expected log-likelihood against its closed form.

Example
-------
>>> import pyro_bdl.bench.gradient_variance as g
>>> draws = g.gradient_draws("blr", "reparam", num=5)           # the zoo's Bayesian linear regression
>>> draws.shape[0]
5
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import Trace_ELBO, TraceGraph_ELBO

from pyro_bdl.data.embedded import load
from pyro_bdl.inference.guides import MeanFieldGuide
from pyro_bdl.nn.feature_maps import features, split_feature_options
from pyro_bdl.registry import spec_of

__all__ = ["gradient_draws", "exact_linear_gradient", "compare_estimators", "expected_loglik_and_grad", "Expectation"]


def _setup(model, data, options, seed, reparameterized, shift):
    """Mean-field guide at a fixed point away from the optimum; returns (bound, kwargs, guide, params)."""
    spec = spec_of(model)
    dataset = load(data or spec.default_data)
    kwargs = spec.data_kwargs(dataset)
    bound = spec.bind(options)
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


def gradient_draws(model, estimator: str = "reparam", num: int = 200, seed: int = 0,
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


def exact_linear_gradient(model, data=None, noise: float = 0.5, prior_scale: float = 1.0,
                          shift: float = 0.3) -> np.ndarray:
    r"""The exact gradient of the ELBO loss of a Bayesian linear regression with known noise, at the same guide point.

    ``model``: a zoo model (name or spec) that is one: latent sites ``w`` and ``b`` with Normal(0, ``prior_scale``)
    priors, options ``noise`` and ``prior_scale`` (the zoo's ``blr``); another model is an error.

    With :math:`q = \mathcal N(m, \mathrm{diag}(s^2))` over :math:`\theta = (w, b)` and
    :math:`\phi_i = (x_i, 1)`, every term of the ELBO is closed-form:

    .. math::

        \mathbb E_q \log p(y \mid \theta) = \sum_i -\tfrac12 \log 2\pi\sigma^2
            - \frac{(y_i - \phi_i^\top m)^2 + \sum_j \phi_{ij}^2 s_j^2}{2\sigma^2},\quad
        \mathbb E_q \log p(\theta) = \sum_j -\tfrac12 \log 2\pi s_0^2 - \frac{m_j^2 + s_j^2}{2 s_0^2},\quad
        H[q] = \sum_j \tfrac12 \log 2\pi e s_j^2 .
    """
    options = {"noise": noise, "prior_scale": prior_scale}
    spec = spec_of(model)
    if spec.sites(options) != ["w", "b"]:
        raise ValueError(f"the exact gradient is that of a linear regression with latent sites w and b; model "
                         f"'{spec.name}' has {spec.sites(options)}")
    _, kwargs, _, names = _setup(spec, data, options, 0, True, shift)
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


def compare_estimators(model, num_score: int = 2000, num_reparam: int = 400, seed: int = 0) -> dict:
    """Both estimators on ``model``, a Bayesian linear regression with known noise (:func:`exact_linear_gradient`),
    against the exact gradient at the same guide point.

    Returns the exact gradient, each estimator's mean, its standard error (sd / sqrt(num)) and
    total variance (sum over parameters of the one-draw variance), and their variance ratio.
    """
    options = {"noise": 0.5, "prior_scale": 1.0}
    exact = exact_linear_gradient(model, **options)
    out = {"exact": exact}
    for name, num, s in (("score", num_score, seed), ("reparam", num_reparam, seed + 1)):
        draws = gradient_draws(model, name, num, s, options=options)
        out[f"{name}_mean"] = draws.mean(0)
        out[f"{name}_se"] = draws.std(0, ddof=1) / np.sqrt(num)
        out[f"{name}_variance"] = float(draws.var(0, ddof=1).sum())
    out["variance_ratio"] = out["score_variance"] / out["reparam_variance"]
    return out


class Expectation(NamedTuple):
    """An expected log-likelihood and its gradients in the guide's ``m`` and ``v``.

    ``*_se`` are Monte Carlo standard errors (zeros for the exact values)."""

    loglik: torch.Tensor
    grad_m: torch.Tensor
    grad_v: torch.Tensor
    loglik_se: torch.Tensor
    grad_m_se: torch.Tensor
    grad_v_se: torch.Tensor


def expected_loglik_and_grad(X: torch.Tensor, y: torch.Tensor, m: torch.Tensor, v: torch.Tensor, noise: float = 0.1,
                             num_samples: int = 1000, seed: int = 0, **options) -> tuple[Expectation, Expectation]:
    r"""The expected log-likelihood under a Gaussian guide and its reparameterisation-trick gradient, vs exact.

    Let :math:`\theta = (w, b)` and :math:`\Phi = [\phi(X), 1]` (rows :math:`\Phi_i`), and let the guide be
    :math:`q(\theta) = \mathcal N(m, \mathrm{diag}(v^2))`.  Reparameterised, :math:`\theta = m + v \odot \epsilon`
    with :math:`\epsilon \sim \mathcal N(0, I)` depending on neither :math:`m` nor :math:`v`, so the gradient
    moves inside the expectation and one averages gradients of draws (autograd through
    :math:`m + v \odot \epsilon_s`; the chain rule gives a factor :math:`\epsilon` for :math:`v`):

    .. math::

        \nabla_m \mathbb E_q[\log p(y \mid X, \theta)]
        = \mathbb E_\epsilon[\nabla_\theta \log p(y \mid X, m + v \odot \epsilon)]
        \approx \frac1S \sum_{s=1}^S \nabla_\theta \log p(y \mid X, \theta_s),
        \qquad
        \nabla_v \mathbb E_q[\cdot] \approx \frac1S \sum_{s=1}^S \nabla_\theta \log p(y \mid X, \theta_s) \odot \epsilon_s .

    For this Gaussian likelihood all three are closed form, since
    :math:`\mathbb E_q[(y_i - \Phi_i^\top \theta)^2] = (y_i - \Phi_i^\top m)^2 + (\Phi_i^2)^\top v^2`:

    .. math::

        \mathbb E_q[\log p(y \mid X, \theta)]
        = \sum_i \log \mathcal N(y_i; \Phi_i^\top m, \sigma^2) - \frac{(\Phi_i^2)^\top v^2}{2\sigma^2},
        \quad
        \nabla_m = \sum_i \Phi_i \, \frac{y_i - \Phi_i^\top m}{\sigma^2},
        \quad
        \nabla_v = -\frac{v}{\sigma^2} \odot \sum_i \Phi_i^2 .

    Arguments: ``X`` (n, d), ``y`` (n,), ``m`` and ``v`` (h+1,) (the last entry is the bias), the known
    ``noise`` sigma, ``num_samples`` S draws of epsilon from a generator seeded with ``seed``, and the
    feature options (``hidden``, ``activation``, ``feature_seed``, ``feature_scale``, ``feature_weights``;
    ``prior_scale`` is accepted and ignored).  All in float64; log-likelihoods are summed over the data.

    Returns ``(monte_carlo, exact)``, two :class:`Expectation`; the Monte Carlo standard errors are the
    spread of the S per-draw values over sqrt(S).

    >>> X = torch.linspace(-2, 2, 20).unsqueeze(1); y = torch.sin(X[:, 0])
    >>> m, v = torch.zeros(5), torch.full((5,), 0.1)
    >>> mc, exact = expected_loglik_and_grad(X, y, m, v, noise=0.5, num_samples=500, hidden=(4,))
    >>> mc.grad_m.shape, bool((abs(mc.grad_m - exact.grad_m) < 4.5 * mc.grad_m_se).all())
    (torch.Size([5]), True)
    """
    feat_options, _ = split_feature_options(options)
    if not noise > 0:
        raise ValueError(f"noise must be positive, got {noise}")
    if int(num_samples) < 2:
        raise ValueError(f"num_samples must be at least 2 (for a standard error), got {num_samples}")
    feats = features(X.double(), **feat_options)
    Phi = torch.cat([feats, torch.ones(feats.shape[0], 1, dtype=torch.float64)], dim=1)  # (n, h+1)
    y = y.double()
    m, v = torch.as_tensor(m, dtype=torch.float64), torch.as_tensor(v, dtype=torch.float64)
    if m.shape != (Phi.shape[1],) or v.shape != m.shape:
        raise ValueError(f"m and v must have shape ({Phi.shape[1]},) (h weights, then the bias), "
                         f"got {tuple(m.shape)} and {tuple(v.shape)}")

    def loglik(mean, scale, eps):  # log p(y | X, theta) at theta = m + v * eps, summed over the data
        theta = mean + scale * eps
        return dist.Normal(Phi @ theta, noise).log_prob(y).sum()

    gen = torch.Generator().manual_seed(int(seed))
    eps = torch.randn(int(num_samples), m.shape[0], generator=gen, dtype=torch.float64)
    # per draw: the value and the autograd gradients in (m, v) through theta_s = m + v * eps_s
    (grad_m, grad_v), values = torch.func.vmap(torch.func.grad_and_value(loglik, argnums=(0, 1)),
                                               in_dims=(None, None, 0))(m, v, eps)
    root = math.sqrt(int(num_samples))
    monte_carlo = Expectation(values.mean(), grad_m.mean(0), grad_v.mean(0),
                              values.std() / root, grad_m.std(0) / root, grad_v.std(0) / root)

    # the closed forms above
    resid = y - Phi @ m
    exact_ll = (dist.Normal(Phi @ m, noise).log_prob(y) - (Phi**2) @ (v**2) / (2 * noise**2)).sum()
    exact_grad_m = Phi.T @ resid / noise**2
    exact_grad_v = -v * (Phi**2).sum(0) / noise**2
    zero = torch.zeros_like(m)
    exact = Expectation(exact_ll, exact_grad_m, exact_grad_v, torch.zeros((), dtype=torch.float64), zero, zero)
    return monte_carlo, exact
