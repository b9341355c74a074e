r"""The exact Gaussian process's linear algebra: a Cholesky factor that survives a nearly singular kernel matrix,
the marginal likelihood of the training rows, and the predictive at new rows (or, at the training rows themselves,
each row's leave-one-out predictive).

With :math:`K = k(X, X) + \sigma^2 I = L L^\top`, :math:`\alpha = K^{-1}(y - m)`:

.. math::

    \log p(y \mid X) = -\tfrac12 (y - m)^\top \alpha - \sum_i \log L_{ii} - \tfrac n2 \log 2\pi,

    f_* \mid y \sim \mathcal N\big(m + k_*^\top \alpha,\; k_{**} - k_*^\top K^{-1} k_*\big), \qquad
    y_* = f_* + \varepsilon, \ \varepsilon \sim \mathcal N(0, \sigma^2),

and, leaving row i out (Rasmussen & Williams 2006, eq. 5.12; the pointwise densities of Bürkner et al. 2021, which
PSIS-LOO takes for a model whose rows do not factorise), :math:`y_i \mid y_{-i} \sim \mathcal N(y_i - \alpha_i /
[K^{-1}]_{ii},\ 1 / [K^{-1}]_{ii})`.

Everything is computed in float64 (the kernel matrix's condition number is often beyond float32's reach) and
returned in the data's dtype.  Jitter: where the factorisation fails, :data:`JITTER_START` times the matrix's mean
diagonal is added to it, ten times more at each failure up to :data:`JITTER_MAX`; beyond that
:class:`SingularKernelError` says what to change (or, for a sampler's point, the factor is NaN: the point is
rejected).

Example
-------
>>> import torch
>>> X = torch.linspace(0, 1, 5)[:, None].double(); y = torch.sin(6 * X[:, 0])
>>> K = torch.exp(-0.5 * (X - X.T) ** 2 / 0.3 ** 2)
>>> K = K + 0.01 * torch.eye(5, dtype=torch.float64)
>>> L, jitter = stable_cholesky(K)
>>> float(jitter)
0.0
>>> marginal = GaussianProcessMarginal(torch.zeros(5, dtype=torch.float64), K, L, torch.float64)
>>> round(float(marginal.log_prob(y)), 4) == round(float(torch.distributions.MultivariateNormal(
...     torch.zeros(5, dtype=torch.float64), scale_tril=L).log_prob(y)), 4)
True
"""

from __future__ import annotations

import math
import warnings

import pyro.distributions as dist
import torch
from torch.distributions import constraints

__all__ = ["stable_cholesky", "SingularKernelError", "GaussianProcessMarginal", "GaussianLogLikelihood",
           "GaussianProcessPredictive",
           "predictive_moments", "leave_one_out_moments", "JITTER_START", "JITTER_MAX", "JitterWarning",
           "JITTER_SAID", "say_jitter"]

#: The first jitter tried, as a fraction of the kernel matrix's mean diagonal (float64's reach is about 1e-15).
JITTER_START = 1e-10
#: The largest jitter tried, as a fraction of the mean diagonal: beyond it the matrix is refused, not smoothed.
JITTER_MAX = 1e-2


class SingularKernelError(ValueError):
    """The kernel matrix is not positive definite even with :data:`JITTER_MAX` of its diagonal added."""


