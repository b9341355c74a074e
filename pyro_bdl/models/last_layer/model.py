r"""Last-layer Bayesian regression: a fixed feature map, Bayesian weights on top.

.. math::

    \phi(x) \in \mathbb R^h, \quad w \sim \mathcal N(0, s^2 I_h), \quad b \sim \mathcal N(0, s^2), \quad
    y_i \mid x_i \sim \mathcal N(\phi(x_i)^\top w + b, \sigma^2), \quad \sigma \text{ known (option noise)}.

The feature map :math:`\phi` is a deterministic MLP whose weights are fixed parameters, not sample sites
(:mod:`pyro_bdl.nn.feature_maps`; a fit saves them in its ``params.pt``): random (seeded by ``feature_seed``, widths ``hidden``, default 50 tanh units)
or given by ``feature_weights``, e.g. the hidden layers of a MAP ``bnn-regressor``
(``pyro-bdl fit bnn-regressor --inference map --out net``, then ``--option feature_weights=net``).  Inputs
and targets are standardised on the training data (``noise`` is in standardised units).

With :math:`\phi` fixed the model is :mod:`blr <pyro_bdl.models.blr>` on :math:`\Phi = [\phi(X), 1]`, and the
posterior of :math:`\theta = (w, b)` is Gaussian in closed form (:func:`exact_posterior`, on the standardised
data ``result.standardized_data``):

.. math::

    \Sigma_N = \left(\Phi^\top \Phi / \sigma^2 + I / s^2\right)^{-1}, \qquad
    \mu_N = \Sigma_N \Phi^\top y / \sigma^2 ,

and the MAP estimate is :math:`\mu_N`.  Random tanh features of a 1-D input are nearly collinear, so the
posterior can be badly conditioned: NUTS and HMC use a dense mass matrix here (``full_mass``), and ``svi``'s
guide is :func:`principal_axes_guide`, a Gaussian in the eigenbasis of :math:`\Phi^\top\Phi`, where the exact
posterior is a product of independent Gaussians (measurements: ``benchmarks/RESULTS.md``, "Last layer").

Example
-------
>>> import torch, pyro
>>> X = torch.linspace(-2, 2, 30).unsqueeze(1); y = torch.sin(2 * X[:, 0])
>>> pyro.clear_param_store()
>>> tr = pyro.poutine.trace(last_layer).get_trace(X, y, hidden=(8,))
>>> [n for n in tr.stochastic_nodes if n != "data"], tr.observation_nodes
(['w', 'b'], ['y'])
>>> post = exact_posterior(X, y, hidden=(8,), noise=0.1)
>>> post["w"][0].shape, post["b"][1].shape
(torch.Size([8]), torch.Size([]))
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch

from pyro_bdl.data.table import check_has_features
from pyro_bdl.inference import Domain
from pyro_bdl.inference.guides import PrincipalAxesGuide
from pyro_bdl.models.blr import posterior_moments as _blr_posterior_moments
from pyro_bdl.models.last_layer.feature_training import FEATURE_MAP_OPTIONS
from pyro_bdl.nn.feature_maps import feature_map, features, split_feature_options
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, Task, register

__all__ = ["last_layer", "exact_posterior", "posterior_moments", "principal_axes_guide"]


def last_layer(X: torch.Tensor, y: torch.Tensor | None = None, hidden=None, activation: str | None = None,
               feature_seed: int = 0, feature_scale: float = 2.0, feature_weights: dict | None = None,
               prior_scale: float = 1.0, noise: float = 0.1):
    """Bayesian last layer on fixed features. ``X``: (n, d); ``y``: (n,) or None. Returns y (n,)."""
    if not noise > 0 or not prior_scale > 0:
        raise ValueError(f"noise and prior_scale must be positive, got noise={noise}, prior_scale={prior_scale}")
    # phi(X): the fixed feature map, (n, h); its weights are parameters (phi.*), saved with a fit
    feats = feature_map(X, hidden, activation, feature_seed, feature_scale, feature_weights)
    h = feats.shape[-1]
    # w ~ N(0, s^2 I_h),  b ~ N(0, s^2)
    w = pyro.sample("w", dist.Normal(X.new_zeros(()), prior_scale).expand([h]).to_event(1))
    b = pyro.sample("b", dist.Normal(X.new_zeros(()), prior_scale))
    # y_i ~ N(phi(x_i)^T w + b, sigma^2), independently over the data
    with pyro.plate("data", X.shape[0]):
        # (feats @ w[..., None])[..., 0]: w may carry a batch of particles in front, w: (..., h) -> (..., n)
        return pyro.sample("y", dist.Normal((feats @ w.unsqueeze(-1)).squeeze(-1) + b, noise), obs=y)


def _split(options: dict) -> tuple[dict, float, float]:
    """Model options -> (feature options, prior_scale, noise), rejecting unknown names."""
    feats, rest = split_feature_options(options)
    return feats, float(rest.get("prior_scale", 1.0)), float(rest.get("noise", 0.1))


def posterior_moments(X: torch.Tensor, y: torch.Tensor, **options):
    """Mean (h+1,) and covariance (h+1, h+1), float64, of the exact posterior of theta = (w, b): blr's on phi(X)."""
    feat_options, prior_scale, noise = _split(options)
    if not noise > 0 or not prior_scale > 0:
        raise ValueError(f"noise and prior_scale must be positive, got noise={noise}, prior_scale={prior_scale}")
    return _blr_posterior_moments(features(X.double(), **feat_options), y, prior_scale, noise)


