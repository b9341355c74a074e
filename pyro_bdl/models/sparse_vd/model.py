r"""Sparse variational dropout (Molchanov, Ashukha & Vetrov 2017): Bayesian networks that prune themselves.

An MLP whose weights carry the improper log-uniform prior, biases (and a regression's noise sd) learned as
point estimates:

.. math::

    p(|W_{\ell,ij}|) \propto \frac{1}{|W_{\ell,ij}|}, \qquad
    h_0 = x, \quad h_{\ell+1} = a(W_\ell h_\ell + b_\ell), \quad f(x) = W_L h_L + b_L,

with :math:`y \sim \mathrm{Categorical}(\mathrm{softmax}(f(x)))` (``sparse-vd``) or
:math:`y \sim \mathcal N(f(x), \sigma^2)` (``sparse-vd-regressor``).

Posterior, one Normal per weight: :math:`q(W_{ij}) = \mathcal N(\mu_{ij}, \alpha_{ij}\mu_{ij}^2)`, in the
additive-noise parameterisation: :math:`\mu` and :math:`\log\sigma^2` are learned directly and
:math:`\alpha = \sigma^2 / \mu^2` follows (the gradient's noise then does not grow with :math:`\alpha`,
which multiplicative noise :math:`w = \mu(1 + \sqrt\alpha\,\varepsilon)` makes huge).  The ELBO

.. math:: \sum_n \mathbb E_q \log p(y_n \mid x_n, W) - \sum_{\ell ij} \mathrm{KL}(q(W_{\ell,ij}) \,\|\, p(W_{\ell,ij}))

takes its KL from Molchanov et al.'s approximation (:mod:`pyro_bdl.nn.log_uniform`: a function of
:math:`\alpha` alone, falling to 0 as :math:`\alpha \to \infty`), its expected log-likelihood from the local
reparameterisation trick (:mod:`pyro_bdl.inference.local_reparam`), minibatches scaled by N / B.  The KL
pushes every :math:`\alpha` up; the likelihood holds the useful weights back.  Weights with
:math:`\log\alpha > 3` (option ``threshold``; :math:`\alpha > 20`, a dropout rate above 0.95) are set to
zero: the fit's posterior draws are those of the pruned network (:mod:`pyro_bdl.models.sparse_vd.pruning`), its ArviZ
posterior holds the kept weights only, and ``metrics.json`` reports what is kept.

Example
-------
>>> import torch, pyro
>>> X = torch.randn(5, 4)
>>> tr = pyro.poutine.trace(sparse_vd_classifier).get_trace(X, num_classes=3, hidden=(6,))
>>> [(n, s["type"]) for n, s in tr.nodes.items() if n.startswith("layer0")]
[('layer0.weight', 'sample'), ('layer0.bias', 'param')]
>>> y = torch.tensor([0, 1, 2, 0, 1])
>>> guide = SparseVDGuide(lambda X, y: sparse_vd_classifier(X, y, num_classes=3, hidden=(6,)))
>>> sorted(guide(X, y))
['layer0.weight', 'layer1.weight']
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch.nn.functional as F
from torch.distributions import constraints

from pyro_bdl.inference import Domain
from pyro_bdl.inference.guides import SparseVDGuide, init_weights
from pyro_bdl.models.networks import BBB_SETTINGS, NOISE_INIT, network_data
from pyro_bdl.models.sparse_vd.pruning import image_side, pruning_hooks
from pyro_bdl.nn.layers import ACTIVATIONS, conv2d, forward, hidden_widths, per_example
from pyro_bdl.nn.log_uniform import LogUniform
from pyro_bdl.registry import InferenceChoices, ModelSpec, Option, register

__all__ = ["sparse_vd_classifier", "sparse_vd_regressor", "sparse_vd_lenet5"]


def sparse_layers(d_in: int, widths, like) -> list:
    """Every layer's (W, b): W_l (out, in) with the log-uniform prior, b_l (out,) a point estimate."""
    layers, sizes = [], [d_in, *widths]
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        # W_l ~ LogUniform (improper): p(|w|) ∝ 1/|w|
        W = pyro.sample(f"layer{layer}.weight", LogUniform((fan_out, fan_in), like).to_event(2))
        b = pyro.param(f"layer{layer}.bias", lambda: like.new_zeros(fan_out))
        layers.append((W, b))
    return layers


def sparse_vd_classifier(X, y=None, num_classes=None, hidden=(300, 100), activation="relu", batch_size=None):
    """Sparse VD classification. ``X``: (n, d), ``y``: (n,) labels in [0, num_classes)."""
    if num_classes is None:
        raise ValueError("sparse_vd_classifier needs num_classes")
    layers = sparse_layers(X.shape[-1], (*hidden_widths(hidden), int(num_classes)), X)
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        logits = per_example(forward(X[idx], layers, activation))
        # y_i ~ Categorical(softmax(f(x_i)))
        return pyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx].long())


def sparse_vd_regressor(X, y=None, hidden=(50,), activation="relu", noise=None, batch_size=None):
    """Sparse VD regression. ``X``: (n, d), ``y``: (n,); the noise sd is learned unless ``noise`` fixes it."""
    layers = sparse_layers(X.shape[-1], (*hidden_widths(hidden), 1), X)
    sigma = pyro.param("sigma", lambda: X.new_tensor(NOISE_INIT), constraint=constraints.positive) \
        if noise is None else noise
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        f = per_example(forward(X[idx], layers, activation))[..., 0]
        # y_i ~ N(f(x_i), sigma^2)
        return pyro.sample("y", dist.Normal(f, sigma), obs=None if y is None else y[idx])


