r"""MC dropout (Gal & Ghahramani 2016): dropout as variational inference on the model's own weights.

The variational distribution of a weight matrix :math:`W_\ell` (shape (out, in)) is

.. math::

    W_\ell = M_\ell \,\mathrm{diag}(z_\ell), \qquad z_{\ell j} \sim \mathrm{Bernoulli}(1 - p),

so a draw of :math:`W_\ell` is the network with input unit :math:`j` of layer :math:`\ell` dropped.
Every other latent site (biases, the noise) is a point estimate.  The objective is

.. math::

    \mathcal L(M) = -\sum_i \mathbb E_{z}[\log p(y_i \mid x_i, M \mathrm{diag}(z))]
                    - \mathbb E_z[\log p(M \mathrm{diag}(z))].

Training estimates the first term with an independent mask per example (:class:`DropoutMessenger`
answers the model's ``dense`` layers with ``(h \odot z_i) M^T + b``: the same expectation as one
mask for the whole batch, with far lower variance -- this is ordinary dropout).  Under the prior
:math:`W \sim \mathcal N(0, s^2)` the second term is :math:`(1 - p)\,\lVert M \rVert^2 / (2 s^2)`:
dropout's weight decay, tied to the prior's length-scale :math:`l = 1/s`, is Gal's KL
approximation :math:`\tfrac{(1-p) l^2}{2}\lVert M\rVert^2` (per data point
:math:`\lambda = (1-p) l^2 / (2N)`); the messenger scales the prior of the dropped layers by
:math:`1 - p` for it.  At prediction, dropout stays on: posterior draws are dropped-out copies of
:math:`M` (:class:`DropoutGuide`, one mask per network draw), and the model precision
:math:`\tau = 1/\sigma^2` (the fitted noise) adds the aleatoric variance, so
:math:`\tau = (1-p) l^2 / (2 N \lambda)` holds by construction; the fit reports it as ``tau``.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import init_to_sample
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from pyro_bdl.inference.base import Draws, latent_sites
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.svi import ADAM_SETTINGS, guide_draws, optimise

__all__ = ["DropoutGuide", "DropoutMessenger", "run_mc_dropout"]


class DropoutGuide:
    """``W = M diag(z)``, ``z ~ Bernoulli(1 - p)`` for the sites ``dropout_sites(name)`` selects;
    a point estimate (Delta) for every other latent site.  With ``p = 0`` it is the point estimate
    ``M`` itself (what training optimises)."""

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
                keep = torch.bernoulli(torch.full(value.shape[-1:], 1.0 - self.p, device=value.device))  # one z per input unit
                value = value * keep
            values[name] = pyro.sample(name, dist.Delta(value, event_dim=event_dim))
        return values


class DropoutMessenger(Messenger):
    """Training-time dropout for a model written with :func:`pyro_bdl.nn.layers.dense` layers.

    Layer ``layerK`` whose weight site ``layerK.weight`` is selected by ``dropout_sites`` gets an
    independent keep-mask per example and input unit, ``(h * z) W^T + b`` with
    ``z ~ Bernoulli(1 - p)``, and the prior of that weight site is scaled by ``1 - p``
    (the expected log prior at a dropped-out draw, see the module docstring).
    """

    def __init__(self, p: float, dropout_sites):
        super().__init__()
        self.p, self.dropout_sites = float(p), dropout_sites

    def _pyro_dense(self, msg) -> None:
        if msg["done"] or not self.dropout_sites(f"{msg['name']}.weight"):
            return
        h, W, b = msg["args"]
        keep = torch.bernoulli(torch.full_like(h, 1.0 - self.p))  # z_i: one mask per example
        msg["value"] = (h * keep) @ W.transpose(-1, -2) + b.unsqueeze(-2)
        msg["done"] = True

    def _pyro_sample(self, msg) -> None:
        if not msg["is_observed"] and self.dropout_sites(msg["name"]):
            msg["scale"] = msg["scale"] * (1.0 - self.p)


def run_mc_dropout(model, data: dict, *, p: float, steps: int, lr: float, samples: int, progress: bool,
                   dropout_sites=None, init_loc_fn=None, batch_size=None, checkpoint=None, **adam) -> Draws:
    """Train with dropout; posterior draws are ``samples`` dropped-out networks (dropout kept on).

    ``info`` holds ``dropout_p`` and, for a model with a noise site ``sigma``, the model precision
    ``tau = 1 / sigma^2`` (standardised units).
    """
    if dropout_sites is None:
        raise ValueError("mc-dropout needs a model that names its dropout sites (a zoo network)")
    guide = DropoutGuide(model, p, dropout_sites, init_loc_fn)
    train = data if batch_size is None else {**data, "batch_size": int(batch_size)}
    # training: per-example masks in the model, the point estimate M in the guide (p = 0 reads the same params)
    point = DropoutGuide(model, 0.0, dropout_sites, init_loc_fn, prefix=guide.prefix)
    losses = optimise(DropoutMessenger(p, dropout_sites)(model), point, Trace_ELBO(), train, steps=steps, lr=lr,
                      progress=progress, desc="mc-dropout", checkpoint=checkpoint, **adam)
    guide._sites = point._sites
    out = Draws(guide_draws(guide, data, latent_sites(model, data), samples), losses=losses, guide=guide,
                info={"dropout_p": p})
    if "sigma" in out.samples:
        out.info["tau"] = float(1.0 / out.samples["sigma"][0, 0] ** 2)  # model precision tau = 1 / sigma^2
    return out


def _register() -> None:
    register_method(Method(
        "mc-dropout", "svi", "MC dropout (Gal & Ghahramani): dropout + prior-tied weight decay, dropout kept on at "
        "prediction; tau = 1/sigma^2", run_mc_dropout,
        {"p": 0.05, "steps": 3000, "lr": 0.01, "samples": 200, "batch_size": None, **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, quick={"steps": 100, "samples": 20},
        processes="data"))


_register()