def exact_posterior(X: torch.Tensor, y: torch.Tensor, **options) -> dict:
    """``{"w": (mean (h,), sd (h,)), "b": (mean, sd)}`` of the exact posterior (float64)."""
    mean, cov = posterior_moments(X, y, **options)
    sd = cov.diagonal().sqrt()
    return {"w": (mean[:-1], sd[:-1]), "b": (mean[-1], sd[-1])}


def principal_axes_guide(model) -> PrincipalAxesGuide:
    """The model's guide ``axes`` for svi: a Gaussian in the principal axes of the features, where the exact
    posterior is independent across coordinates (:class:`~pyro_bdl.inference.guides.PrincipalAxesGuide`)."""
    options = getattr(model, "keywords", None)
    if options is None:
        raise TypeError("the axes guide needs the bound last-layer model (get_model('last-layer').bind(options))")
    feature_options, prior_scale, _ = _split(options)
    return PrincipalAxesGuide(lambda X: features(X, **feature_options), prior_scale)


SPEC = register(
    ModelSpec(
        name="last-layer",
        model=last_layer,
        summary="Bayesian last layer y ~ N(phi(x)^T w + b, sigma^2) on a fixed (random or trained) feature map",
        options={
            **FEATURE_MAP_OPTIONS,
            "prior_scale": Option(1.0, "prior sd s of w and b", domain=Domain(float, 0, open_low=True, finite=True)),
            "noise": Option(0.1, "known noise sd sigma, in standardised units",
                            domain=Domain(float, 0, open_low=True, finite=True)),
        },
        notes="Guides: svi's default (--guide axes) is a Gaussian in the principal axes of the features, where "
               "the exact posterior is independent across coordinates; a full-rank guide in w's coordinates "
               "(--guide mvn) converges far more slowly on collinear features, and svi-meanfield converges to "
               "the mean-field optimum (exact means, sds 1/sqrt(Lambda_jj), narrower than the posterior's). "
               "Measurements: benchmarks/RESULTS.md, 'Last layer'.",
        default_data="sine",
        data=DataContract(
            check=check_has_features,
            task=Task.REGRESSION,
            standardize=True,
        ),
        inference=InferenceChoices(
            traits=frozenset({"continuous", "low-dimensional"}),
            # collinear features make the posterior badly conditioned: a dense mass matrix, and svi in the principal
            # axes of the features for 5000 steps (benchmarks/RESULTS.md, "Last layer")
            method_defaults={"nuts": {"full_mass": True}, "hmc": {"full_mass": True}, "svi": {"steps": 5000}},
            guides={"axes": principal_axes_guide},
            default_guides={"svi": "axes"},
        ),
        hooks=PostFit(
            exact_posterior=exact_posterior,
        ),
    )
)
