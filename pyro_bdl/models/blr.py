r"""Bayesian linear regression.

.. math::

    w \sim \mathcal N(0, s^2 I_d), \quad b \sim \mathcal N(0, s^2), \quad
    \sigma \sim \mathrm{HalfNormal}(1) \text{ (or fixed)}, \quad
    y_i \mid x_i \sim \mathcal N(x_i^\top w + b, \sigma^2).

With the noise :math:`\sigma` known the posterior is Gaussian in closed form.  Writing
:math:`\Phi = [X, 1]` and :math:`\theta = (w, b)`:

.. math::

    \Sigma_N = \left(\Phi^\top \Phi / \sigma^2 + I / s^2\right)^{-1}, \qquad
    \mu_N = \Sigma_N \Phi^\top y / \sigma^2 .

The MAP estimate equals :math:`\mu_N` (ridge regression with penalty
:math:`\lambda = \sigma^2 / s^2`) and the MLE is least squares.  The evidence is Gaussian too,
:math:`y \sim \mathcal N(0, \sigma^2 I + s^2 \Phi\Phi^\top)`; in the :math:`(d+1)`-dimensional form
:func:`exact_log_evidence` computes,

.. math::

    \log p(y) = -\tfrac n2 \log(2\pi\sigma^2) - \tfrac{\lVert y - \Phi\mu_N\rVert^2}{2\sigma^2}
    - \tfrac{\lVert\mu_N\rVert^2}{2 s^2} - (d + 1)\log s - \tfrac12 \log\det \Sigma_N^{-1} .

Example
-------
>>> import torch, pyro_bdl
>>> X = torch.randn(50, 2); y = X @ torch.tensor([1.0, -1.0]) + 0.1 * torch.randn(50)
>>> post = exact_posterior(X, y, prior_scale=1.0, noise=0.1)
>>> post["w"][0].shape
torch.Size([2])
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch

from pyro_bdl.data.table import check_has_features
from pyro_bdl.inference import Domain
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, register

__all__ = ["blr", "exact_posterior", "exact_log_evidence", "posterior_moments", "least_squares"]


def _parse_noise(text: str):
    return None if text.lower() in ("", "none", "learn", "infer") else float(text)


def blr(X: torch.Tensor, y: torch.Tensor | None = None, prior_scale: float = 1.0, noise: float | None = None):
    """Bayesian linear regression. ``X``: (n, d); ``y``: (n,) or None. Returns y (n,)."""
    d = X.shape[-1]
    # w ~ N(0, s^2 I_d),  b ~ N(0, s^2)
    w = pyro.sample("w", dist.Normal(X.new_zeros(d), prior_scale).to_event(1))
    b = pyro.sample("b", dist.Normal(X.new_zeros(()), prior_scale))
    # sigma ~ HalfNormal(1), unless the noise is known
    sigma = pyro.sample("sigma", dist.HalfNormal(X.new_ones(()))) if noise is None else noise
    # y_i ~ N(x_i^T w + b, sigma^2), independently over the data (x_i^T w as a sum over the d features, so that a
    # batch of w, one per posterior draw, broadcasts: the predictive runs every draw at once)
    mean = (X * w).sum(-1) + b
    with pyro.plate("data", X.shape[0]):
        return pyro.sample("y", dist.Normal(mean, sigma), obs=y)


def posterior_moments(X: torch.Tensor, y: torch.Tensor, prior_scale: float, noise: float):
    """Mean (d+1,) and covariance (d+1, d+1) of the exact posterior of theta = (w, b)."""
    X, y = X.double(), y.double()
    phi = torch.cat([X, X.new_ones(X.shape[0], 1)], dim=1)
    precision = phi.T @ phi / noise**2 + torch.eye(phi.shape[1], dtype=X.dtype, device=X.device) / prior_scale**2
    cov = torch.linalg.inv(precision)
    mean = cov @ phi.T @ y / noise**2
    return mean, cov


def exact_posterior(X, y, prior_scale: float = 1.0, noise: float | None = None) -> dict:
    """``{site: (mean, sd)}`` of the exact posterior; needs a known ``noise``."""
    if noise is None:
        raise ValueError("the blr posterior is closed-form only for a known noise (option noise=...)")
    mean, cov = posterior_moments(X, y, prior_scale, noise)
    sd = cov.diagonal().sqrt()
    d = X.shape[1]
    return {"w": (mean[:d], sd[:d]), "b": (mean[d], sd[d])}


def exact_log_evidence(X, y, prior_scale: float = 1.0, noise: float | None = None) -> float:
    """``log p(y)`` (natural log) of ``y`` (n,) given ``X`` (n, d), in float64; needs a known ``noise``.

    >>> X = torch.tensor([[0.0], [1.0]]); y = torch.tensor([0.5, -0.5])
    >>> mvn = torch.distributions.MultivariateNormal(torch.zeros(2, dtype=torch.float64),
    ...     0.25 * torch.eye(2, dtype=torch.float64) + torch.tensor([[1.0, 1.0], [1.0, 2.0]], dtype=torch.float64))
    >>> round(exact_log_evidence(X, y, prior_scale=1.0, noise=0.5) - float(mvn.log_prob(y.double())), 10)
    0.0
    """
    if noise is None:
        raise ValueError("the blr evidence is closed-form only for a known noise (option noise=...); with sigma "
                         "inferred, estimate it with a method that records one")
    mean, cov = posterior_moments(X, y, prior_scale, noise)
    X, y = X.double(), y.double()
    phi = torch.cat([X, X.new_ones(X.shape[0], 1)], dim=1)
    n, k = phi.shape
    residual = y - phi @ mean
    log_det_precision = -torch.linalg.slogdet(cov)[1]
    return (-0.5 * n * math.log(2 * math.pi * noise**2) - 0.5 * float(residual @ residual) / noise**2
            - 0.5 * float(mean @ mean) / prior_scale**2 - k * math.log(prior_scale) - 0.5 * float(log_det_precision))


def least_squares(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The MLE of theta = (w, b): ordinary least squares, shape (d+1,)."""
    phi = torch.cat([X.double(), X.new_ones(X.shape[0], 1, dtype=torch.float64)], dim=1)
    return torch.linalg.lstsq(phi, y.double().unsqueeze(-1)).solution.squeeze(-1)


SPEC = register(
    ModelSpec(
        name="blr",
        model=blr,
        summary="Bayesian linear regression y ~ N(Xw + b, sigma^2) (exact posterior for known noise)",
        options={
            "prior_scale": Option(1.0, "prior standard deviation s of w and b", domain=Domain(float, 0, open_low=True, finite=True)),
            "noise": Option(None, "fixed noise sd sigma; omit (or 'none') to infer sigma ~ HalfNormal(1)", _parse_noise,
                            domain=Domain(float, 0, open_low=True, finite=True)),
        },
        default_data="linear",
        data=DataContract(
            check=check_has_features,
        ),
        inference=InferenceChoices(
            traits=frozenset({"continuous", "low-dimensional"}),
        ),
        hooks=PostFit(
            exact_posterior=exact_posterior,
            exact_evidence=exact_log_evidence,
        ),
    )
)
