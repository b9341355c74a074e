r"""The Laplace approximation: the posterior mode, and a Gaussian with the curvature there.

In the unconstrained coordinates :math:`u` of the latent variables (Pyro's transforms: log for a positive
site, logit for a probability),

.. math::

    \hat u = \arg\max_u \; \log p(y, u), \qquad
    q(u) = \mathcal N\big(\hat u, H^{-1}\big), \quad H = -\nabla_u^2 \log p(y, u)\big|_{u = \hat u},

where :math:`\log p(y, u)` includes the log Jacobian of the transform.  For a Gaussian posterior (``blr``
with known noise) :math:`q` is exact; for the coin it is a Gaussian in :math:`\operatorname{logit}\pi`,
whose mode is :math:`\log(a / b)` and precision :math:`ab / (a + b)` for the posterior
:math:`\mathrm{Beta}(a, b)`.  The same Gaussian integral gives the Laplace estimate of the log evidence, recorded
as ``info["log_evidence"]`` (:func:`pyro_bdl.workflows.evidence.evidence` reads it),

.. math::

    \log p(y) \approx \log p(y, \hat u) + \tfrac d2 \log 2\pi - \tfrac12 \log\det H ,

exact for a Gaussian posterior at its mode (at a point :math:`u` off the mode by :math:`\delta` it is low by
:math:`\delta^\top H \delta / 2`: only as good as the optimiser).  Pyro's
:class:`~pyro.infer.autoguide.AutoLaplaceApproximation` does both steps (the mode by the zoo's optimiser loop, the
Hessian by autograd); the draws come from its Gaussian.  The Hessian is dense, (d, d): the method suits
low-dimensional models.

Networks (``laplace-ggn``, a separate method: another curvature, other settings, another predictive) take the
generalised Gauss-Newton matrix over their dense layers' weights instead (:mod:`pyro_bdl.inference.ggn`), as
laplace-torch does (Immer et al. 2021): the zoo's MAP (``map``), then :math:`\mathcal N(\theta_*, (G + P_0)^{-1})`
over ``subset`` = ``all`` weights or the ``last-layer``'s, every other latent site (the noise sd) held at its MAP
value, the prior precision :math:`P_0 = \delta I` with :math:`\delta` maximising the Laplace marginal likelihood
(``prior_precision=marglik``; or ``model``: the model's own Normal prior; or a number), and the draws predicting
through the network linearised at the MAP (``predictive=glm``, declared as the method's
``predictive_model``; ``nn``: the network itself).

Example
-------
>>> import math, pyro_bdl
>>> fit = pyro_bdl.fit("coin", inference="laplace", progress=False)
>>> a, b = 1 + fit.report["heads"], 1 + fit.report["tosses"] - fit.report["heads"]   # Beta(a, b) posterior
>>> fit.samples["pi"].shape, abs(float(fit.guide.loc) - math.log(a / b)) < 0.01   # the mode of logit(pi)
(torch.Size([1, 1000]), True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoLaplaceApproximation, init_to_median

from pyro_bdl.inference.base import Draws, latent_sites
from pyro_bdl.inference.ggn import (
    LinearisedNetwork,
    dense_layers,
    ggn,
    layer_sites,
    log_marginal_likelihood,
    marglik_precision,
    model_prior,
)
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.svi import ADAM_SETTINGS, guide_draws, optimise, run_map

__all__ = ["run_laplace", "run_laplace_ggn", "GaussianWeights", "linearised_predictive", "LINEARISED_AT"]


def run_laplace(model, data: dict, *, steps: int, lr: float, samples: int, progress: bool, checkpoint=None,
                init_loc_fn=None, **adam) -> Draws:
    """The mode by ``steps`` of the zoo's optimiser (Adam, ``lr``), then ``samples`` draws from the Gaussian
    with the inverse Hessian; ``guide`` of the result is that Gaussian (an ``AutoMultivariateNormal``)."""
    guide = AutoLaplaceApproximation(model, init_loc_fn=init_loc_fn or init_to_median)
    losses = optimise(model, guide, Trace_ELBO(), data, steps=steps, lr=lr, progress=progress, desc="laplace",
                      checkpoint=checkpoint, **adam)
    try:
        gaussian = guide.laplace_approximation(**data)
    except torch.linalg.LinAlgError:
        raise ValueError("laplace: the Hessian of -log p(y, theta) at the optimum is not positive definite "
                         "(the optimisation has not reached a mode, or the posterior has none): run more steps "
                         "(--steps) or use another method") from None
    draws = guide_draws(gaussian, data, latent_sites(model, data), samples)
    info = {"laplace_dimension": int(gaussian.loc.numel()), "log_evidence": laplace_log_evidence(guide, gaussian, data)}
    return Draws(draws, losses=losses, guide=gaussian, info=info)


def laplace_log_evidence(guide: AutoLaplaceApproximation, gaussian, data: dict) -> float:
    """The Laplace estimate of ``log p(y)``: ``log p(y, u*) + d/2 log(2 pi) - 1/2 log det H`` at the point
    ``u*`` (d,) the ``guide`` holds (its mode), ``H`` the Hessian there, read from ``gaussian`` (its
    :meth:`~pyro.infer.autoguide.AutoLaplaceApproximation.laplace_approximation`, covariance
    ``diag(scale) L L^T diag(scale)`` = ``H^-1``).  ``log p(y, u)`` is the model's log density less the guide's
    (Pyro's log Jacobian of each site's transform, as the Hessian was taken)."""
    with torch.no_grad():
        guide_trace = poutine.trace(guide).get_trace(**data)
        model_trace = poutine.trace(poutine.replay(guide.model, trace=guide_trace)).get_trace(**data)
        log_joint = model_trace.log_prob_sum().double() - guide_trace.log_prob_sum().double()
        half_log_det_covariance = (gaussian.scale.double().log().sum()
                                   + gaussian.scale_tril.double().diagonal().log().sum())
    d = gaussian.loc.numel()
    return float(log_joint + 0.5 * d * math.log(2 * math.pi) + half_log_det_covariance)


#: Where a fit with the linearised predictive keeps the linearisation point among the parameters saved with it
#: (``params.pt``): ``LINEARISED_AT + site`` for every dense layer's weight and bias.
LINEARISED_AT = "laplace-ggn.linearised_at."
#: The choices of the network path's text settings.
SUBSETS, PREDICTIVES = ("all", "last-layer"), ("glm", "nn")


@dataclass
class GaussianWeights:
    """The GGN Laplace posterior of a network's weights: ``N(mean, covariance)`` over ``sites`` (each flattened,
    in order: ``mean`` (P,), ``covariance`` (P, P), float64), from the posterior precision's Cholesky factor."""

    sites: list
    shapes: list
    mean: torch.Tensor
    precision_cholesky: torch.Tensor

    @property
    def covariance(self) -> torch.Tensor:
        return torch.cholesky_inverse(self.precision_cholesky)

    def sample(self, num: int) -> dict:
        """``num`` draws: site -> (num, *shape), float32."""
        z = torch.randn(len(self.mean), num, dtype=torch.float64, device=self.mean.device)
        flat = self.mean[:, None] + torch.linalg.solve_triangular(self.precision_cholesky.T, z, upper=True)
        draws, start = {}, 0
        for site, shape in zip(self.sites, self.shapes):
            size = math.prod(shape)
            draws[site] = flat[start:start + size].T.reshape((num, *shape)).float()
            start += size
        return draws


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"setting '{name}' of inference 'laplace-ggn' must be one of {', '.join(choices)}, got {value!r}")


