r"""Covariance functions of Gaussian processes, their sums and products, parsed from a name such as ``"rbf"`` or
``"rbf*periodic+linear"`` (``*`` binds tighter than ``+``).

With :math:`r^2 = \sum_d (x_d - z_d)^2 / \ell_d^2` (one lengthscale per input: ARD) and :math:`v` the kernel's
variance:

=================  ==========================================================================================
``rbf``            :math:`v \exp(-r^2 / 2)`
``matern12``       :math:`v \exp(-r)`
``matern32``       :math:`v (1 + \sqrt3 r) \exp(-\sqrt3 r)`
``matern52``       :math:`v (1 + \sqrt5 r + 5 r^2 / 3) \exp(-\sqrt5 r)`
``rq``             :math:`v (1 + r^2 / (2 \alpha))^{-\alpha}` (rational quadratic)
``periodic``       :math:`v \exp(-2 \sum_d \sin^2(\pi |x_d - z_d| / p) / \ell^2)` (one lengthscale, one period p)
``linear``         :math:`c + v\, x^\top z` (its ``offset`` c)
``arccos``         the infinitely wide one-hidden-layer ReLU network (Cho & Saul 2009, order 1):
                   :math:`\frac v\pi \sqrt{\Sigma_{xx}\Sigma_{zz}}\,(\sin\theta + (\pi - \theta)\cos\theta)`,
                   :math:`\Sigma_{xz} = b + \sum_d x_d z_d / \ell_d^2`, :math:`\cos\theta = \Sigma_{xz} /
                   \sqrt{\Sigma_{xx}\Sigma_{zz}}`
``arcsin``         the infinitely wide network of erf units (Williams 1998), a tanh network's GP:
                   :math:`\frac{2v}\pi \arcsin\big(2\Sigma_{xz} / \sqrt{(1 + 2\Sigma_{xx})(1 + 2\Sigma_{zz})}\big)`
=================  ==========================================================================================

The two network kernels are those of Gal & Ghahramani (2016): a network with dropout and weight decay is variational
inference in the GP whose covariance is :math:`\int \sigma(w^\top x + b)\,\sigma(w^\top z + b)\, p(w)\,p(b)`, here in
closed form for a Gaussian :math:`p(w)` (the bias's variance ``b``, the weights' ``1 / l_d^2``).

A sum has one variance per term, a product one for the whole product (its factors' would multiply into one, which
the data cannot tell apart).  The hyperparameters are named by :attr:`Kernel.hypers`: ``lengthscale``, ``variance``,
... for a kernel alone, ``rbf.lengthscale``, ``periodic.period`` ... in a sum or product (``rbf_2.lengthscale`` for
a second ``rbf``).  Every function takes hyperparameters with leading batch dimensions (one set per posterior draw)
and returns matrices with those dimensions first.

Example
-------
>>> import torch
>>> k = parse_kernel("rbf+linear")
>>> [h.name for h in k.hypers]
['rbf.lengthscale', 'rbf.variance', 'linear.offset', 'linear.variance']
>>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
>>> values = {"rbf.lengthscale": torch.tensor([1.0]), "rbf.variance": torch.tensor(2.0),
...           "linear.variance": torch.tensor(1.0), "linear.offset": torch.tensor(0.5)}
>>> k.matrix(X, X, values)
tensor([[2.5000, 1.7131],
        [1.7131, 3.5000]], dtype=torch.float64)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

__all__ = ["Hyper", "Kernel", "KERNELS", "parse_kernel"]


@dataclass(frozen=True)
class Hyper:
    """One hyperparameter: its site ``name``, its ``kind`` (``lengthscale``, ``variance``, ``period``, ``alpha``,
    ``bias``, ``weight``: what its prior is scaled by) and whether it has one value per input (``per_input``)."""

    name: str
    kind: str
    per_input: bool = False


def _sq_dist(X: torch.Tensor, Z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """:math:`\\sum_d (x_d - z_d)^2 / s_d^2`, (..., n, m), for ``scale`` (..., d): by the expansion |a|^2 + |b|^2 -
    2 a.b (no (n, m, d) array), clamped at 0."""
    a, b = X / scale[..., None, :], Z / scale[..., None, :]
    sq = (a * a).sum(-1)[..., :, None] + (b * b).sum(-1)[..., None, :] - 2.0 * a @ b.transpose(-1, -2)
    return sq.clamp_min(0.0)


def _inner(X: torch.Tensor, Z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """:math:`b + \\sum_d x_d z_d / w_d^2` (..., n, m) for ``weight`` (..., d), ``bias`` (...)."""
    return bias[..., None, None] + (X / weight[..., None, :] ** 2) @ Z.transpose(-1, -2)


def _inner_diag(X: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return bias[..., None] + (X * X / weight[..., None, :] ** 2).sum(-1)


@dataclass(frozen=True)
class _Base:
    """One covariance function of unit variance: ``fn(X, Z, values) -> (..., n, m)``, its diagonal, its own
    hyperparameters (kind, per input) other than the variance."""

    fn: Callable
    diag: Callable
    own: tuple[tuple[str, bool], ...]


def _stationary(profile: Callable) -> _Base:
    return _Base(lambda X, Z, h: profile(_sq_dist(X, Z, h["lengthscale"])),
                 lambda X, h: X.new_ones(h["lengthscale"].shape[:-1] + X.shape[:1]), (("lengthscale", True),))


def _matern(nu2: int) -> Callable:
    def profile(r2):
        r = (r2 + 1e-30).sqrt() * math.sqrt(nu2)  # sqrt(2 nu) r with nu = nu2 / 2; 1e-30: a finite gradient at 0
        poly = {1: 1.0, 3: 1.0 + r, 5: 1.0 + r + r * r / 3.0}[nu2]
        return poly * torch.exp(-r)
    return profile


def _periodic(X, Z, h):
    period, length = h["period"][..., None, None, None], h["lengthscale"][..., None, None]
    apart = (X[:, None, :] - Z[None, :, :]).abs()  # (n, m, d): a product of one-input kernels, positive definite
    return torch.exp(-2.0 * (torch.sin(math.pi * apart / period) ** 2).sum(-1) / length ** 2)


def _rq(X, Z, h):
    alpha = h["alpha"][..., None, None]
    return (1.0 + _sq_dist(X, Z, h["lengthscale"]) / (2.0 * alpha)) ** -alpha


#: How far inside [-1, 1] a cosine is kept for acos / asin, whose derivatives are infinite at the ends (the value
#: moves by about 1e-12 relative there)
_EDGE = 1e-12


def _arccos(X, Z, h):
    xz = _inner(X, Z, h["weight"], h["bias"])
    xx, zz = _inner_diag(X, h["weight"], h["bias"]), _inner_diag(Z, h["weight"], h["bias"])
    norm = (xx[..., :, None] * zz[..., None, :]).sqrt()
    cos = (xz / norm).clamp(-1.0 + _EDGE, 1.0 - _EDGE)  # acos' is infinite at +-1 (every diagonal entry): a NaN gradient
    theta = torch.acos(cos)
    return norm * (torch.sin(theta) + (math.pi - theta) * cos) / math.pi


def _arccos_diag(X, h):
    return _inner_diag(X, h["weight"], h["bias"])  # theta = 0: norm * pi / pi


def _arcsin(X, Z, h):
    xz = _inner(X, Z, h["weight"], h["bias"])
    xx, zz = _inner_diag(X, h["weight"], h["bias"]), _inner_diag(Z, h["weight"], h["bias"])
    ratio = 2.0 * xz / ((1.0 + 2.0 * xx[..., :, None]) * (1.0 + 2.0 * zz[..., None, :])).sqrt()
    return 2.0 / math.pi * torch.asin(ratio.clamp(-1.0 + _EDGE, 1.0 - _EDGE))


def _arcsin_diag(X, h):
    xx = _inner_diag(X, h["weight"], h["bias"])
    return 2.0 / math.pi * torch.asin(2.0 * xx / (1.0 + 2.0 * xx))


#: name -> the unit-variance covariance function and its own hyperparameters
KERNELS: dict[str, _Base] = {
    "rbf": _stationary(lambda r2: torch.exp(-0.5 * r2)),
    "matern12": _stationary(_matern(1)),
    "matern32": _stationary(_matern(3)),
    "matern52": _stationary(_matern(5)),
    "rq": _Base(_rq, lambda X, h: X.new_ones(h["alpha"].shape + X.shape[:1]), (("lengthscale", True), ("alpha", False))),
    "periodic": _Base(_periodic, lambda X, h: X.new_ones(h["period"].shape + X.shape[:1]),
                      (("lengthscale", False), ("period", False))),
    "linear": _Base(lambda X, Z, h: X @ Z.transpose(-1, -2) + h["offset"][..., None, None] / h["variance"][..., None, None],
                    lambda X, h: (X * X).sum(-1) + h["offset"][..., None] / h["variance"][..., None],
                    (("offset", False),)),
    "arccos": _Base(_arccos, _arccos_diag, (("weight", True), ("bias", False))),
    "arcsin": _Base(_arcsin, _arcsin_diag, (("weight", True), ("bias", False))),
}


@dataclass(frozen=True)
class Kernel:
    """A sum of products of :data:`KERNELS` entries (``terms``: per term, its factors' names), one variance per
    term.  :attr:`hypers` names the hyperparameters; :meth:`matrix` and :meth:`diagonal` take them as a dict
    ``name -> tensor`` ((..., d) per input, (...) otherwise)."""

    terms: tuple[tuple[str, ...], ...]

    def _labels(self) -> list[tuple[str, ...]]:
        """Each factor's label: its name alone for a kernel of one factor, else ``name`` or ``name_k`` (the k-th)."""
        single = len(self.terms) == 1 and len(self.terms[0]) == 1
        seen: dict[str, int] = {}
        out = []
        for term in self.terms:
            labels = []
            for name in term:
                seen[name] = seen.get(name, 0) + 1
                labels.append("" if single else name if seen[name] == 1 else f"{name}_{seen[name]}")
            out.append(tuple(labels))
        return out

    @property
    def hypers(self) -> list[Hyper]:
        out = []
        for term, labels in zip(self.terms, self._labels()):
            for i, (name, label) in enumerate(zip(term, labels)):
                prefix = f"{label}." if label else ""
                out += [Hyper(prefix + kind, kind, per) for kind, per in KERNELS[name].own]
                if i == 0:
                    out.append(Hyper(prefix + "variance", "variance"))
        return out

    def _parts(self, values: dict):
        for term, labels in zip(self.terms, self._labels()):
            variance = None
            parts = []
            for i, (name, label) in enumerate(zip(term, labels)):
                prefix = f"{label}." if label else ""
                own = {kind: values[prefix + kind] for kind, _ in KERNELS[name].own}
                if i == 0:
                    variance = values[prefix + "variance"]
                own["variance"] = variance  # read by linear (its offset is in the variance's units)
                parts.append((KERNELS[name], own))
            yield variance, parts

    def matrix(self, X: torch.Tensor, Z: torch.Tensor, values: dict) -> torch.Tensor:
        """k(X, Z): (..., n, m) for X (n, d), Z (m, d)."""
        total = None
        for variance, parts in self._parts(values):
            term = variance[..., None, None]
            for base, own in parts:
                term = term * base.fn(X, Z, own)
            total = term if total is None else total + term
        return total

    def diagonal(self, X: torch.Tensor, values: dict) -> torch.Tensor:
        """k(x, x) for every row: (..., n)."""
        total = None
        for variance, parts in self._parts(values):
            term = variance[..., None]
            for base, own in parts:
                term = term * base.diag(X, own)
            total = term if total is None else total + term
        return total


def parse_kernel(text: str) -> Kernel:
    """The :class:`Kernel` a name describes: ``+`` between terms, ``*`` between the factors of a term; a clear
    error naming the unknown kernel and the known ones."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"kernel must be a name such as 'rbf' or 'rbf*periodic+linear', got {text!r}")
    terms = []
    for term in text.replace(" ", "").lower().split("+"):
        factors = tuple(term.split("*"))
        unknown = [f for f in factors if f not in KERNELS]
        if unknown or not term:
            raise ValueError(f"unknown kernel {unknown[0] if unknown else term!r} in {text!r}; the kernels are "
                             f"{', '.join(KERNELS)}, combined with + and *")
        terms.append(factors)
    return Kernel(tuple(terms))
