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
  :math:`\pi = 1/2, \sigma_1 = 1, \sigma_2 = e^{-6}`.

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

from pyro_bdl.layers import ACTIVATIONS, PRIORS, forward, hidden_widths, per_example, sample_layers
from pyro_bdl.networks import NOISE_INIT, network_spec
from pyro_bdl.registry import ModelSpec, Option, register

__all__ = ["bnn_regressor", "bnn_classifier", "IN_BETWEEN"]


def bnn_regressor(X, y=None, hidden=(50,), activation="relu", prior="normal", prior_scale=2.0,
                  likelihood="homoscedastic", noise=None, batch_size=None):
    """BNN regression. ``X``: (n, d), ``y``: (n,). Returns y (n,) (or the minibatch's)."""
    hidden = hidden_widths(hidden)
    if likelihood not in ("homoscedastic", "heteroscedastic"):
        raise ValueError(f"unknown likelihood '{likelihood}'; choose homoscedastic or heteroscedastic")
    outputs = 2 if likelihood == "heteroscedastic" else 1
    layers = sample_layers(X.shape[-1], (*hidden, outputs), prior, prior_scale, X)
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
                   batch_size=None):
    """BNN classification. ``X``: (n, d), ``y``: (n,) integer labels in [0, num_classes)."""
    hidden = hidden_widths(hidden)
    if num_classes is None:
        raise ValueError("bnn_classifier needs num_classes")
    layers = sample_layers(X.shape[-1], (*hidden, int(num_classes)), prior, prior_scale, X)
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        logits = per_example(forward(X[idx], layers, activation))
        # y_i ~ Categorical(softmax(f(x_i)))
        return pyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx].long())


#: In-between uncertainty: settings under which a method whose defaults cannot widen in a gap of the
#: inputs does (on ``sine``: the mean predictive sd in the middle of the gap at least twice that where
#: the data lie).  At one hidden layer a mean-field Gaussian or MC dropout posterior cannot: the
#: variance of f between two inputs is at most the sum of the variances at them (Foong et al. 2020,
#: Thm 1, ReLU; ``test_one_hidden_layer_mean_field_and_dropout_cannot_raise_the_gap_variance``).
#: Measured with benchmarks/sine_gap.py (seed 0), gap/data sd:
#:
#: * ``svi``, one layer of 50: ReLU 0.92 (5000 steps), 0.95 (20000); tanh 1.38 (5000), 1.29 (20000);
#:   two ReLU layers 1.12 (20000), GELU 1.16 (20000); two tanh layers 1.66 (5000), 2.26 (10000), 2.80
#:   (20000), with s = 1 1.76 (20000), with the scale-mixture prior 6.22 (10000); two tanh layers of 100
#:   1.31 (20000); three tanh layers of 50 2.38 (10000).  Every tanh net fits RMSE 0.072-0.086 (the
#:   scale-mixture prior widens the gap most, 4.67-7.35 over seeds 0-2, but its fit is the same step, so
#:   the recommendation keeps the default prior, closer to the 2x asked for);
#: * over seeds 0-4 (``--seeds 0 1 2 3 4``; the slow test checks seed 0): ``svi`` on two tanh layers of 50,
#:   10000 steps: 2.26-2.50 (RMSE to the curve 0.074-0.076); ``svi-meanfield`` (analytic KL; it gets
#:   there more slowly: 1.93-2.50 after 10000 steps) after 20000: 2.69-2.76 (RMSE 0.074-0.075);
#: * ``mc-dropout`` with its fitted noise sigma does not reach 2 reliably: sigma absorbs the dropout
#:   variance at the data (sigma^2 ~ noise^2 + in-data dropout variance: 0.12 against the true 0.05),
#:   which inflates the in-data sd the ratio divides by.  Deeper nets, a higher rate and less weight
#:   decay help (one layer 0.92; (100,100,100) p=0.3 with s = 8, 32, 128: 1.78, 1.96, 2.04); the best,
#:   four layers of 100, p = 0.3, s = 32, gives 1.88-2.15 over seeds 0-4.  With the model precision
#:   tau fixed instead, as Gal & Ghahramani treat it (a hyperparameter, which they choose on held-out
#:   data), through the ``noise`` option (standardised units; the true noise is 0.05 / sd(y) = 0.065):
#:   at 0.1, the round value recommended here, 2.31-3.14 over seeds 0-4 (RMSE 0.036-0.043); at 0.07,
#:   close to the truth, 2.64-3.54 (RMSE 0.033-0.039); 0.07 on (100,100,100) with s = 8 gives 2.10.
#:
#: The deeper tanh nets that ``svi`` needs follow the curve less closely than the default one-layer
#: ReLU net (RMSE 0.074 against 0.037 at 5000 steps): their mean is close to a smoothed step through
#: the two data intervals, with the noise over-estimated (0.15 against 0.05).  That is the ELBO's
#: optimum, not gradient noise: lower-variance gradients lower the loss but leave the fit (seed 0, two
#: tanh layers, 10000 steps; RMSE 0.074 in each): 8 particles (gap 2.81), the local reparameterisation
#: with 4 particles (2.94), lr 0.005 for 20000 steps (2.32); a prior scale of 8 gives 2.49 and 0.074.
#:
#: At the defaults, ``ensemble`` (4.98, all 200 points), ``nuts`` (4.95) and ``hmc`` (4.59, 1126 s: 300
#: draws after 400 warm-up, one chain, ``jit=True``, RMSE 0.012, no divergences) widen the gap; the
#: samplers on 100 of the points, as notebook 02 fits NUTS.
IN_BETWEEN = {
    "svi": {"options": {"hidden": (50, 50), "activation": "tanh"}, "settings": {"steps": 10000}},
    "svi-meanfield": {"options": {"hidden": (50, 50), "activation": "tanh"}, "settings": {"steps": 20000}},
    "mc-dropout": {"options": {"hidden": (100, 100, 100, 100), "prior_scale": 32.0, "noise": 0.1}, "settings": {"p": 0.3}},
}


