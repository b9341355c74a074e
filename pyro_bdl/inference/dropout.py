r"""MC dropout (Gal & Ghahramani 2016) and DropConnect (Wan et al. 2013): dropout as variational inference on the
model's own weights.

The variational distribution of a weight matrix :math:`W_\ell` (shape (out, in)) is

.. math::

    W_\ell = M_\ell \,\mathrm{diag}(z_\ell), \qquad z_{\ell j} \sim \mathrm{Bernoulli}(1 - p)
    \quad (\texttt{mask="unit"}), \qquad\text{or}\qquad
    W_\ell = M_\ell \odot Z_\ell, \qquad Z_{\ell kj} \sim \mathrm{Bernoulli}(1 - p) \quad (\texttt{mask="weight"}),

so a draw of :math:`W_\ell` is the network with input unit :math:`j` of layer :math:`\ell` dropped (dropout), or
with each weight dropped on its own (DropConnect).  Every other latent site (biases, the noise) is a point
estimate.  The objective is

.. math::

    \mathcal L(M) = -\sum_i \mathbb E_{z}[\log p(y_i \mid x_i, M \circ z)] - \mathbb E_z[\log p(M \circ z)].

Training estimates the first term with an independent mask per example (:class:`DropoutMessenger`
answers the model's ``dense`` layers with ``(h_i \odot z_i) M^T + b`` for units, and with the batched product
``(M \odot Z_i) h_i + b`` for weights: the same expectation as one mask for the whole batch, with far lower
variance -- this is ordinary dropout).  DropConnect's per-example masks cost memory and time
:math:`O(B \cdot \mathrm{out} \cdot \mathrm{in})` per layer and step (a (B, out, in) mask and a batched matmul,
where unit dropout's is :math:`O(B \cdot \mathrm{in})`): cheap for the zoo's small nets (digits: 1400 x 10 x 50),
costly for wide layers and large minibatches, where a smaller ``batch_size`` bounds it.  One weight mask per
minibatch would cost :math:`O(\mathrm{out} \cdot \mathrm{in})` but gives every example of the batch the same
network, a gradient of far higher variance; Gaussian moment matching of :math:`(M \odot Z) h` is not
DropConnect (its draws are not dropped-weight networks) and is not used.  Under the prior
:math:`W \sim \mathcal N(0, s^2)` the second term is :math:`(1 - p)\,\lVert M \rVert^2 / (2 s^2)` for both
masks: dropout's weight decay, tied to the prior's length-scale :math:`l = 1/s`, is Gal's KL
approximation :math:`\tfrac{(1-p) l^2}{2}\lVert M\rVert^2` (per data point
:math:`\lambda = (1-p) l^2 / (2N)`); the messenger scales the prior of the dropped layers by
:math:`1 - p` for it.  At prediction, dropout stays on: posterior draws are dropped-out copies of
:math:`M` (:class:`DropoutGuide`, one mask per network draw), and the model precision
:math:`\tau = 1/\sigma^2` (the fitted noise) adds the aleatoric variance, so
:math:`\tau = (1-p) l^2 / (2 N \lambda)` holds by construction; the fit reports it as ``tau``.
Concrete dropout (:mod:`pyro_bdl.inference.concrete_dropout`) learns ``p`` per layer with the same parts.

Example
-------
>>> import pyro, torch
>>> from pyro_bdl.nn.layers import dense
>>> _ = pyro.set_rng_seed(0)
>>> with DropoutMessenger(0.5, lambda site: site == "layer1.weight", mask="weight"):
...     out = dense(torch.ones(3, 4), torch.ones(2, 4), torch.zeros(2), name="layer1")
>>> out.shape, bool(((out >= 0) & (out <= 4) & (out == out.round())).all())  # each output: the kept weights of 4
(torch.Size([3, 2]), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.autoguide import init_to_sample
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from pyro_bdl.inference.base import Draws, latent_sites
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.outputs import MethodInfo
from pyro_bdl.inference.svi import ADAM_SETTINGS, guide_draws, make_elbo, optimise

__all__ = ["DropoutGuide", "DropoutMessenger", "run_mc_dropout", "fit_dropout", "resolve_dropout_sites", "MASKS",
           "check_mask", "keep_mask"]

#: What one Bernoulli variable drops: an input unit of a layer (dropout) or one weight (DropConnect).
MASKS = ("unit", "weight")


def check_mask(mask) -> str:
    """``mask`` as one of :data:`MASKS`, else a clear error."""
    if mask not in MASKS:
        raise ValueError(f"dropout mask must be one of {', '.join(map(repr, MASKS))} (drop input units or single "
                         f"weights), got {mask!r}")
    return mask


def _check_rate(p, site: str = "") -> None:
    value = float(p)
    if not 0.0 <= value < 1.0:
        where = f" of {site}" if site else ""
        raise ValueError(f"dropout probability{where} must lie in [0, 1), got {value}")


def _rate(p, site: str):
    """The rate of weight site ``site``: ``p`` itself (a number) or ``p[site]`` (a mapping: one rate per layer)."""
    return p[site] if isinstance(p, Mapping) else p


def keep_mask(shape, p, like: torch.Tensor, temperature: float | None = None) -> torch.Tensor:
    r"""A keep-mask of ``shape`` with ``P(keep) = 1 - p``, dtype and device from ``like``.

    ``temperature`` None: Bernoulli draws.  A number :math:`t`: the concrete (relaxed Bernoulli) mask
    :math:`1 - \sigma((\operatorname{logit} p + \log u - \log(1 - u)) / t)`, :math:`u \sim U(0, 1)`,
    differentiable in ``p`` (a tensor).
    """
    if temperature is None:
        return torch.bernoulli(torch.ones(shape, dtype=like.dtype, device=like.device) * (1.0 - p))
    eps = torch.finfo(like.dtype).eps
    u = torch.rand(shape, dtype=like.dtype, device=like.device).clamp(eps, 1 - eps)
    p = torch.as_tensor(p, dtype=like.dtype, device=like.device).clamp(eps, 1 - eps)
    return 1.0 - torch.sigmoid((p.log() - (-p).log1p() + u.log() - (-u).log1p()) / temperature)


class DropoutGuide:
    """``W = M diag(z)`` (``mask="unit"``) or ``W = M * Z`` (``mask="weight"``), entries of ``z`` / ``Z``
    ``~ Bernoulli(1 - p)``, for the sites ``dropout_sites(name)`` selects; a point estimate (Delta) for every
    other latent site.  ``p``: one rate, or a mapping weight site -> rate (one per layer).  With ``p = 0`` it is
    the point estimate ``M`` itself (what training optimises)."""

    def __init__(self, model, p, dropout_sites, init_loc_fn=None, prefix: str = "dropout", mask: str = "unit"):
        for site, rate in (p.items() if isinstance(p, Mapping) else [("", p)]):
            _check_rate(rate, site)
        self.model, self.p, self.dropout_sites, self.prefix = model, p, dropout_sites, prefix
        self.mask = check_mask(mask)
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
            rate = float(_rate(self.p, name)) if self.dropout_sites(name) else 0.0
            if rate > 0:  # one z per input unit, or one per weight; one mask per network draw
                value = value * keep_mask(value.shape[-1:] if self.mask == "unit" else value.shape, rate, value)
            values[name] = pyro.sample(name, dist.Delta(value, event_dim=event_dim))
        return values


class DropoutMessenger(Messenger):
    """Training-time dropout for a model written with :func:`pyro_bdl.nn.layers.dense` layers.

    Layer ``layerK`` whose weight site ``layerK.weight`` is selected by ``dropout_sites`` gets an
    independent keep-mask per example: per input unit, ``(h * z) W^T + b`` (``mask="unit"``), or per
    weight, ``(W * Z_i) h_i + b`` as a batched product (``mask="weight"``, DropConnect), entries
    ``~ Bernoulli(1 - p)`` (or their concrete relaxation at ``temperature``, :func:`keep_mask`); and the
    prior of that weight site is scaled by ``1 - p`` (the expected log prior at a dropped-out draw, see the
    module docstring).  ``p``: one rate, or a mapping weight site -> rate (tensors, when they are learned).
    """

    def __init__(self, p, dropout_sites, mask: str = "unit", temperature: float | None = None):
        super().__init__()
        self.p = p if isinstance(p, Mapping) else float(p)
        self.dropout_sites, self.mask, self.temperature = dropout_sites, check_mask(mask), temperature

    def _pyro_dense(self, msg) -> None:
        site = f"{msg['name']}.weight"
        if msg["done"] or not self.dropout_sites(site):
            return
        h, W, b = msg["args"]
        p = _rate(self.p, site)
        if self.mask == "unit":
            keep = keep_mask(h.shape, p, h, self.temperature)  # z_i: one mask per example
            msg["value"] = (h * keep) @ W.transpose(-1, -2) + b.unsqueeze(-2)
        else:  # Z_i: one (out, in) mask per example, (..., n, out, in)
            keep = keep_mask(h.shape[:-1] + W.shape[-2:], p, h, self.temperature)
            msg["value"] = torch.einsum("...ni,...noi->...no", h, W.unsqueeze(-3) * keep) + b.unsqueeze(-2)
        msg["done"] = True

    def _pyro_sample(self, msg) -> None:
        if not msg["is_observed"] and self.dropout_sites(msg["name"]):
            msg["scale"] = msg["scale"] * (1.0 - _rate(self.p, msg["name"]))


class _DenseNames(Messenger):
    """Records the names of the ``dense`` layers a model runs, in order."""

    def __init__(self):
        super().__init__()
        self.names = []

    def _pyro_dense(self, msg) -> None:
        self.names.append(msg["name"])


def resolve_dropout_sites(model, data: dict, dropout_sites=None):
    """The sites dropout drops: the model's own choice (``dropout_sites``, a predicate on site names) where it
    makes one, else the weights of every ``dense`` layer but the first the model runs (the layers whose inputs
    are hidden units: the first one's are the data).  A model with fewer than two dense layers is refused."""
    if dropout_sites is not None:
        return dropout_sites
    names = _DenseNames()
    with poutine.block(), torch.no_grad(), names:
        model(**data)
    hidden = frozenset(f"{name}.weight" for name in names.names[1:])
    if not hidden:
        raise ValueError("dropout needs a model with at least two dense layers (pyro_bdl.nn.layers.dense) or one "
                         f"that names its dropout sites; this one runs {len(names.names)}")
    return hidden.__contains__


@dataclass
class DropoutInfo(MethodInfo):
    """What ``mc-dropout`` and ``concrete-dropout`` return beside their draws.

    Attributes
    ----------
    dropout_p : the dropout rate: one number (``mc-dropout``), or the learned rate by layer (``concrete-dropout``:
        ``{"layer1": 0.07, ...}``).
    tau : for a model with a noise site ``sigma``, the model precision ``tau = 1 / sigma^2`` (standardised units);
        else None.
    """

    dropout_p: float | dict | None = None
    tau: float | None = None


def fit_dropout(model, data: dict, train_model, rates, *, dropout_sites, mask: str, steps: int, lr: float,
                samples: int, progress: bool, desc: str, init_loc_fn=None, batch_size=None, checkpoint=None,
                jit=False, **adam) -> Draws:
    """Train ``train_model`` (the model under a :class:`DropoutMessenger`) against the point estimate ``M``
    (``jit``: with the compiled ELBO, :mod:`pyro_bdl.inference.compiled_elbo`, the masks drawn afresh in the graph
    at every step); then ``samples`` dropped-out networks at the rates ``rates()`` returns after training (a
    number, or a mapping weight site -> rate).  ``info`` holds ``dropout_p`` and, for a model with a noise site ``sigma``,
    the model precision ``tau = 1 / sigma^2`` (standardised units)."""
    point = DropoutGuide(model, 0.0, dropout_sites, init_loc_fn)  # p = 0: the point estimate M
    train = data if batch_size is None else {**data, "batch_size": int(batch_size)}
    losses = optimise(train_model, point, make_elbo("trace", jit=jit), train, steps=steps, lr=lr, progress=progress,
                      desc=desc, checkpoint=checkpoint, **adam)
    p = rates()
    guide = DropoutGuide(model, p, dropout_sites, init_loc_fn, prefix=point.prefix, mask=mask)
    guide._sites = point._sites
    out = Draws(guide_draws(guide, data, latent_sites(model, data), samples), losses=losses, guide=guide,
                info=DropoutInfo(p))
    if "sigma" in out.samples:
        out.info.tau = float(1.0 / out.samples["sigma"][0, 0] ** 2)  # model precision tau = 1 / sigma^2
    return out


def run_mc_dropout(model, data: dict, *, p: float, mask: str = "unit", dropout_sites=None, **settings) -> Draws:
    """Train with dropout (``mask="unit"``) or DropConnect (``mask="weight"``); posterior draws are ``samples``
    dropped-out networks (dropout kept on).  ``info`` as :func:`fit_dropout`'s, ``dropout_p`` the rate ``p``."""
    mask = check_mask(mask)
    dropout_sites = resolve_dropout_sites(model, data, dropout_sites)
    train_model = DropoutMessenger(p, dropout_sites, mask=mask)(model)
    return fit_dropout(model, data, train_model, lambda: p, dropout_sites=dropout_sites, mask=mask,
                       desc="mc-dropout", **settings)


def _register() -> None:
    register_method(Method(
        "mc-dropout", "svi", "MC dropout (Gal & Ghahramani): dropout + prior-tied weight decay, dropout kept on at "
        "prediction; tau = 1/sigma^2; mask=weight: DropConnect", run_mc_dropout,
        {"p": 0.05, "mask": "unit", "steps": 3000, "lr": 0.01, "samples": 200, "batch_size": None, "jit": False,
         **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, quick={"steps": 100, "samples": 20},
        processes="data", outputs=DropoutInfo))


_register()
