r"""Fixed feature maps: a deterministic MLP phi whose weights are not sample sites (a Bayesian last layer's inputs).

:math:`h_0 = x`, :math:`h_{\ell+1} = a(A_\ell h_\ell + c_\ell)`, :math:`\phi(x) = h_L`, with weights either

* **random**: :math:`A_\ell \sim \mathcal N(0, t^2 / d_\ell)` (fan-in :math:`d_\ell`),
  :math:`c_\ell \sim \mathcal N(0, t^2)`, drawn once from a private generator seeded with ``feature_seed``
  (``t`` = ``feature_scale``; widths ``hidden``, default 50; activation default tanh); or
* **given or trained**: ``feature_weights``, ``{"activation": "tanh", "layers": [{"weight": [[...]],
  "bias": [...]}, ...]}`` (``weight`` of layer :math:`\ell` is :math:`A_\ell`, (out, in); lists or tensors).
  :mod:`pyro_bdl.models.last_layer.feature_training` makes one from a MAP network regressor's hidden layers
  and reads one from the command line (inline JSON, a JSON file, or a fit directory).

:func:`features` computes :math:`\phi` from the options (a pure function: exact posteriors, guides);
:func:`feature_map` is the same map inside a model, its weights Pyro parameters ``phi.{l}.weight`` and
``phi.{l}.bias``, fixed (no gradient reaches them), so that a fit saves them in its ``params.pt`` as it
saves any model's learned parameters.  Its files record ``feature_weights`` as
``{"activation": ..., "layers": "params.pt"}`` (:func:`weights_on_disk`), and a loaded fit reads the
layers back from its parameters.

Example
-------
>>> import torch
>>> X = torch.linspace(-2, 2, 30).unsqueeze(1)
>>> features(X, hidden=(8,)).shape
torch.Size([30, 8])
>>> torch.equal(features(X, hidden=(8,), feature_seed=3), features(X, hidden=(8,), feature_seed=3))
True
>>> given = {"activation": "relu", "layers": [{"weight": [[1.0], [-1.0]], "bias": [0.0, 0.0]}]}
>>> features(torch.tensor([[-2.0], [3.0]]), feature_weights=given)   # phi(x) = (relu(x), relu(-x))
tensor([[0., 2.],
        [3., 0.]])
"""

from __future__ import annotations

import functools
import math

import pyro
import torch

from pyro_bdl.nn.layers import ACTIVATIONS

__all__ = ["FEATURE_OPTIONS", "features", "feature_map", "weights_on_disk", "parse_widths", "split_feature_options"]

#: The options that decide a feature map phi.
FEATURE_OPTIONS = ("hidden", "activation", "feature_seed", "feature_scale", "feature_weights")


def split_feature_options(options: dict, others=("prior_scale", "noise")) -> tuple[dict, dict]:
    """Options -> (the feature map's, the rest), rejecting names in neither ``FEATURE_OPTIONS`` nor ``others``."""
    unknown = sorted(set(options) - set(FEATURE_OPTIONS) - set(others))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}")
    return ({k: v for k, v in options.items() if k in FEATURE_OPTIONS},
            {k: v for k, v in options.items() if k not in FEATURE_OPTIONS})


#: Random features when no feature_weights are given: widths and activation.
RANDOM_HIDDEN, RANDOM_ACTIVATION = (50,), "tanh"


def parse_widths(hidden) -> tuple:
    """``(50,)``, ``[10, 10]`` (JSON), ``"50"`` or ``"10,10"`` / ``"10x10"`` (CLI) -> a tuple of ints."""
    if isinstance(hidden, str):
        hidden = [v for v in hidden.replace("x", ",").split(",") if v.strip()]
    elif isinstance(hidden, int):
        hidden = [hidden]
    out = tuple(int(v) for v in hidden)
    if not out or any(v <= 0 for v in out):
        raise ValueError(f"hidden must be one or more positive widths, got {hidden!r}")
    return out