def sparse_vd_lenet5(X, y=None, num_classes=None, channels=(10, 20), kernel=3, hidden=100, activation="relu",
                     batch_size=None):
    """Sparse VD LeNet-5 style for square images. ``X``: (n, side * side), each row an image; two k x k
    convolutions (``channels``, zero-padded), each followed by the activation and 2 x 2 max pooling, then a
    dense layer of ``hidden`` units and the output."""
    side = image_side(X.shape[-1])
    if side is None or side < 2 ** len(channels):
        raise ValueError(f"sparse_vd_lenet5 takes square images of side >= {2 ** len(channels)}, flattened; got "
                         f"{X.shape[-1]} columns")
    if num_classes is None:
        raise ValueError("sparse_vd_lenet5 needs num_classes")
    if kernel % 2 == 0:
        raise ValueError(f"kernel must be odd (the padding keeps the image size), got {kernel}")
    convs, c_in = [], 1
    for layer, c_out in enumerate(channels):
        # K_l ~ LogUniform (improper), c_out x c_in kernels of k x k; a point bias per channel
        K = pyro.sample(f"conv{layer}.weight", LogUniform((c_out, c_in, kernel, kernel), X).to_event(4))
        convs.append((K, pyro.param(f"conv{layer}.bias", lambda: X.new_zeros(c_out))))
        c_in = c_out
    pooled = side // 2 ** len(channels)
    layers = sparse_layers(c_in * pooled * pooled, (int(hidden), int(num_classes)), X)
    act = ACTIVATIONS[activation]
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        h = X[idx].reshape(-1, 1, side, side)
        for layer, (K, b) in enumerate(convs):  # h_{l+1} = maxpool(a(K_l * h_l + b_l))
            h = F.max_pool2d(act(conv2d(h, K, b, name=f"conv{layer}")), 2)
        logits = per_example(forward(h.flatten(-3), layers, activation))
        # y_i ~ Categorical(softmax(f(x_i)))
        return pyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx].long())


#: The networks' SVI path with local reparameterisation; 100 draws of the (pruned) posterior by default.
_SVD_PATH = {"svi-meanfield": {**BBB_SETTINGS["svi-meanfield"], "local_reparam": True, "samples": 100}}
_COMMON = {
    "activation": Option("relu", f"one of {', '.join(ACTIVATIONS)}", str),
    "threshold": Option(3.0, "prune weights with log alpha above this (3: alpha > 20, dropout rate > 0.95)",
                        domain=Domain(float, finite=True), model_arg=False),
}


def _spec(classifier: bool) -> dict:
    """The network machinery's data contract (standardised data, checks), with this model's prior, guide, start,
    and its pruning and reports."""
    return {"data": network_data(classifier=classifier),
            "inference": InferenceChoices(traits=frozenset({"continuous", "network", "improper-prior"}),
                                          guides={"sparse-vd": SparseVDGuide},
                                          default_guides={m: "sparse-vd" for m in _SVD_PATH}, method_defaults=_SVD_PATH,
                                          init_loc_fn=init_weights),
            "hooks": pruning_hooks("threshold")}


register(ModelSpec(
    name="sparse-vd",
    model=sparse_vd_classifier,
    summary="sparse variational dropout MLP classifier (log-uniform prior; prunes weights with log alpha > 3)",
    options={"hidden": Option((300, 100), "hidden layer widths (LeNet-300-100: 300,100)", hidden_widths), **_COMMON,
             "num_classes": Option(None, "number of classes (default: from the training labels)", int,
                                   domain=Domain(int, 2))},
    default_data="digits",
    **_spec(classifier=True),
))
register(ModelSpec(
    name="sparse-vd-lenet5",
    model=sparse_vd_lenet5,
    summary="sparse variational dropout LeNet-5 style convolutional classifier for square images (rows of pixels)",
    options={"channels": Option((10, 20), "channels of the two convolutions (LeNet-5-Caffe: 20,50)", hidden_widths),
             "kernel": Option(3, "kernel side k, odd (LeNet-5-Caffe: 5)", int, domain=Domain(int, 1)),
             "hidden": Option(100, "units of the dense layer (LeNet-5-Caffe: 500)", int, domain=Domain(int, 1)),
             **_COMMON,
             "num_classes": Option(None, "number of classes (default: from the training labels)", int,
                                   domain=Domain(int, 2))},
    default_data="digits",
    **_spec(classifier=True),
))
register(ModelSpec(
    name="sparse-vd-regressor",
    model=sparse_vd_regressor,
    summary="sparse variational dropout MLP regression, N(f(x), sigma^2) (log-uniform prior; prunes log alpha > 3)",
    options={"hidden": Option((50,), "hidden layer widths, e.g. 50 or 50,50", hidden_widths), **_COMMON,
             "noise": Option(None, f"fixed noise sd in standardised units; omit to learn it (starts at {NOISE_INIT})",
                             lambda t: None if t.lower() in ("", "none") else float(t),
                             domain=Domain(float, 0, open_low=True, finite=True))},
    default_data="sine",
    **_spec(classifier=False),
))