def stable_cholesky(K: torch.Tensor, strict: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The lower Cholesky factor of ``K`` (..., n, n) and the jitter added to each matrix of the batch (...): 0 where
    none was needed, else the least of ``JITTER_START * 10^k`` (times the mean diagonal) that made it factorise.  A
    matrix with non-finite entries (hyperparameters that overflowed) gets a factor of NaNs, which a sampler rejects.
    One that fails beyond :data:`JITTER_MAX` is a :class:`SingularKernelError`, or with ``strict=False`` NaNs too
    (a sampler's extreme point, e.g. a period so short that rounding breaks the kernel's symmetry: rejected there,
    not the end of the run)."""
    L, info = torch.linalg.cholesky_ex(K)
    jitter = K.new_zeros(K.shape[:-2])
    if not bool((info > 0).any()):
        return L, jitter
    finite = torch.isfinite(K).flatten(-2).all(-1)
    if not bool(finite.all()):  # hyperparameters that overflowed (a sampler's divergent path): NaN, not an error,
        K = torch.where(finite[..., None, None], K, torch.eye(K.shape[-1], dtype=K.dtype, device=K.device))
        L, jitter = stable_cholesky(K, strict)  # so that a sampler rejects the point as it rejects any other
        nan = torch.full_like(L, math.nan)
        return torch.where(finite[..., None, None], L, nan), torch.where(finite, jitter, math.nan)
    scale = K.diagonal(dim1=-2, dim2=-1).mean(-1).detach().abs().clamp_min(1e-300)
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    fraction = JITTER_START
    while fraction <= JITTER_MAX * (1 + 1e-9):
        failed = info > 0
        jitter = torch.where(failed, fraction * scale, jitter)
        L_try, info_try = torch.linalg.cholesky_ex(K + jitter[..., None, None] * eye)
        L = torch.where(failed[..., None, None], L_try, L)
        info = torch.where(failed, info_try, info)
        if not bool((info > 0).any()):
            return L, jitter
        fraction *= 10.0
    if not strict:
        failed = info > 0
        return torch.where(failed[..., None, None], math.nan, L), torch.where(failed, math.nan, jitter)
    bad = K.diagonal(dim1=-2, dim2=-1).detach()
    raise SingularKernelError(
        f"the kernel matrix ({K.shape[-1]} x {K.shape[-1]}) is not positive definite even with {JITTER_MAX:g} of its "
        f"mean diagonal added as jitter (its diagonal runs from {float(bad.min()):.3g} to {float(bad.max()):.3g}): "
        f"give the noise a floor "
        f"(a fixed noise, e.g. noise=0.01 in the target's units), shorten the lengthscales, or remove duplicate rows "
        f"of the inputs")


class GaussianProcessMarginal(dist.TorchDistribution):
    """The training rows' marginal likelihood, :math:`y \\sim \\mathcal N(m, K)`: ``loc`` (..., n), ``covariance``
    :math:`K` (..., n, n) and its factor ``scale_tril`` :math:`L` in float64 (:func:`stable_cholesky`, jitter
    included in both), ``dtype`` the data's (what :meth:`log_prob` and :meth:`sample` return).  Its log density's
    gradient is :class:`GaussianLogLikelihood`'s."""

    arg_constraints = {"loc": constraints.real_vector, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: torch.Tensor, covariance: torch.Tensor, scale_tril: torch.Tensor, dtype: torch.dtype,
                 validate_args=None):
        self.loc, self.covariance, self.scale_tril, self.out_dtype = loc, covariance, scale_tril, dtype
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    def expand(self, batch_shape, _instance=None):
        batch_shape = torch.Size(batch_shape)
        return GaussianProcessMarginal(self.loc.expand(batch_shape + self.event_shape),
                                       self.covariance.expand(batch_shape + self.event_shape * 2),
                                       self.scale_tril.expand(batch_shape + self.event_shape * 2), self.out_dtype)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        diff = value.to(self.loc.dtype) - self.loc
        return GaussianLogLikelihood.apply(self.covariance, self.scale_tril, diff).to(self.out_dtype)

    def rsample(self, sample_shape=torch.Size()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return (self.loc + (self.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)).to(self.out_dtype)

    @property
    def mean(self) -> torch.Tensor:
        return self.loc.to(self.out_dtype)

    @property
    def variance(self) -> torch.Tensor:
        return (self.scale_tril ** 2).sum(-1).to(self.out_dtype)


class GaussianLogLikelihood(torch.autograd.Function):
    r""":math:`\log \mathcal N(r; 0, K)` from ``K`` (..., n, n), its factor ``L`` (computed without a graph: its
    own backward is not needed) and ``r`` (..., n), with the gradient in closed form, :math:`\partial/\partial K =
    \tfrac12(\alpha\alpha^\top - K^{-1})`, :math:`\partial/\partial r = -\alpha`: one ``cholesky_inverse``
    instead of autograd's way back through the factorisation (timed: benchmarks/RESULTS.md, "Gaussian processes").
    Differentiated twice (a Laplace approximation's Hessian) it differentiates its gradient, computed again from
    ``K`` by differentiable operations."""

    @staticmethod
    def forward(ctx, K, L, r):
        alpha = torch.cholesky_solve(r.unsqueeze(-1), L).squeeze(-1)
        ctx.save_for_backward(K, L, r, alpha)
        n = r.shape[-1]
        return (-0.5 * (r * alpha).sum(-1) - L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
                - 0.5 * n * math.log(2 * math.pi))

    @staticmethod
    def backward(ctx, grad):
        K, L, r, alpha = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: the gradient as a function of K and r, to differentiate again
            L = torch.linalg.cholesky(K)
            alpha = torch.cholesky_solve(r.unsqueeze(-1), L).squeeze(-1)
        inverse = torch.cholesky_inverse(L)
        g = grad[..., None, None]
        grad_K = 0.5 * g * (alpha.unsqueeze(-1) * alpha.unsqueeze(-2) - inverse)
        return grad_K, None, -grad[..., None] * alpha


class GaussianProcessPredictive(dist.Normal):
    """Each row's predictive :math:`\\mathcal N(\\mu, s_f^2 + \\sigma^2)`, with :attr:`latent_variance` the part
    :math:`s_f^2` that is uncertainty about the function (epistemic, as the predictive summary counts it), the
    rest the noise."""

    def __init__(self, loc, scale, latent_variance, validate_args=None):
        super().__init__(loc, scale, validate_args=validate_args)
        self.latent_variance = latent_variance.expand(self.batch_shape)

    def expand(self, batch_shape, _instance=None):
        batch_shape = torch.Size(batch_shape)
        return GaussianProcessPredictive(self.loc.expand(batch_shape), self.scale.expand(batch_shape),
                                         self.latent_variance.expand(batch_shape))


def predictive_moments(L, K_cross, k_diag, resid, mean):
    """The latent function's predictive mean and variance at new rows: ``L`` (..., n, n) the training matrix's
    factor, ``K_cross`` (..., n, m) k(X, X*), ``k_diag`` (..., m) k(x*, x*), ``resid`` (..., n) y - m, ``mean``
    (...) or a float: m.  Returns (mean (..., m), variance (..., m)), variance clamped at 0."""
    alpha = torch.cholesky_solve(resid.unsqueeze(-1), L).squeeze(-1)
    f_mean = (K_cross * alpha.unsqueeze(-1)).sum(-2) + mean
    v = torch.linalg.solve_triangular(L, K_cross, upper=False)
    return f_mean, (k_diag - (v * v).sum(-2)).clamp_min(0.0)


def leave_one_out_moments(L, resid, mean):
    """Each training row's predictive from the others (R&W eq. 5.12): mean (..., n) and variance (..., n) of
    :math:`y_i \\mid y_{-i}`."""
    inverse = torch.cholesky_inverse(L)
    precision = inverse.diagonal(dim1=-2, dim2=-1)
    alpha = (inverse @ resid.unsqueeze(-1)).squeeze(-1)
    return resid + mean - alpha / precision, 1.0 / precision


class JitterWarning(UserWarning):
    """The kernel matrix needed jitter on its diagonal to factorise: the fit is of a slightly noisier model."""


#: Jitter below this fraction of the kernel matrix's mean diagonal changes no answer a user reads: not said (a
#: sampler's warm-up passes through vanishing noise variances, where float64 needs a little jitter).
JITTER_SAID = 1e-6


def say_jitter(jitter: torch.Tensor, noise: torch.Tensor, scale: torch.Tensor) -> None:
    """Warn (once per run, as Python shows a warning) when more than :data:`JITTER_SAID` of the mean diagonal
    ``scale`` was added to a finite kernel matrix."""
    scale = scale.detach()[torch.isfinite(jitter)] if scale.dim() else scale.detach()
    finite = jitter[torch.isfinite(jitter)]
    if finite.numel() and bool((finite > JITTER_SAID * scale).any()):
        warnings.warn(f"the kernel matrix needed jitter {float(finite.max()):.2g} on its diagonal to factorise "
                      f"(noise variance {float(noise.detach().min()) ** 2:.2g}): the fit is of K + jitter I; fix a "
                      f"larger noise (noise=...) or remove duplicate input rows to avoid it", JitterWarning,
                      stacklevel=3)
