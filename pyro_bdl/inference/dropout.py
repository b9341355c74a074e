r"""MC dropout (Gal & Ghahramani 2016) as a variational guide on the model's own weights.

The variational distribution of a weight matrix :math:`W_\ell` (shape (out, in)) is

.. math::

    W_\ell = M_\ell \,\mathrm{diag}(z_\ell), \qquad z_{\ell j} \sim \mathrm{Bernoulli}(1 - p),

so a draw of :math:`W_\ell` is the network with input unit :math:`j` of layer :math:`\ell` dropped.
Every other latent site (biases, the noise) is a point estimate.  Training minimises
:math:`-\log p(y \mid W) - \log p(W)` at a dropped-out draw of :math:`W` (``Trace_ELBO`` with this
guide).  Under the prior :math:`W \sim \mathcal N(0, s^2)` the expected log prior is
:math:`-(1 - p)\,\lVert M \rVert^2 / (2 s^2)`: dropout's weight decay, tied to the prior's length-scale
:math:`l = 1/s`, is Gal's KL approximation :math:`\tfrac{(1-p) l^2}{2}\lVert M\rVert^2` (per data
point: :math:`\lambda = (1-p) l^2 / (2N)`).  At prediction, dropout stays on: posterior draws are
dropped-out copies of :math:`M`, and the model precision :math:`\tau = 1/\sigma^2` (the fitted noise)
adds the aleatoric variance, so :math:`\tau = (1-p) l^2 / (2 N \lambda)` holds by construction.
"""

from __future__ import annotations

import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import init_to_sample
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.util import site_is_subsample

from .base import Draws

__all__ = ["DropoutGuide", "run_mc_dropout"]


class DropoutGuide:
    """``W = M diag(z)``, ``z ~ Bernoulli(1 - p)`` for the sites ``dropout_sites(name)`` selects;
    a point estimate (Delta) for every other latent site."""

    def __init__(self, model, p: float, dropout_sites, init_loc_fn=None, prefix: str = "dropout"):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
        self.model, self.p, self.dropout_sites, self.prefix = model, p, dropout_sites, prefix
        self.init_loc_fn = init_loc_fn or init_to_sample
        self._sites = None

    def _setup(self, **kwargs):
        with poutine.block(), torch.no_grad():
            trace = poutine.trace(InitMessenger(self.init_loc_fn)(self.model)).get_trace(**kwargs)
        self._sites = {
            name: (site["fn"].support, site["fn"].event_dim, site["value"].detach())
            for name, site in trace.nodes.items()
            if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
        }

    def __call__(self, **kwargs) -> dict:
        if self._sites is None:
            self._setup(**kwargs)
        values = {}
        for name, (support, event_dim, init) in self._sites.items():
            value = pyro.param(f"{self.prefix}.{name}", init.clone(), constraint=support)
            if self.dropout_sites(name) and self.p > 0:
                keep = torch.bernoulli(torch.full(value.shape[-1:], 1.0 - self.p))  # one z per input unit
                value = value * keep
            values[name] = pyro.sample(name, dist.Delta(value, event_dim=event_dim))
        return values


def run_mc_dropout(model, data: dict, *, p: float, steps: int, lr: float, samples: int, progress: bool,
                   dropout_sites=None, init_loc_fn=None, batch_size=None, checkpoint=None) -> Draws:
    """Train with dropout; posterior draws are ``samples`` dropped-out networks (dropout kept on)."""
    from .svi import _fit

    if dropout_sites is None:
        raise ValueError("mc-dropout needs a model that names its dropout sites (a zoo network)")
    guide = DropoutGuide(model, p, dropout_sites, init_loc_fn)
    out = _fit(model, data, guide, Trace_ELBO(), steps=steps, lr=lr, samples=samples, progress=progress,
               desc="mc-dropout", checkpoint=checkpoint, batch_size=batch_size)
    out.info["dropout_p"] = p
    return out
