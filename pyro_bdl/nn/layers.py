r"""The building blocks of the zoo's networks: weight priors, the effectful dense layer, the forward pass.

A Bayesian MLP samples every layer's weights from a prior (:func:`sample_layers`: sites
``layer0.weight`` (out, in), ``layer0.bias`` (out,), ...) and runs :func:`forward`, whose layers are
:func:`dense` operations that inference handlers may answer differently (MC dropout's masks,
:mod:`pyro_bdl.inference.dropout`; the local reparameterisation trick,
:mod:`pyro_bdl.inference.local_reparam`).  Priors: :class:`CenteredNormal` (``normal``, sd
``prior_scale / sqrt(fan_in)`` for weights) with an analytic KL from a Normal guide factor, and
Blundell's :class:`ScaleMixtureNormal` (``scale-mixture``).

Example
-------
>>> import torch, pyro
>>> X = torch.randn(5, 3)
>>> tr = pyro.poutine.trace(lambda: forward(X, sample_layers(3, (4, 1)))).get_trace()
>>> [n for n in tr.nodes if n.startswith("layer")], tr.nodes["_RETURN"]["value"].shape
(['layer0.weight', 'layer0.bias', 'layer1.weight', 'layer1.bias'], torch.Size([5, 1]))
"""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.poutine.runtime import effectful

__all__ = ["ACTIVATIONS", "PRIORS", "SCALE_MIXTURE", "mixture_parameters", "CenteredNormal", "ScaleMixtureNormal", "sample_layers", "dense",
           "conv2d", "forward", "per_example", "hidden_widths"]

ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "gelu": F.gelu, "sigmoid": torch.sigmoid}

