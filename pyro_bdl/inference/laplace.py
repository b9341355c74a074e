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
as ``info.log_evidence`` (:func:`pyro_bdl.workflows.evidence.evidence` reads it),

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
value, the prior precision :math:`P_0 = \delta I`, and the draws predicting through the network linearised at the
MAP (``predictive=glm``, declared as the method's ``predictive_model``; ``nn``: the network itself).  The scalar
:math:`\delta` (``prior_precision=auto``) is, for a classifier, the one whose linearised predictive best predicts
rows held out of MAPs fitted to the rest (laplace-torch's gridsearch; the marginal likelihood's maximum leaves the
predictive far too wide, because saturated training probabilities give the GGN almost no curvature and most
directions keep the prior's variance; benchmarks/RESULTS.md, "laplace-ggn"): 5-fold cross-validation by default
(``folds=5`` parts of ``validation`` = a fifth of the rows, each held out of its own MAP, so every training row scores
the choice; one part alone, ``folds=1``, chose noisily on small sets: benchmarks/results/laplace_calibration.md); for
regression it is the maximum of the Laplace marginal likelihood (``marglik``); or ``model``: the model's own Normal
prior; or a number.

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
from typing import ClassVar

import pyro
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoLaplaceApproximation, init_to_median

from pyro_bdl.inference.base import Draws, latent_sites
from pyro_bdl.inference.ggn import (
    LinearisedNetwork,
    OnRows,
    data_rows,
    dense_layers,
    ggn,
    layer_sites,
    linearisations,
    log_marginal_likelihood,
    marglik_precision,
    model_prior,
)
from pyro_bdl.inference.method import Method, register_method
from pyro_bdl.inference.outputs import MethodInfo
from pyro_bdl.inference.svi import ADAM_SETTINGS, guide_draws, optimise, run_map

__all__ = ["LaplaceInfo", "GGNLaplaceInfo", "run_laplace", "run_laplace_ggn", "GaussianWeights", "linearised_predictive", "validation_precision",
           "LINEARISED_AT", "VALIDATION_GRID"]


@dataclass
class LaplaceInfo(MethodInfo):
    """What ``laplace`` returns beside its draws.

    Attributes
    ----------
    laplace_dimension : the number of unconstrained coordinates of the Gaussian.
    log_evidence : the Laplace estimate of ``log p(y)`` at the mode found (:func:`laplace_log_evidence`).
    """

    EVIDENCE: ClassVar[str] = ("the Laplace approximation at the mode found (unconstrained coordinates): exact for a "
                               "Gaussian posterior, to the optimiser's precision")
    laplace_dimension: int | None = None
    log_evidence: float = math.nan

    def evidence_estimate(self) -> float:
        return self.log_evidence


@dataclass
class GGNLaplaceInfo(MethodInfo):
    """What ``laplace-ggn`` returns beside its draws.

    Attributes
    ----------
    laplace_dimension : P, the number of weights of ``subset`` the Gaussian covers.
    laplace_prior_precision : the scalar prior precision used, or ``"model"`` (the model's own prior).
    laplace_prior_choice : how it was chosen: ``"marglik"``, ``"validation"``, ``"model"`` or ``"number"``.
    laplace_validation_rows, laplace_validation_folds, laplace_validation_nll : ``validation`` only: the rows held
        out over all folds, the folds, and the chosen precision's held-out negative log predictive density per row.
    laplace_log_marginal_likelihood : the GGN Laplace log marginal likelihood (the sum over the data, noise
        included), also :attr:`log_evidence`.
    laplace_effective_parameters : P - sum(precision * diag(covariance)), MacKay's effective number of parameters.
    """

    EVIDENCE: ClassVar[str] = ("the GGN Laplace marginal likelihood of the weights of `subset` (MacKay's evidence of "
                               "the network linearised at the MAP), the noise and any other layer held at their MAP "
                               "values, under the prior precision in the fit's info.laplace_prior_precision (marglik, "
                               "regression's default: the one that maximises it; a classifier's default: the one "
                               "chosen on held-out rows)")
    laplace_dimension: int | None = None
    laplace_prior_precision: float | str | None = None
    laplace_prior_choice: str | None = None
    laplace_validation_rows: int | None = None
    laplace_validation_folds: int | None = None
    laplace_validation_nll: float | None = None
    laplace_log_marginal_likelihood: float = math.nan
    log_evidence: float = math.nan
    laplace_effective_parameters: float = math.nan

    def evidence_estimate(self) -> float:
        return self.log_evidence


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
    info = LaplaceInfo(int(gaussian.loc.numel()), laplace_log_evidence(guide, gaussian, data))
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
PRIOR_CHOICES = ("auto", "validation", "marglik", "model")
#: The scalar prior precisions ``prior_precision=validation`` tries: 1e-4 to 1e4, four to a decade (laplace-torch's
#: gridsearch range).  At the top the linearised predictive is within a hair of the MAP's.
VALIDATION_GRID = tuple(10.0 ** (e / 4) for e in range(-16, 17))
#: Logit draws per held-out row that score a classifier's predictive, the same standard normal draws at every
#: precision of the grid (common random numbers: the choice does not jump with the Monte Carlo noise).
VALIDATION_DRAWS = 500


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
    """``prior_precision``: ``"auto"``, ``"validation"``, ``"marglik"``, ``"model"`` or a positive number (also as
    text)."""
    if value in PRIOR_CHOICES:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"setting 'prior_precision' of inference 'laplace-ggn' must be one of "
                         f"{', '.join(PRIOR_CHOICES)} or a finite number > 0, got {value!r}")
    return number


def run_laplace_ggn(model, data: dict, *, steps: int, lr: float, samples: int, subset: str, prior_precision,
                    predictive: str, progress: bool, validation: float = 0.2, folds: int = 5, checkpoint=None,
                    init_loc_fn=None, **adam) -> Draws:
    """The MAP by the zoo's ``map`` (``steps`` of Adam at ``lr``), then the GGN Laplace over the weights of
    ``subset`` (``all`` dense layers or the ``last-layer``), every other latent site (the noise sd, the other
    layers) held at its MAP value, the prior precision chosen by ``prior_precision`` (``validation``: the scalar
    whose linearised predictive best predicts ``folds`` disjoint parts of the rows, each a ``validation`` fraction
    held out of a MAP of the others, :func:`validation_precision`; ``marglik``: the scalar that maximises the Laplace
    marginal likelihood;
    ``model``: the model's own Normal prior; a number; ``auto``: ``validation`` for a Categorical likelihood,
    ``marglik`` for a Normal one), and ``samples`` draws of the weights.  With ``predictive="glm"`` the fit
    predicts through the network linearised at the MAP (:func:`linearised_predictive`; the point is kept in
    ``params``), with ``"nn"`` through the network itself.  ``info`` reports the prior precision and how it was
    chosen, the log marginal likelihood there (in the units the model works in; summed over the data, the noise's
    normalisation included; also as ``log_evidence``), the dimension and the effective number of parameters
    tr(G Sigma)."""
    _check_choice("subset", subset, SUBSETS)
    _check_choice("predictive", predictive, PREDICTIVES)
    prior_precision = _prior_setting(prior_precision)
    _check_held_out(validation, folds)  # before the MAP: a bad setting costs no fit
    layers = dense_layers(model, data)  # before the MAP too: a model with no network is refused at once
    mode = run_map(model, data, steps=steps, lr=lr, progress=progress, checkpoint=checkpoint,
                   init_loc_fn=init_loc_fn, **adam)
    point = {name: value[0, 0] for name, value in mode.samples.items()}
    sites = layer_sites(layers if subset == "all" else layers[-1:])
    missing = [s for s in sites if s not in point]
    if missing:
        raise ValueError(f"the dense layers' weights must be latent sample sites; not found: {', '.join(missing)}")
    curvature = ggn(model, data, point, sites)
    theta = torch.cat([point[s].reshape(-1) for s in sites]).double()
    P = len(theta)
    choice = prior_precision
    if choice == "auto":
        # a classifier's marginal-likelihood scalar leaves the predictive far too wide; held-out rows calibrate it
        # (benchmarks/results/laplace_calibration.md).  Regression keeps marglik (the sine-gap results rest on it).
        choice = "validation" if curvature.likelihood == "categorical" else "marglik"
    map_settings = dict(steps=steps, lr=lr, progress=progress, init_loc_fn=init_loc_fn, **adam)
    prior_mean, precision, chosen = _prior(choice, model, data, point, sites, curvature, theta, (validation, folds),
                                           map_settings)
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
    info = GGNLaplaceInfo(laplace_dimension=P,
                          laplace_prior_precision=float(precision[0]) if choice != "model" else "model",
                          laplace_prior_choice=choice if isinstance(choice, str) else "number", **chosen,
                          laplace_log_marginal_likelihood=log_z, log_evidence=log_z,
                          laplace_effective_parameters=float(P - (precision * covariance.diagonal()).sum()))
    params = {LINEARISED_AT + s: point[s] for s in layer_sites(layers)} if predictive == "glm" else {}
    return Draws(draws, losses=mode.losses, guide=posterior, info=info, params=params)


def _prior(choice, model, data, point, sites, curvature, theta, held_out, map_settings):
    """The weights' Gaussian prior by the ``choice`` made (mean, precision: each (P,) float64) and info on it."""
    if choice == "model":
        return (*model_prior(model, data, point, sites), {})
    chosen = {}
    if choice == "marglik":
        delta = marglik_precision(torch.linalg.eigvalsh(curvature.matrix), float(theta @ theta))
    elif choice == "validation":
        fraction, folds = held_out
        delta, chosen = validation_precision(model, data, sites, fraction=fraction, folds=folds, **map_settings)
    else:
        delta = choice
    return torch.zeros_like(theta), torch.full_like(theta, delta), chosen


def validation_precision(model, data: dict, sites: list[str], *, fraction: float, folds: int = 1,
                         grid=VALIDATION_GRID, **map_settings) -> tuple[float, dict]:
    """The scalar prior precision in ``grid`` whose linearised predictive best predicts held-out rows, and info on it.

    ``folds`` disjoint parts of the model's data plate, each ``fraction`` of its rows, are held out in turn (drawn
    from Pyro's random stream; of each class alike for integer labels; ``folds=5`` at ``fraction=0.2`` is 5-fold
    cross-validation, every row held out once; fewer parts on too few rows: :func:`_held_out`).  For each part the MAP is fitted to the other rows
    (:func:`~pyro_bdl.inference.svi.run_map` with ``map_settings``; its parameters kept apart from the param
    store's), the GGN of ``sites`` taken there, and each precision :math:`\\delta` scored by the negative log
    predictive density of the held-out rows under the network linearised at that MAP:
    :math:`\\mathcal N(f, A + \\sigma^2 I)` for a Normal likelihood; for a Categorical the softmax of
    :data:`VALIDATION_DRAWS` logit draws from :math:`\\mathcal N(f, A)`, averaged,
    :math:`A = J (G + \\delta I)^{-1} J^\\top` (k, k) per row, from one eigendecomposition of G.  The precision
    with the least total over the parts wins; the caller then uses it with the MAP and GGN of all the rows.
    """
    _check_held_out(fraction, folds)
    plate, observed = data_rows(model, data)
    if plate is None:
        raise ValueError("prior_precision=validation holds rows out through the model's data plate, and this model "
                         "does not index its rows by a subsampled plate: give prior_precision=marglik or a number")
    nll, rows = torch.zeros(len(grid), dtype=torch.float64, device=observed.device), 0
    parts = _held_out(observed, float(fraction), folds)
    for kept, held in parts:
        nll += _held_out_scores(model, data, sites, plate, observed.shape[0], kept, held, grid, map_settings)
        rows += len(held)
    best = int(torch.argmin(nll))
    return grid[best], {"laplace_validation_rows": rows, "laplace_validation_folds": len(parts),
                        "laplace_validation_nll": float(nll[best]) / rows}


def _check_held_out(fraction: float, folds: int) -> None:
    """The ``validation`` fraction and the number of ``folds``: a clear error unless 0 < fraction < 1 and ``folds``
    disjoint parts of that fraction fit in the rows."""
    if not 0.0 < float(fraction) < 1.0:
        raise ValueError(f"setting 'validation' of inference 'laplace-ggn' must lie strictly between 0 and 1, got "
                         f"{fraction!r}")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 1 or folds * float(fraction) > 1 + 1e-9:
        raise ValueError(f"setting 'folds' of inference 'laplace-ggn' must be an integer >= 1 with folds x validation "
                         f"<= 1 (disjoint held-out parts), got folds={folds!r} at validation={fraction!r}")


def _held_out_scores(model, data, sites, plate, n, kept, held, grid, map_settings) -> torch.Tensor:
    """The summed negative log predictive density of the ``held`` rows at each precision of ``grid`` (len(grid),),
    float64, under the network linearised at the MAP of the ``kept`` rows."""
    with pyro.get_param_store().scope():
        mode = run_map(OnRows(plate, kept, n)(model), data, **map_settings)
    point = {name: value[0, 0] for name, value in mode.samples.items()}
    lam, V = torch.linalg.eigh(ggn(model, data, point, sites, rows=kept).matrix)
    deltas = torch.tensor(grid, dtype=torch.float64, device=V.device)
    inverse = 1 / (lam.clamp(min=0)[None, :] + deltas[:, None])  # (grid, P): the eigenvalues of (G + delta I)^-1
    nll = torch.zeros(len(grid), dtype=torch.float64, device=V.device)
    for chunk in linearisations(model, data, point, sites, rows=held):
        JV = chunk.jacobian.double() @ V  # (c, k, P)
        z = torch.randn((VALIDATION_DRAWS, *chunk.outputs.shape), dtype=torch.float64, device=V.device)
        for g in range(len(grid)):
            nll[g] += _held_out_nll(chunk, (JV * inverse[g]) @ JV.transpose(1, 2), z)
    return nll


def _held_out(observed: torch.Tensor, fraction: float, folds: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Up to ``folds`` pairs (kept, held) of row indices: disjoint held-out parts, each ``fraction`` of the rows drawn
    at random, of each class alike when ``observed`` (n, ...) holds integer labels (part j: the rows of each class
    from j x fraction to (j + 1) x fraction of its count, in a random order).  Where that leaves a part empty, the
    parts are cut from all rows alike, and on too few rows for ``folds`` parts the empty ones are dropped (at least
    one part of one row); at least one row is kept in each pair."""
    n = observed.shape[0]
    if n < 2:
        raise ValueError(f"prior_precision=validation needs at least 2 rows (one to fit, one to score), got {n}")
    every = torch.arange(n, device=observed.device)
    groups = [] if observed.is_floating_point() else [every[observed == c] for c in observed.unique()]
    orders = [rows[torch.randperm(len(rows), device=rows.device)] for rows in groups]
    cut = lambda j, size: int(j * fraction * size + 1e-9)  # part j of a class: its rows cut(j) to cut(j + 1)
    helds = [torch.cat([o[cut(j, len(o)):cut(j + 1, len(o))] for o in orders]) if orders else every[:0]
             for j in range(folds)]
    if any(len(held) in (0, n) for held in helds):  # classes too small to hold out of each: draw from all rows
        order = torch.randperm(n, device=every.device)
        helds = [held for held in (order[cut(j, n):cut(j + 1, n)] for j in range(folds)) if len(held)] or [order[:1]]
    pairs = []
    for held in helds:
        keep = torch.ones(n, dtype=torch.bool, device=observed.device)
        keep[held] = False
        pairs.append((every[keep], held.sort().values))
    return pairs


def _held_out_nll(chunk, A: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The summed negative log predictive density of the chunk's rows (a :class:`~pyro_bdl.inference.ggn.Linearisation`)
    with the linearised output's covariance ``A`` (c, k, k); ``z`` (draws, c, k) standard normal draws."""
    f = chunk.outputs.double()
    if chunk.likelihood == "normal":
        cov = A + torch.diag_embed(chunk.weights.double()[:, None].expand_as(f))
        return -torch.distributions.MultivariateNormal(f, cov).log_prob(chunk.observed.double()).sum()
    e, Q = torch.linalg.eigh(A)
    root = Q * e.clamp(min=0).sqrt()[:, None, :]  # A = root root^T
    logits = f + torch.einsum("ckj,scj->sck", root, z)
    labels = chunk.observed.long()[None, :, None].expand(len(z), -1, 1)
    log_p = torch.log_softmax(logits, -1).gather(-1, labels)[..., 0]  # (draws, c)
    return -(torch.logsumexp(log_p, 0) - math.log(len(z))).sum()


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
        outputs=LaplaceInfo))
    register_method(Method(
        "laplace-ggn", "svi", "networks: the MAP, then the GGN Laplace (full or last-layer; prior precision chosen by "
        "5-fold cross-validation for a classifier, by the marginal likelihood for regression) with the linearised "
        "predictive (Immer et al. 2021)", run_laplace_ggn,
        # folds 5: ECE within noise on the whole classification family (RESULTS.md, "laplace-ggn")
        {"steps": 2000, "lr": 0.01, "samples": 200, "subset": "all", "prior_precision": "auto", "validation": 0.2,
         "folds": 5, "predictive": "glm", **ADAM_SETTINGS},
        requires=frozenset({"continuous", "network"}), takes_init=True, predictive_model=linearised_predictive,
        # quick: one held-out part, not five (each part costs a P x P eigendecomposition: RESULTS.md, "The test suite")
        quick={"steps": 100, "samples": 20, "folds": 1}, outputs=GGNLaplaceInfo))


_register()