def _prior_setting(value):
    """``prior_precision``: ``"marglik"``, ``"model"`` or a positive number (also as text)."""
    if value in ("marglik", "model"):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"setting 'prior_precision' of inference 'laplace-ggn' must be marglik, model or a finite "
                         f"number > 0, got {value!r}")
    return number


def run_laplace_ggn(model, data: dict, *, steps: int, lr: float, samples: int, subset: str, prior_precision,
                    predictive: str, progress: bool, checkpoint=None, init_loc_fn=None, **adam) -> Draws:
    """The MAP by the zoo's ``map`` (``steps`` of Adam at ``lr``), then the GGN Laplace over the weights of
    ``subset`` (``all`` dense layers or the ``last-layer``), every other latent site (the noise sd, the other
    layers) held at its MAP value, the prior precision chosen by ``prior_precision`` (``marglik``: the scalar
    that maximises the Laplace marginal likelihood; ``model``: the model's own Normal prior; or a number), and
    ``samples`` draws of the weights.  With ``predictive="glm"`` the fit predicts through the network linearised
    at the MAP (:func:`linearised_predictive`; the point is kept in ``params``), with ``"nn"`` through the
    network itself.  ``info`` reports the prior precision, the log marginal likelihood (in the units the model
    works in; summed over the data, the noise's normalisation included; also as ``log_evidence``), the dimension
    and the effective number of parameters tr(G Sigma)."""
    _check_choice("subset", subset, SUBSETS)
    _check_choice("predictive", predictive, PREDICTIVES)
    prior_precision = _prior_setting(prior_precision)
    mode = run_map(model, data, steps=steps, lr=lr, progress=progress, checkpoint=checkpoint,
                   init_loc_fn=init_loc_fn, **adam)
    point = {name: value[0, 0] for name, value in mode.samples.items()}
    layers = dense_layers(model, data)
    sites = layer_sites(layers if subset == "all" else layers[-1:])
    missing = [s for s in sites if s not in point]
    if missing:
        raise ValueError(f"the dense layers' weights must be latent sample sites; not found: {', '.join(missing)}")
    curvature = ggn(model, data, point, sites)
    theta = torch.cat([point[s].reshape(-1) for s in sites]).double()
    P = len(theta)
    if prior_precision == "model":
        prior_mean, precision = model_prior(model, data, point, sites)
    else:
        prior_mean = torch.zeros(P, dtype=torch.float64, device=theta.device)
        delta = (marglik_precision(torch.linalg.eigvalsh(curvature.matrix), float(theta @ theta))
                 if prior_precision == "marglik" else prior_precision)
        precision = torch.full((P,), delta, dtype=torch.float64, device=theta.device)
    try:
        cholesky = torch.linalg.cholesky(curvature.matrix + torch.diag(precision))
    except torch.linalg.LinAlgError:
        raise ValueError("laplace-ggn: the posterior precision (GGN + prior) is not positive definite") from None
    posterior = GaussianWeights(sites, [point[s].shape for s in sites], theta, cholesky)
    weights = posterior.sample(samples)
    draws = {name: (weights[name] if name in weights else value.expand((samples, *value.shape)).clone()).unsqueeze(0)
             for name, value in point.items()}
    covariance = posterior.covariance
    log_z = log_marginal_likelihood(curvature, theta, prior_mean, precision)  # the sum over the data, noise included
    info = {"laplace_dimension": P,
            "laplace_prior_precision": float(precision[0]) if prior_precision != "model" else "model",
            "laplace_log_marginal_likelihood": log_z, "log_evidence": log_z,
            "laplace_effective_parameters": float(P - (precision * covariance.diagonal()).sum())}
    params = {LINEARISED_AT + s: point[s] for s in layer_sites(layers)} if predictive == "glm" else {}
    return Draws(draws, losses=mode.losses, guide=posterior, info=info, params=params)