#: Blundell et al.'s scale mixture: pi, sigma_1, sigma_2.
SCALE_MIXTURE = (0.5, 1.0, math.exp(-6.0))
#: log sqrt(2 pi), the normal density's constant.
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class CenteredNormal(dist.Normal):
    r"""The normal prior of a layer's weights or biases: :math:`\mathcal N(0, s^2)` elementwise, ``s`` a number.

    The same distribution as ``dist.Normal(zeros, s)``, with its log density

    .. math:: \log p(w) = -\frac{w^2}{2 s^2} - \log s - \log\sqrt{2\pi}

    and its KL from a Normal guide factor (registered below) computed with ``s`` as a number, where
    ``dist.Normal`` makes s^2 and log s tensors the size of W at every evaluation.

    >>> p = CenteredNormal(0.5, (2, 3))
    >>> p.batch_shape, float(p.scale[0, 0])
    (torch.Size([2, 3]), 0.5)
    >>> w = torch.randn(2, 3)
    >>> bool(torch.allclose(p.log_prob(w), dist.Normal(0.0, 0.5).log_prob(w)))
    True
    """

    def __init__(self, scale: float, shape, like: torch.Tensor | None = None, validate_args=None):
        self.s = float(scale)
        if not self.s > 0:
            raise ValueError(f"the prior sd must be positive, got {scale}")
        zeros = _zeros(shape, torch.zeros(()) if like is None else like)
        super().__init__(zeros, self.s, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return CenteredNormal(self.s, torch.Size(batch_shape), self.loc, validate_args=self._validate_args)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return value.square() * (-0.5 / self.s**2) - (math.log(self.s) + LOG_SQRT_2PI)


@torch.distributions.kl.register_kl(dist.Normal, CenteredNormal)
def _kl_normal_centered(q: dist.Normal, p: CenteredNormal) -> torch.Tensor:
    r""":math:`\mathrm{KL}(\mathcal N(\mu, \sigma^2) \| \mathcal N(0, s^2)) = \log s - \log\sigma + \frac{\sigma^2 + \mu^2}{2 s^2} - \frac12`."""
    return (q.scale.square() + q.loc.square()) * (0.5 / p.s**2) - q.scale.log() + (math.log(p.s) - 0.5)


class ScaleMixtureNormal(dist.TorchDistribution):
    r"""Blundell's prior :math:`\pi \mathcal N(0, \sigma_1^2) + (1 - \pi) \mathcal N(0, \sigma_2^2)`, elementwise.

    Its support is the real line (a guide can be built on it, unlike ``MixtureSameFamily``'s).
    ``loc`` sets the shape (and dtype); the mixture is centred at ``loc``.
    """

    arg_constraints = {}
    support = dist.constraints.real
    has_rsample = False

    def __init__(self, loc: torch.Tensor, pi: float, sigma1: float, sigma2: float, validate_args=None):
        self.loc, self.pi, self.sigma1, self.sigma2 = loc, float(pi), float(sigma1), float(sigma2)
        super().__init__(loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return ScaleMixtureNormal(self.loc.expand(batch_shape), self.pi, self.sigma1, self.sigma2)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        wide = torch.rand(shape, dtype=self.loc.dtype) < self.pi
        scale = torch.where(wide, self.loc.new_tensor(self.sigma1), self.loc.new_tensor(self.sigma2))
        return self.loc.expand(shape) + scale * torch.randn(shape, dtype=self.loc.dtype)

    def log_prob(self, value):
        z = value - self.loc
        wide = dist.Normal(0.0, self.sigma1).log_prob(z) + math.log(self.pi)
        narrow = dist.Normal(0.0, self.sigma2).log_prob(z) + math.log1p(-self.pi)
        return torch.logaddexp(wide, narrow)


#: The priors' zero locations, by (shape, dtype, device): made once, so that a compiled ELBO holds them
#: (and what follows from them alone, e.g. the prior's log sd) as constants instead of remaking them.
_ZEROS: dict = {}


def _zeros(shape, like: torch.Tensor) -> torch.Tensor:
    key = (tuple(int(n) for n in shape), like.dtype, like.device)
    zeros = _ZEROS.get(key)
    if zeros is None:
        zeros = _ZEROS[key] = torch.zeros(key[0], dtype=like.dtype, device=like.device)
    return zeros


def _prior(kind: str, scale: float, shape, like: torch.Tensor, mixture=SCALE_MIXTURE):
    if kind == "normal":
        return CenteredNormal(scale, shape, like).to_event(len(shape))
    if kind == "scale-mixture":
        pi, s1, s2 = mixture
        return ScaleMixtureNormal(_zeros(shape, like), pi, s1, s2).to_event(len(shape))
    raise ValueError(f"unknown prior '{kind}'; choose one of: {', '.join(PRIORS)}")


PRIORS = ("normal", "scale-mixture")


def mixture_parameters(value) -> tuple:
    """The scale mixture's ``(pi, sigma1, sigma2)`` from a sequence or text ``"0.5,1,0.0025"``; 0 < pi < 1 and
    both scales positive and finite.

    >>> mixture_parameters("0.25, 1, 0.001")
    (0.25, 1.0, 0.001)
    """
    parts = [v for v in value.split(",") if v.strip()] if isinstance(value, str) else list(value)
    try:
        pi, s1, s2 = (float(v) for v in parts)
    except (TypeError, ValueError):
        raise ValueError(f"mixture takes three numbers pi,sigma1,sigma2 (e.g. 0.5,1,0.0025), got {value!r}") from None
    if not 0 < pi < 1 or not all(0 < s < math.inf for s in (s1, s2)):
        raise ValueError(f"mixture: pi must be in (0, 1) and sigma1, sigma2 positive and finite, got {value!r}")
    return pi, s1, s2


def sample_layers(d_in: int, widths, prior: str = "normal", prior_scale: float = 1.0, like=None,
                  mixture=SCALE_MIXTURE) -> list:
    """Sample every layer's (W, b): W_l (out, in), b_l (out,); ``mixture``: the scale mixture's (pi, sigma1,
    sigma2)."""
    like = torch.zeros(()) if like is None else like
    layers = []
    sizes = [d_in, *widths]
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        # W_l ~ p(W), sd s / sqrt(fan_in) under the normal prior;  b_l ~ p(b)
        w_scale = prior_scale / math.sqrt(fan_in) if prior == "normal" else 1.0
        W = pyro.sample(f"layer{layer}.weight", _prior(prior, w_scale, (fan_out, fan_in), like, mixture))
        b = pyro.sample(f"layer{layer}.bias", _prior(prior, prior_scale, (fan_out,), like, mixture))
        layers.append((W, b))
    return layers


@effectful(type="dense")
def dense(h: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One layer's pre-activation ``h W^T + b``: ``h`` (..., n, in), ``W`` (..., out, in), ``b`` (..., out).

    An effectful operation named by layer (``dense(h, W, b, name="layer1")``): with no handler it is
    the plain product; inference handlers may answer it differently, e.g. MC dropout's per-example
    masks (:class:`pyro_bdl.inference.dropout.DropoutMessenger`).
    """
    if W.dim() == 2:  # one network: the fused h W^T + b
        return F.linear(h, W, b)
    return h @ W.transpose(-1, -2) + b.unsqueeze(-2)


@effectful(type="conv2d")
def conv2d(h: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One convolutional layer's pre-activation, zero-padded to keep the image size: ``h`` (n, c_in, H, W),
    ``W`` (c_out, c_in, k, k) with k odd, ``b`` (c_out,) -> (n, c_out, H, W).  Effectful like :func:`dense`
    (``conv2d(h, W, b, name="conv0")``): the local reparameterisation trick answers it too.
    """
    return F.conv2d(h, W, b, padding=W.shape[-1] // 2)


def forward(h: torch.Tensor, layers: list, activation: str = "relu") -> torch.Tensor:
    """h_{l+1} = a(W_l h_l + b_l), no activation after the last layer. ``h``: (n, d) -> (n, out)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{activation}'; choose one of: {', '.join(ACTIVATIONS)}")
    act = ACTIVATIONS[activation]
    for layer, (W, b) in enumerate(layers):
        h = dense(h, W, b, name=f"layer{layer}")
        if layer < len(layers) - 1:
            h = act(h)
    return h


def per_example(f: torch.Tensor) -> torch.Tensor:
    """The net's output (*batch, 1, n, out) under batched weights -> (*batch, n, out).

    Weights drawn inside outer plates (vectorised ELBO particles, parallel predictive draws) have
    batch shape (*batch, 1), the 1 standing for the data plate (dim -1); the data plate's n
    examples take that place.  Unbatched weights give (n, out), left as it is.
    """
    return f.squeeze(-3) if f.dim() > 2 else f


def hidden_widths(hidden) -> tuple:
    """Hidden layer widths from ``50``, ``"50,50"``, ``"50x50"`` or a sequence; at least one, all positive.

    >>> hidden_widths("50,20"), hidden_widths(8)
    ((50, 20), (8,))
    """
    if isinstance(hidden, str):
        hidden = [int(v) for v in hidden.replace("x", ",").split(",") if v.strip()]
    elif isinstance(hidden, int):
        hidden = [hidden]
    hidden = tuple(int(v) for v in hidden)
    if not hidden:  # without hidden layers the "network" is Bayesian linear regression, and MC dropout drops nothing
        raise ValueError("hidden needs at least one layer width, e.g. 50 or 50,50")
    if any(v <= 0 for v in hidden):
        raise ValueError(f"hidden widths must be positive, got {hidden}")
    return hidden
