r"""The log-uniform prior of sparse variational dropout and its approximate KL from a Normal factor.

The log-uniform prior (Kingma et al. 2015; Molchanov, Ashukha & Vetrov 2017) is the improper density

.. math:: p(|w|) \propto 1 / |w|, \qquad \log p(w) = -\log|w| + \text{const},

uniform in :math:`\log|w|`.  Against a Normal factor :math:`q(w) = \mathcal N(\mu, \alpha\mu^2)` its KL
depends on :math:`\alpha` alone (up to the prior's missing normalising constant):

.. math:: -\mathrm{KL}(q \| p) = \tfrac12 \log\alpha - \mathbb E_{\varepsilon \sim \mathcal N(1, \alpha)}
          \log|\varepsilon| + C,

which has no closed form; Molchanov et al. (Eq. 14) fit

.. math:: -\mathrm{KL} \approx k_1 \,\mathrm{sigmoid}(k_2 + k_3 \log\alpha) - \tfrac12 \log(1 + \alpha^{-1}) - k_1,

:math:`k_1 = 0.63576, k_2 = 1.87320, k_3 = 1.48695`, with :math:`C = -k_1` so that the KL vanishes as
:math:`\alpha \to \infty` (the weight is pure noise: it can be dropped).  It is registered in torch's KL table
for ``(Normal, LogUniform)``, so ``TraceMeanField_ELBO`` (``svi-meanfield``) uses it for every Normal guide
factor, and the local reparameterisation trick (which changes the likelihood term only) composes with it.
``Trace_ELBO`` (``svi``) would estimate the KL by ``log q(w) + log|w|`` at a draw, whose gradient
:math:`1/w` has infinite variance under a Normal q (the fits go NaN): a model with this prior declares the
``improper-prior`` trait, which ``svi`` refuses.
``tests/models/test_sparse_vd.py`` checks the approximation against a numerical integral of the exact KL.

Example
-------
>>> import torch, pyro.distributions as dist
>>> from torch.distributions import kl_divergence
>>> p = LogUniform((2, 3))
>>> round(p.log_prob(torch.full((2, 3), 0.5))[0, 0].item(), 4), round(-math.log(0.5), 4)   # -log|w|
(0.6931, 0.6931)
>>> q = dist.Normal(torch.ones(2, 3), torch.full((2, 3), 0.1))   # alpha = 0.01: far from pruned
>>> kl = kl_divergence(q, p)
>>> kl.shape, round(float(kl[0, 0]), 3)
(torch.Size([2, 3]), 2.939)
>>> round(float(kl_divergence(q.to_event(2), p.to_event(2))), 2)   # summed over a weight matrix, as the ELBO does
17.63
"""

from __future__ import annotations

import math

import pyro.distributions as dist
import torch
import torch.nn.functional as F

__all__ = ["LogUniform", "K1", "K2", "K3", "neg_kl_approx", "log_alpha"]

#: Molchanov et al.'s fitted constants (Eq. 14).
K1, K2, K3 = 0.63576, 1.87320, 1.48695
#: Added to mu^2 in log alpha, so that a weight at exactly 0 has a finite log alpha (and gradient).
MU2_FLOOR = 1e-16
#: The stand-in draws of :meth:`LogUniform.sample`: the log-uniform truncated to these |w|.
STAND_IN_RANGE = (1e-3, 1.0)


def log_alpha(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    r""":math:`\log\alpha = \log\sigma^2 - \log\mu^2` of a factor :math:`\mathcal N(\mu, \sigma^2)`."""
    return 2.0 * scale.log() - (loc.square() + MU2_FLOOR).log()


def neg_kl_approx(log_alpha: torch.Tensor) -> torch.Tensor:
    r""":math:`-\mathrm{KL} \approx k_1 \mathrm{sigmoid}(k_2 + k_3 \log\alpha) - \tfrac12\log(1 + 1/\alpha) - k_1`,
    written with ``softplus(-log alpha) = log(1 + 1/alpha)`` so that it is finite for every log alpha."""
    return K1 * torch.sigmoid(K2 + K3 * log_alpha) - 0.5 * F.softplus(-log_alpha) - K1


class LogUniform(dist.TorchDistribution):
    r"""The improper log-uniform prior :math:`p(w) \propto 1/|w|`, elementwise, of the given shape.

    ``log_prob(w) = -log|w|`` (the normalising constant does not exist; the ELBO is defined up to it).
    An improper prior has no draws: :meth:`sample` returns stand-in draws (the log-uniform truncated to
    :data:`STAND_IN_RANGE`, random sign) so that a trace of the model runs (which sites, what shapes);
    no inference method draws from it (a model with this prior declares the ``improper-prior`` trait, which
    samplers and mode finders refuse).
    """

    arg_constraints = {}
    support = dist.constraints.real
    has_rsample = False

    def __init__(self, shape, like: torch.Tensor | None = None, validate_args=None):
        like = torch.zeros(()) if like is None else like
        self._like = like.new_zeros(())
        super().__init__(torch.Size(shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return LogUniform(batch_shape, self._like, validate_args=self._validate_args)

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        low, high = (math.log(v) for v in STAND_IN_RANGE)
        like = {"dtype": self._like.dtype, "device": self._like.device}
        magnitude = torch.empty(shape, **like).uniform_(low, high).exp()
        return torch.where(torch.rand(shape, device=like["device"]) < 0.5, -magnitude, magnitude)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return -value.abs().log().expand(torch.broadcast_shapes(value.shape, self.batch_shape))


@torch.distributions.kl.register_kl(dist.Normal, LogUniform)
def _kl_normal_log_uniform(q: dist.Normal, p: LogUniform) -> torch.Tensor:
    """Molchanov et al.'s approximation of KL(N(mu, sigma^2) || LogUniform), up to the prior's constant."""
    kl = -neg_kl_approx(log_alpha(q.loc, q.scale))
    return kl.expand(torch.broadcast_shapes(kl.shape, p.batch_shape))
