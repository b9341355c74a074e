r"""Bayesian neural networks: an MLP whose weights and biases are random variables.

For layers :math:`\ell = 0, \dots, L` with fan-in :math:`d_\ell`,

.. math::

    W_\ell \sim p(W), \quad b_\ell \sim p(b), \qquad
    h_0 = x, \quad h_{\ell+1} = a(W_\ell h_\ell + b_\ell), \quad f(x) = W_L h_L + b_L,

with either prior

* ``normal``: :math:`W_{\ell,ij} \sim \mathcal N(0, s^2 / d_\ell)` (scaled by fan-in, so the output
  scale does not grow with width), :math:`b_{\ell,i} \sim \mathcal N(0, s^2)`;
* ``scale-mixture`` (Blundell et al. 2015, Eq. 7):
  :math:`\pi\,\mathcal N(0, \sigma_1^2) + (1 - \pi)\,\mathcal N(0, \sigma_2^2)` with
  :math:`\pi = 1/2, \sigma_1 = 1, \sigma_2 = e^{-6}` by default (option ``mixture``).

Likelihoods: regression :math:`y \sim \mathcal N(f(x), \sigma^2)` with :math:`\sigma` fixed (option
``noise``) or :math:`\sigma \sim \mathrm{HalfNormal}(1)`; heteroscedastic regression, where the net has
two outputs :math:`(f, g)` and :math:`\sigma(x) = \mathrm{softplus}(g(x)) + 10^{-3}`; classification
:math:`y \sim \mathrm{Categorical}(\mathrm{softmax}(f(x)))`.

Sample sites are named by layer: ``layer0.weight`` (shape (out, in)), ``layer0.bias`` (out,), ...
Inputs and (for regression) targets are standardised by :func:`pyro_bdl.fit` on the training data.

Example
-------
>>> import torch, pyro
>>> X = torch.randn(5, 3)
>>> y = bnn_regressor(X, hidden=(4,), noise=0.1)
>>> y.shape
torch.Size([5])
>>> tr = pyro.poutine.trace(bnn_classifier).get_trace(X, num_classes=3, hidden=(4,))
>>> [n for n in tr.nodes if n.startswith("layer")]
['layer0.weight', 'layer0.bias', 'layer1.weight', 'layer1.bias']
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch.nn.functional as F

from pyro_bdl.inference import Domain
from pyro_bdl.models.networks import NETWORK_INFERENCE, NOISE_INIT, network_data
from pyro_bdl.nn.layers import (ACTIVATIONS, PRIORS, SCALE_MIXTURE, forward, hidden_widths, mixture_parameters,
                                per_example, sample_layers)
from pyro_bdl.registry import ModelSpec, Option, register

__all__ = ["bnn_regressor", "bnn_classifier", "IN_BETWEEN"]


def bnn_regressor(X, y=None, hidden=(50,), activation="relu", prior="normal", prior_scale=2.0,
                  likelihood="homoscedastic", noise=None, batch_size=None, mixture=SCALE_MIXTURE):
    """BNN regression. ``X``: (n, d), ``y``: (n,). Returns y (n,) (or the minibatch's)."""
    hidden = hidden_widths(hidden)
    if likelihood not in ("homoscedastic", "heteroscedastic"):
        raise ValueError(f"unknown likelihood '{likelihood}'; choose homoscedastic or heteroscedastic")
    outputs = 2 if likelihood == "heteroscedastic" else 1
    layers = sample_layers(X.shape[-1], (*hidden, outputs), prior, prior_scale, X, mixture)
    if likelihood == "homoscedastic":
        # sigma ~ HalfNormal(1) (targets are standardised), unless the noise is fixed
        sigma = pyro.sample("sigma", dist.HalfNormal(X.new_ones(()))) if noise is None else noise
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        f = per_example(forward(X[idx], layers, activation))
        if likelihood == "heteroscedastic":
            mean, sigma = f[..., 0], F.softplus(f[..., 1]) + 1e-3  # sigma(x) = softplus(g(x)) + 1e-3
        else:
            mean = f[..., 0]
        # y_i ~ N(f(x_i), sigma^2)
        return pyro.sample("y", dist.Normal(mean, sigma), obs=None if y is None else y[idx])


def bnn_classifier(X, y=None, num_classes=None, hidden=(50,), activation="relu", prior="normal", prior_scale=8.0,
                   batch_size=None, mixture=SCALE_MIXTURE):
    """BNN classification. ``X``: (n, d), ``y``: (n,) integer labels in [0, num_classes)."""
    hidden = hidden_widths(hidden)
    if num_classes is None:
        raise ValueError("bnn_classifier needs num_classes")
    layers = sample_layers(X.shape[-1], (*hidden, int(num_classes)), prior, prior_scale, X, mixture)
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        logits = per_example(forward(X[idx], layers, activation))
        # y_i ~ Categorical(softmax(f(x_i)))
        return pyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx].long())