@functools.lru_cache(maxsize=64)
def _random_layers(d_in: int, widths: tuple, seed: int, scale: float) -> tuple:
    """Random features: per layer A (out, in) ~ N(0, scale^2/fan_in), c (out,) ~ N(0, scale^2).

    Float64, from a private torch generator seeded with ``seed`` (the global RNG is untouched).
    """
    # drawn on the CPU so that a seed gives the same features on every device; used on the inputs' device
    host = {"dtype": torch.float64, "device": "cpu"}
    gen = torch.Generator(device="cpu").manual_seed(seed)
    layers = []
    for fan_in, fan_out in zip((d_in, *widths[:-1]), widths):
        A = torch.randn(fan_out, fan_in, generator=gen, **host) * (scale / math.sqrt(fan_in))
        c = torch.randn(fan_out, generator=gen, **host) * scale
        layers.append((A, c))
    return tuple(layers)


_WEIGHTS_FORMAT = ('{"activation": ..., "layers": [{"weight": (out, in), "bias": (out,)}, ...]} of lists or '
                   "tensors (as train_feature_map returns)")


def _given_layers(weights, d_in: int) -> tuple[str, tuple]:
    """``feature_weights`` -> (activation, ((A, c), ...)) in float64, with every shape checked."""
    if not isinstance(weights, dict) or set(weights) != {"activation", "layers"} \
            or not isinstance(weights["layers"], (list, tuple)) or not weights["layers"]:
        raise ValueError(f"feature_weights must be {_WEIGHTS_FORMAT}")
    layers, fan_in = [], d_in
    for i, layer in enumerate(weights["layers"]):
        if not isinstance(layer, dict) or set(layer) != {"weight", "bias"} \
                or not all(isinstance(layer[k], (list, tuple, torch.Tensor)) for k in layer):
            raise ValueError(f"feature_weights layer {i} must be {{'weight': (out, in), 'bias': (out,)}} of lists "
                             f"or tensors, got {type(layer).__name__}")
        try:
            A = torch.as_tensor(layer["weight"], dtype=torch.float64).detach()
            c = torch.as_tensor(layer["bias"], dtype=torch.float64).detach()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"feature_weights layer {i}: not a numeric array ({exc})") from None
        if A.dim() != 2 or c.shape != (A.shape[0],):
            raise ValueError(f"feature_weights layer {i}: weight must be (out, in) and bias (out,), "
                             f"got {tuple(A.shape)} and {tuple(c.shape)}")
        if A.shape[1] != fan_in:
            what = f"X has {d_in} column(s)" if i == 0 else f"layer {i - 1} has {fan_in} outputs"
            raise ValueError(f"feature_weights layer {i} takes {A.shape[1]} inputs but {what}")
        if not (torch.isfinite(A).all() and torch.isfinite(c).all()):
            raise ValueError(f"feature_weights layer {i} holds NaN or infinite values")
        layers.append((A, c))
        fan_in = A.shape[0]
    return weights["activation"], tuple(layers)


def _layers(d_in: int, hidden=None, activation: str | None = None, feature_seed: int = 0, feature_scale: float = 2.0,
            feature_weights: dict | None = None) -> tuple[str, tuple]:
    """The options -> (activation, ((A, c), ...)) in float64, every option checked."""
    if feature_weights is None:
        seed = int(feature_seed)
        if seed < 0:
            raise ValueError(f"feature_seed must be a non-negative integer, got {feature_seed}")
        if not float(feature_scale) > 0:
            raise ValueError(f"feature_scale must be positive, got {feature_scale}")
        widths = RANDOM_HIDDEN if hidden is None else parse_widths(hidden)
        activation = RANDOM_ACTIVATION if activation is None else activation
        layers = _random_layers(d_in, widths, seed, float(feature_scale))
    else:
        if isinstance(feature_weights, dict) and feature_weights.get("layers") == SAVED:
            raise ValueError("feature_weights are in a fit's params.pt: the map runs inside the model "
                             "(feature_map, under FitResult.own_params), not from the options alone")
        given_activation, layers = _given_layers(feature_weights, d_in)
        widths = tuple(A.shape[0] for A, _ in layers)
        if hidden is not None and parse_widths(hidden) != widths:
            raise ValueError(f"hidden={parse_widths(hidden)} disagrees with the widths {widths} of feature_weights "
                             "(leave hidden unset to take them from the weights)")
        if activation is not None and activation != given_activation:
            raise ValueError(f"activation={activation!r} disagrees with feature_weights' {given_activation!r} "
                             "(leave activation unset to take it from the weights)")
        activation = given_activation
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{activation}'; choose one of: {', '.join(ACTIVATIONS)}")
    return activation, layers