def linearised_predictive(model, params: dict):
    """The model a ``laplace-ggn`` fit predicts with: ``model`` with its dense layers linearised at the point kept
    in ``params`` (:class:`~pyro_bdl.inference.ggn.LinearisedNetwork`), or ``model`` itself if none is kept
    (``predictive="nn"``)."""
    point = {name[len(LINEARISED_AT):]: value for name, value in params.items() if name.startswith(LINEARISED_AT)}
    return LinearisedNetwork(point)(model) if point else model


def _register() -> None:
    register_method(Method(
        "laplace", "svi", "Laplace approximation: the mode, then a Gaussian with the inverse Hessian "
        "(unconstrained coordinates; AutoLaplaceApproximation)", run_laplace,
        {"steps": 2000, "lr": 0.02, "samples": 1000, **ADAM_SETTINGS},
        requires=frozenset({"continuous", "low-dimensional"}), takes_init=True, quick={"steps": 500, "samples": 50},
        evidence="the Laplace approximation at the mode found (unconstrained coordinates): exact for a Gaussian "
                 "posterior, to the optimiser's precision"))
    register_method(Method(
        "laplace-ggn", "svi", "networks: the MAP, then the GGN Laplace (full or last-layer, prior precision by the "
        "marginal likelihood) with the linearised predictive (Immer et al. 2021)", run_laplace_ggn,
        {"steps": 2000, "lr": 0.01, "samples": 200, "subset": "all", "prior_precision": "marglik", "predictive": "glm",
         **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, predictive_model=linearised_predictive,
        quick={"steps": 100, "samples": 20},
        evidence="the GGN Laplace marginal likelihood of the weights of `subset` (MacKay's evidence of the network "
                 "linearised at the MAP), the noise and any other layer held at their MAP values, under the prior "
                 "precision in info['laplace_prior_precision'] (marglik: the one that maximises it)"))


_register()
