r"""The hyperparameters of a Gaussian process: their weakly informative priors in the training data's own units
(the formulas in :mod:`pyro_bdl.models.gp.model`'s docstring), the fixed values a user gives (``"lengthscale=0.5,
noise=0.1"``), their sample sites, and the option readers that refuse a bad kernel or value when an option is read.

Example
-------
>>> import torch
>>> parse_fixed("lengthscale=0.5;2, noise=0.1")
{'lengthscale': [0.5, 2.0], 'noise': 0.1}
>>> X = torch.randn(50, 2); prior = hyperparameter_prior("lengthscale", True, X, None)
>>> prior.event_shape
torch.Size([2])
"""

from __future__ import annotations

import math
import weakref

import pyro
import pyro.distributions as dist
import torch

from pyro_bdl.nn.kernels import Hyper, parse_kernel

__all__ = ["data_scales", "hyperparameter_prior", "parse_fixed", "sample_hyperparameters", "double", "rows_batch",
           "kernel_option", "fixed_option"]


#: The training data's scales, per inputs tensor (weakly held: gone with it), read at every step of a fit: computed
#: once (timed: benchmarks/RESULTS.md, "Gaussian processes, second part").
_SCALES: dict = {}


def data_scales(X: torch.Tensor, y: torch.Tensor | None) -> tuple:
    """``(sd_y (), sd_x (d,), rms_x (d,))`` of the training rows ``X`` (n, d) and ``y`` (n,) or None (sd 1 where not
    defined or 0), computed once per pair of tensors and kept while ``X`` lives (recomputed after an in-place
    change of either)."""
    key = (id(y), None if y is None else y._version, X._version)
    kept = _SCALES.get(id(X))
    if kept is not None and kept[0]() is X and kept[1] == key and (y is None or kept[2]() is y):
        return kept[3]
    with torch.no_grad():
        one = X.new_ones(())
        sd_y = y.std() if y is not None and len(y) > 1 and bool(y.std() > 0) else one
        sd_x = X.std(0) if len(X) > 1 else X.new_ones(X.shape[-1])
        sd_x = torch.where(sd_x > 0, sd_x, X.new_ones(()))
        rms_x = (X * X).mean(0).sqrt().clamp_min(1e-6)
    scales = (sd_y, sd_x, rms_x)
    _SCALES[id(X)] = (weakref.ref(X, lambda _, k=id(X): _SCALES.pop(k, None)), key,
                      (lambda: None) if y is None else weakref.ref(y), scales)
    return scales


def hyperparameter_prior(kind: str, per_input: bool, X: torch.Tensor, y: torch.Tensor | None):
    """The prior of one hyperparameter of ``kind`` (module docstring), scaled by the training data ``X`` (n, d),
    ``y`` (n,)."""
    one = X.new_ones(())
    sd_y, sd_x, rms_x = data_scales(X, y)
    if kind == "noise":
        return dist.HalfNormal(sd_y)
    loc = {"lengthscale": (sd_x * math.sqrt(X.shape[-1])).log() if per_input else 0.0 * one, "variance": 2.0 * sd_y.log(),
           "offset": 2.0 * sd_y.log(), "period": sd_x.mean().log(), "alpha": 0.0 * one, "bias": 0.0 * one,
           "weight": rms_x.log()}[kind]
    prior = dist.LogNormal(loc, one)
    return prior.to_event(1) if per_input else prior


def parse_fixed(text) -> dict:
    """``"lengthscale=0.5, noise=0.1"`` (or a dict) -> ``{"lengthscale": 0.5, "noise": 0.1}``: each value a positive
    finite number (a list ``[0.5, 2]`` or ``0.5;2`` for one per input)."""
    if text is None or text == "":
        return {}
    items = text.items() if isinstance(text, dict) else (part.split("=", 1) for part in str(text).split(",") if part.strip())
    out = {}
    for item in items:
        if len(item) != 2:
            raise ValueError(f"fixed takes name=value pairs separated by commas, got {text!r}")
        name, value = item[0].strip(), item[1]
        values = [float(v) for v in str(value).strip("[]() ").replace(";", " ").replace(",", " ").split()] \
            if isinstance(value, str) else [float(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        if not values or not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"the fixed hyperparameter {name!r} must be positive and finite, got {value!r}")
        out[name] = values[0] if len(values) == 1 else values
    return out


def sample_hyperparameters(kernel, X, y, noise, fixed, with_noise: bool = True) -> dict:
    """Every hyperparameter's value (the kernel's, and the noise sd ``with_noise``): fixed where given (``fixed``:
    :func:`parse_fixed`'s dict; ``noise``: a fixed noise sd or None), else a sample site under its prior scaled by the
    training rows ``X`` (n, d) and ``y`` (n,) or None."""
    hypers = kernel.hypers + ([Hyper("noise", "noise")] if with_noise else [])
    names = [h.name for h in hypers]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(f"fixed names {', '.join(map(repr, unknown))}, not hyperparameters of this kernel "
                         f"({', '.join(names)})")
    values = {}
    for h in hypers:
        given = noise if h.name == "noise" and noise is not None else fixed.get(h.name)
        if given is not None:
            value = torch.as_tensor(given, dtype=X.dtype, device=X.device)
            values[h.name] = value.expand(X.shape[-1:]) if h.per_input else value
        else:
            values[h.name] = pyro.sample(h.name, hyperparameter_prior(h.kind, h.per_input, X, y))
    return values


def double(values: dict) -> dict:
    """Every value in float64 (the kernel matrices' precision)."""
    return {k: v.double() for k, v in values.items()}


def rows_batch(values: dict, kernel, *others: torch.Size) -> torch.Size:
    """The hyperparameters' batch shape, broadcast with ``others`` (other sites' batch shapes: the inducing values'):
    one set per posterior draw when the predictive runs every draw at once."""
    per_input = {h.name for h in kernel.hypers if h.per_input}
    return torch.broadcast_shapes(*[v.shape[:-1] if k in per_input else v.shape for k, v in values.items()], *others)


def kernel_option(text: str) -> str:
    """The ``kernel`` option as read: a clear error for a kernel that does not exist, when the option is read."""
    parse_kernel(text)
    return text


def fixed_option(text: str) -> str:
    """The ``fixed`` option as read: a clear error for a non-positive value, when the option is read."""
    parse_fixed(text)
    return text