def _apply(X: torch.Tensor, activation: str, layers) -> torch.Tensor:
    act = ACTIVATIONS[activation]
    h = X
    for A, c in layers:
        h = act(h @ A.to(X).T + c.to(X))  # h_{l+1} = a(A_l h_l + c_l)  (A, c on the dtype and device of X)
    return h


def features(X: torch.Tensor, hidden=None, activation: str | None = None, feature_seed: int = 0,
             feature_scale: float = 2.0, feature_weights: dict | None = None) -> torch.Tensor:
    """phi(X): (n, d) -> (n, h); a deterministic function of the options and X, in X's dtype.

    Random features (widths ``hidden``, default 50; ``activation``, default tanh) unless ``feature_weights``
    are given, whose widths and activation ``hidden`` and ``activation`` must then match if given.
    """
    return _apply(X, *_layers(int(X.shape[-1]), hidden, activation, feature_seed, feature_scale, feature_weights))


#: What a fit's files hold in place of the feature map's layers: they are in its params.pt.
SAVED = "params.pt"


def weights_on_disk(feature_weights: dict | None) -> dict | None:
    """How a fit's files record ``feature_weights``: ``{"activation": ..., "layers": "params.pt"}`` (the layers
    are the model's parameters, saved with them), or None.

    >>> weights_on_disk({"activation": "relu", "layers": [{"weight": [[1.0]], "bias": [0.0]}]})
    {'activation': 'relu', 'layers': 'params.pt'}
    """
    if feature_weights is None:
        return None
    return {"activation": feature_weights.get("activation"), "layers": SAVED}


def feature_map(X: torch.Tensor, hidden=None, activation: str | None = None, feature_seed: int = 0,
                feature_scale: float = 2.0, feature_weights: dict | None = None, name: str = "phi") -> torch.Tensor:
    """phi(X) inside a model, (n, d) -> (n, h): :func:`features`, its layers the Pyro parameters
    ``{name}.{l}.weight`` (out, in) and ``{name}.{l}.bias`` (out,), float64, fixed (no gradient reaches them).

    From the options, the parameters start at the options' values; as for any ``pyro.param``, values the
    param store already holds under these names win (every fit starts with a clear store; to run the model
    by hand with other options, ``pyro.clear_param_store()`` first); the options are checked at the first call
    only, so that later calls have no data-dependent branches (the zoo's NUTS traces the model).  From a
    loaded fit (``feature_weights["layers"] == "params.pt"``), the layers are read from the store, which
    :meth:`FitResult.own_params` fills from the fit's params.pt.

    >>> import pyro, torch
    >>> pyro.clear_param_store()
    >>> X = torch.linspace(-2, 2, 5).unsqueeze(1)
    >>> torch.equal(feature_map(X, hidden=(3,)), features(X, hidden=(3,))), pyro.param("phi.0.weight").shape
    (True, torch.Size([3, 1]))
    """
    store = pyro.get_param_store()
    if f"{name}.0.weight" not in store:  # the first call: the layers from the options, checked once
        if isinstance(feature_weights, dict) and feature_weights.get("layers") == SAVED:
            raise ValueError(f"the feature map's layers are in the fit's params.pt, but the param store holds no "
                             f"'{name}.0.weight': run the model under FitResult.own_params()")
        activation, layers = _layers(int(X.shape[-1]), hidden, activation, feature_seed, feature_scale, feature_weights)
        for l, (A, c) in enumerate(layers):
            pyro.param(f"{name}.{l}.weight", A.clone())
            pyro.param(f"{name}.{l}.bias", c.clone())
    elif feature_weights is not None:
        activation = feature_weights["activation"]
    elif activation is None:
        activation = RANDOM_ACTIVATION
    count = 0
    while f"{name}.{count}.weight" in store:
        count += 1
    # every call (once the layers are in the store): no checks on tensor values, so the model traces
    layers = tuple((pyro.param(f"{name}.{l}.weight").detach(), pyro.param(f"{name}.{l}.bias").detach())
                   for l in range(count))
    return _apply(X, activation, layers)