#: In-between uncertainty (the sd of f growing in a gap of the inputs): the methods and settings whose
#: epistemic sd in the middle of a gap is at least twice that where the data lie, on ``sine`` and, wherever
#: the fit follows the curve, on two generated families of other gap problems (benchmarks/sine_gap.py
#: --family).  The tables, and the settings once recommended here for svi, svi-meanfield and mc-dropout
#: (2x on sine, not on the family), are in benchmarks/RESULTS.md and benchmarks/history/in_between.md.
IN_BETWEEN = {
    "ensemble": {"options": {}, "settings": {}},
}


def in_between_note() -> str:
    """The ``describe`` note on in-between uncertainty, with the command-line flags of :data:`IN_BETWEEN`."""
    def flags(method, entry):
        opts = [f"--option {k}={','.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in entry["options"].items()]
        sets = [f"--set {k}={v}" for k, v in entry["settings"].items()]
        return " ".join([f"--inference {method}"] + opts + sets)

    lines = ["In-between uncertainty (the sd of f growing in a gap of the inputs; measured on sine and on 24 generated "
             "gap problems with other curves, gap widths, noise levels and sizes: benchmarks/RESULTS.md). Shown by:"]
    lines += [f"  {method:<14} {flags(method, entry)}" for method, entry in IN_BETWEEN.items()]
    lines.append("  (at its defaults the epistemic sd in the gap is >= 4.1x that in the data on the 22 of 24 problems where "
                 "its mean follows the curve; the total predictive sd, noise included, reaches 2x only where the noise is "
                 "small against that growth: sine 5.0x, 6 of the 24)")
    lines.append("nuts and hmc at their defaults show it on sine (100 of the points; 4.95x, 4.59x); not checked on the family "
                 "(12-19 min a fit). svi, svi-meanfield, mc-dropout: no settings known. A one-layer ReLU net cannot "
                 "(Foong et al. 2020); the deeper settings that reach 2x on sine do not hold on the family (total sd 2x on "
                 "0 of 12, 0 of 4 and 3 of 12 problems; epistemic sd 2x on 1, 1 and 4).")
    return "\n".join(lines)


_COMMON = {
    "hidden": Option((50,), "hidden layer widths, e.g. 50 or 50,50", hidden_widths),
    "activation": Option("relu", f"one of {', '.join(ACTIVATIONS)}", str),
    "prior": Option("normal", f"one of {', '.join(PRIORS)}: normal (sd prior_scale / sqrt(fan_in)) or Blundell's "
                    "scale mixture", str),
    "mixture": Option(SCALE_MIXTURE, "the scale mixture's pi,sigma1,sigma2 (prior=scale-mixture; Blundell et al.'s "
                      "pi = 1/2, sigma1 = 1, sigma2 = exp(-6) by default)", mixture_parameters),
}
# The prior scale s: 2 for regression (wiggly enough for sine and the UCI files), 8 for classification (the
# logit scale: s = 1 leaves digits underconfident).  Measurements: benchmarks/RESULTS.md, "Prior scales".
register(ModelSpec(
    name="bnn-regressor",
    model=bnn_regressor,
    summary="Bayesian MLP regression, N(f(x), sigma^2) or heteroscedastic (inputs/targets standardised)",
    options={**_COMMON,
             "prior_scale": Option(2.0, "prior sd s of the normal prior (weights: s / sqrt(fan_in))",
                                   domain=Domain(float, 0, open_low=True, finite=True)),
             "likelihood": Option("homoscedastic", "homoscedastic or heteroscedastic", str),
             "noise": Option(None, f"fixed noise sd in standardised units; omit to infer it (optimisation starts it "
                             f"at {NOISE_INIT})", lambda t: None if t.lower() in ("", "none") else float(t),
                             domain=Domain(float, 0, open_low=True, finite=True))},
    default_data="sine",
    notes=in_between_note(),
    data=network_data(),
    inference=NETWORK_INFERENCE,
))
register(ModelSpec(
    name="bnn-classifier",
    model=bnn_classifier,
    summary="Bayesian MLP classification, Categorical(softmax(f(x))) (inputs standardised)",
    options={**_COMMON,
             "prior_scale": Option(8.0, "prior sd s of the normal prior (weights: s / sqrt(fan_in)); sets the logit "
                                   "scale", domain=Domain(float, 0, open_low=True, finite=True)),
             "num_classes": Option(None, "number of classes (default: from the training labels)", int,
                                   domain=Domain(int, 2))},
    default_data="digits",
    data=network_data(classifier=True),
    inference=NETWORK_INFERENCE,
))