def in_between_note() -> str:
    """The ``describe`` note on in-between uncertainty, with the command-line flags of :data:`IN_BETWEEN`."""
    def flags(entry):
        opts = [f"--option {k}={','.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in entry["options"].items()]
        sets = [f"--set {k}={v}" for k, v in entry["settings"].items()]
        return " ".join(opts + sets)

    lines = ["In-between uncertainty (sd growing in a gap of the inputs): at the defaults (one hidden ReLU layer) "
             "ensemble, nuts and hmc show it (measured on sine; nuts and hmc on 100 of the points); "
             "a mean-field (svi, svi-meanfield) or MC dropout posterior of a one-layer ReLU net cannot (Foong et al. "
             "2020). Settings that show it on sine (gap sd >= 2x the in-data sd):"]
    lines += [f"  {method:<14} {flags(entry)}" for method, entry in IN_BETWEEN.items()]
    lines.append("  (mc-dropout: the noise option fixes the model precision tau = 1/noise^2, in standardised units; 0.1 is "
                 "1.5x sine's true noise, 0.065 (2.31-3.14 over 5 seeds; 0.07 gives 2.64-3.54): on your data choose it on "
                 "held-out data)")
    return "\n".join(lines)


_COMMON = {
    "hidden": Option((50,), "hidden layer widths, e.g. 50 or 50,50", hidden_widths),
    "activation": Option("relu", f"one of {', '.join(ACTIVATIONS)}", str),
    "prior": Option("normal", f"one of {', '.join(PRIORS)}: normal (sd prior_scale / sqrt(fan_in)) or Blundell's "
                    "scale mixture", str),
}
# The prior scale s: 2 for regression (wiggly enough for sine and the UCI files), 8 for classification (the
# logit scale: s = 1 leaves digits underconfident).  Measurements: benchmarks/RESULTS.md, "Prior scales".
register(ModelSpec(
    name="bnn-regressor",
    model=bnn_regressor,
    summary="Bayesian MLP regression, N(f(x), sigma^2) or heteroscedastic (inputs/targets standardised)",
    options={**_COMMON,
             "prior_scale": Option(2.0, "prior sd s of the normal prior (weights: s / sqrt(fan_in))"),
             "likelihood": Option("homoscedastic", "homoscedastic or heteroscedastic", str),
             "noise": Option(None, f"fixed noise sd in standardised units; omit to infer it (optimisation starts it "
                             f"at {NOISE_INIT})", lambda t: None if t.lower() in ("", "none") else float(t))},
    default_data="sine",
    notes=in_between_note(),
    **network_spec(),
))
register(ModelSpec(
    name="bnn-classifier",
    model=bnn_classifier,
    summary="Bayesian MLP classification, Categorical(softmax(f(x))) (inputs standardised)",
    options={**_COMMON,
             "prior_scale": Option(8.0, "prior sd s of the normal prior (weights: s / sqrt(fan_in)); sets the logit "
                                   "scale"),
             "num_classes": Option(None, "number of classes (default: from the training labels)", int)},
    default_data="digits",
    **network_spec(classifier=True),
))
