r"""The local reparameterisation trick (Kingma, Salimans & Welling 2015) for ``dense`` and ``conv2d`` layers.

For a layer :math:`a = h W^\top + b` under a mean-field Gaussian guide
:math:`W_{ij} \sim \mathcal N(\mu_{ij}, \sigma_{ij}^2)`, :math:`b_j \sim \mathcal N(\mu^b_j, (\sigma^b_j)^2)`,
each example's pre-activation is itself Gaussian,

.. math::

    a_{nj} \sim \mathcal N\Big(\sum_i h_{ni}\mu_{ji} + \mu^b_j,\;
                               \sum_i h_{ni}^2 \sigma_{ji}^2 + (\sigma^b_j)^2\Big),

so instead of one weight draw shared by the whole batch, :class:`LocalReparam` draws every
example's pre-activation independently: the same expected log-likelihood, a gradient estimate
of much lower variance, one noise draw per example and unit instead of per weight.

How: the guide's weight draws are remembered by identity (the model sees the very tensors the
guide drew, through the ELBO's replay), and the model's :func:`~pyro_bdl.nn.layers.dense`
operations whose ``W`` is such a draw are answered with the draw above.  Only the likelihood
changes: the weights are still sampled, so the KL term (analytic or ``log q - log p`` at the
draw) is what it was.  A layer whose guide is not a plain Normal is left as it is.

Example
-------
>>> import torch, pyro, functools
>>> from pyro.infer import Trace_ELBO
>>> from pyro_bdl.models.bnn import bnn_regressor
>>> from pyro_bdl.models.networks import bbb_guide
>>> model = functools.partial(bnn_regressor, hidden=(8,), noise=0.1)
>>> guide = bbb_guide(model)
>>> lrt_model, lrt_guide = LocalReparam().wrap(model, guide)
>>> loss = Trace_ELBO().loss(lrt_model, lrt_guide, X=torch.randn(20, 1), y=torch.randn(20))
"""

from __future__ import annotations

import functools

import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.poutine.messenger import Messenger

__all__ = ["LocalReparam"]

#: The smallest pre-activation variance drawn with (an sd of 1e-8: nothing, next to any weight's noise).
VAR_FLOOR = 1e-16


def normal_of(fn):
    """``(loc, scale)`` of a (possibly ``to_event``) Normal, else None."""
    while isinstance(fn, dist.Independent):
        fn = fn.base_dist
    return (fn.loc, fn.scale) if isinstance(fn, dist.Normal) else None


class _Record(Messenger):
    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def _pyro_post_sample(self, msg) -> None:
        if not msg["is_observed"]:
            normal = normal_of(msg["fn"])
            if normal is not None:  # keep the value itself too, so its id cannot be reused while recorded
                self.owner._q[id(msg["value"])] = (msg["value"], *normal)


class _Answer(Messenger):
    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def _pyro_dense(self, msg) -> None:
        # one draw per example (and per particle: W's batch dims lead)
        self._answer(msg, lambda h, w: h @ w.transpose(-1, -2), lambda b: b.unsqueeze(-2), msg["args"][1].shape[:-2])

    def _pyro_conv2d(self, msg) -> None:
        """A convolution is linear in its weights too: mean conv(h, mu), variance conv(h^2, sigma^2), one draw per
        example, channel and pixel (one network's weights: no batch dims)."""
        pad = msg["args"][1].shape[-1] // 2
        self._answer(msg, lambda h, w: F.conv2d(h, w, padding=pad), lambda b: b[:, None, None], ())

    def _answer(self, msg, linear, bias, weight_batch) -> None:
        if msg["done"]:
            return
        h, W, b = msg["args"]
        q = self.owner._q
        if id(W) not in q or q[id(W)][0] is not W:
            return
        _, mu, sigma = q[id(W)]
        mean = linear(h, mu)
        var = linear(h * h, sigma * sigma)
        if id(b) in q and q[id(b)][0] is b:  # a Normal bias adds its mean and variance
            _, mu_b, sigma_b = q[id(b)]
            mean, var = mean + bias(mu_b), var + bias(sigma_b * sigma_b)
        else:
            mean = mean + bias(b)
        shape = torch.broadcast_shapes(mean.shape, tuple(weight_batch) + (1, 1))
        # the floor: an example whose inputs to the layer are all zero (dead ReLUs) has variance 0 when the bias is
        # a point (sparse VD's), and sqrt's gradient at 0 is infinite (NaN fits)
        msg["value"] = mean + var.clamp_min(VAR_FLOOR).sqrt() * torch.randn(shape, dtype=mean.dtype, device=mean.device)
        msg["done"] = True


class LocalReparam:
    """Local reparameterisation for one (model, guide) pair: ``model, guide = LocalReparam().wrap(model, guide)``.

    The wrapped guide records its Normal draws (forgetting the previous step's); the wrapped
    model answers its ``dense`` layers from them.  Use the pair for training only: predictions
    come from the plain model with weights drawn from the plain guide.
    """

    def __init__(self):
        self._q = {}

    def wrap(self, model, guide):
        @functools.wraps(guide)
        def lrt_guide(*args, **kwargs):
            self._q.clear()
            with _Record(self):
                return guide(*args, **kwargs)

        @functools.wraps(model)
        def lrt_model(*args, **kwargs):
            with _Answer(self):
                return model(*args, **kwargs)

        return lrt_model, lrt_guide
