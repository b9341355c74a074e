"""Each method family's check of its own fit: a method's :attr:`~pyro_bdl.inference.method.Method.diagnose` hook
judges the fit and returns a typed report; ``fit`` calls it without asking what kind of method it is.

* :class:`JudgeLosses` (optimisers: svi, map, the ensembles, Laplace, dropout): has the loss settled, is the answer
  still moving (the drift record, :mod:`pyro_bdl.inference.drift`), and for a point fit, does the density have a
  mode (:mod:`pyro_bdl.inference.mode_check`): a :class:`LossReport`;
* :class:`JudgeChains` (samplers): split-R-hat, bulk and tail ESS, divergences: a :class:`ChainReport`;
* :class:`JudgeWeights` (importance sampling): the weights' ESS: a :class:`WeightsReport`.

Thresholds follow Vehtari et al. (2021): split-R-hat below 1.01, bulk and tail ESS of at least 100 per chain, and
no divergent transitions.  Each check warns (:class:`~pyro_bdl.inference.base.ConvergenceWarning`) naming what is
wrong and what to do.

Example
-------
>>> import numpy as np
>>> svi_report(np.linspace(10, 1, 200).tolist() + [1.0] * 800).settled
True
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np
import pandas as pd
import torch

from pyro_bdl.inference.base import ConvergenceWarning
from pyro_bdl.inference.drift import DRIFT_MIN, DRIFT_VISIBLE, DriftRecord, still_moving
from pyro_bdl.inference.mode_check import running_to_an_edge
from pyro_bdl.inference.outputs import Record

__all__ = ["LossReport", "ChainReport", "WeightsReport", "JudgeLosses", "JudgeChains", "JudgeWeights", "mcmc_report",
           "svi_report", "importance_report", "RHAT_MAX", "ESS_PER_CHAIN_MIN", "MOVING_ADVICE", "NO_MODE_ADVICE"]


@dataclass
class LossReport(Record):
    """The check of an optimiser's run (:func:`svi_report`).

    Attributes
    ----------
    final_elbo : the mean of -loss over the last tenth of the run (NaN for a loss that ended non-finite).
    settled : whether the loss has settled (the last two tenths agree within three standard errors, or 0.1 %).
    steps_run : the steps the run made.
    moving : whether the answer was still moving (the drift record); None where that was not measured.
    no_mode : a point fit's sites running to an edge of their support (no mode to stop at); None where not checked.
    """

    HEADLINE: ClassVar[tuple[str, ...]] = ("final_elbo",)
    final_elbo: float = math.nan
    settled: bool = False
    steps_run: int = 0
    moving: bool | None = None
    no_mode: list | None = None


@dataclass
class ChainReport(Record):
    """The check of a sampler's chains (:func:`mcmc_report`).

    Attributes
    ----------
    max_r_hat : the largest split-R-hat over the scalars (NaN for one chain).
    min_ess_bulk, min_ess_tail : the smallest bulk and tail effective sample sizes.
    divergences : the number of divergent transitions.
    """

    HEADLINE: ClassVar[tuple[str, ...]] = ("max_r_hat", "min_ess_bulk", "divergences")
    max_r_hat: float = math.nan
    min_ess_bulk: float = math.nan
    min_ess_tail: float = math.nan
    divergences: int = 0


@dataclass
class WeightsReport(Record):
    """The check of importance weights (:func:`importance_report`): ``importance_ess``, their effective sample size."""

    HEADLINE: ClassVar[tuple[str, ...]] = ("importance_ess",)
    importance_ess: float = math.nan


@dataclass(frozen=True)
class JudgeLosses:
    """The diagnosis of an optimiser's fit: its loss trace (an ensemble's worst member), the drift record where the
    method returns one (:class:`~pyro_bdl.inference.drift.DriftRecord`), and for a point fit (``point``) whether the
    density it maximised (``objective(model)``, else the model's own) has a mode there.

    The drift record is kept, not read, for a zoo network: its weights are not identifiable (permutations,
    scalings) and keep drifting along flat directions after its predictions have settled; its loss and held-out
    metrics judge it."""

    point: bool = False
    objective: Callable | None = None
    report: ClassVar[type] = LossReport

    def __call__(self, result) -> LossReport | None:
        if result.losses is None:
            return None
        rows = np.atleast_2d(np.asarray(result.losses, dtype=float))
        reports = [svi_report(row, warn=False) for row in rows]
        worst = min(range(len(reports)), key=lambda i: (reports[i].settled, reports[i].final_elbo))
        network = result.spec is not None and "network" in result.spec.inference.traits
        drift = result.info if isinstance(result.info, DriftRecord) and not network else None
        edges = self._edges(result) if self.point and drift is not None else None
        return svi_report(rows[worst][np.isfinite(rows[worst])], drift=drift, edges=edges)

    def _edges(self, result) -> list:
        """The sites of the point at an edge of their support with the density still rising there."""
        if not result.samples or not all(bool(torch.isfinite(v).all()) for v in result.samples.values()):
            return []
        objective = self.objective(result.model) if self.objective is not None else None
        # in float64 first: a point far out (a concentration at 1e6) has a float32 density too coarse for its slope
        for data, samples in ((_double(result.data), _double(result.samples)), (result.data, result.samples)):
            try:
                with result.own_params():
                    return running_to_an_edge(result.model, data, samples, objective)
            except (ValueError, RuntimeError, NotImplementedError):  # a program that takes no float64 (then again in
                continue  # its own dtype), a prior that cannot be drawn, a density not finite at the point: not judged
        return []


def _double(values: dict) -> dict:
    """``values`` with its floating tensors in float64."""
    return {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in values.items()}


@dataclass(frozen=True)
class JudgeChains:
    """The diagnosis of a sampler's fit: R-hat, ESS and divergences over its latent sites (:func:`mcmc_report`)."""

    report: ClassVar[type] = ChainReport

    def __call__(self, result) -> ChainReport:
        return mcmc_report(result.to_inference_data(), var_names=list(result.samples))


@dataclass(frozen=True)
class JudgeWeights:
    """The diagnosis of importance sampling: the weights' ESS against the draws (:func:`importance_report`)."""

    report: ClassVar[type] = WeightsReport

    def __call__(self, result) -> WeightsReport:
        return importance_report(result.info.importance_ess, result.info.importance_draws)


RHAT_MAX = 1.01
ESS_PER_CHAIN_MIN = 100


def _ess_table(idata, var_names=None) -> pd.DataFrame:
    """Bulk and tail ESS per scalar, rows named as az.summary names them (``w``, ``w[3]``, ``w[0, 2]``)."""
    import arviz as az

    columns = {}
    for method in ("bulk", "tail"):
        rows = {}
        for name, values in az.ess(idata, var_names=var_names, method=method).data_vars.items():
            array = np.asarray(values.values, dtype=float)
            for index in np.ndindex(array.shape):
                rows[f"{name}[{', '.join(map(str, index))}]" if index else name] = float(array[index])
        columns[f"ess_{method}"] = rows
    return pd.DataFrame(columns)


def _divergences(idata) -> int:
    stats = getattr(idata, "sample_stats", None)  # absent for draws that came without sampler statistics
    return int(stats["diverging"].sum()) if stats is not None and "diverging" in stats else 0


def mcmc_report(idata, var_names=None, warn: bool = True) -> ChainReport:
    """max r_hat, min bulk/tail ESS and the number of divergences; warns naming what is wrong."""
    import arviz as az

    chains = idata.posterior.sizes["chain"]
    if chains > 1:  # round_to="none": az.summary rounds r_hat to 2 decimals by default (1.005 reads as 1.01)
        summary = az.summary(idata, var_names=var_names, kind="diagnostics", round_to="none")
    else:  # ESS only: az.summary's r_hat would log a shape warning; the one-chain warning below says it plainly
        summary = _ess_table(idata, var_names)
    report = ChainReport(
        max_r_hat=float(summary["r_hat"].max()) if chains > 1 else float("nan"),
        min_ess_bulk=float(summary["ess_bulk"].min()),
        min_ess_tail=float(summary["ess_tail"].min()),
        divergences=_divergences(idata),
    )
    if not warn:
        return report
    problems = []
    if chains > 1 and report.max_r_hat > RHAT_MAX:
        worst = summary["r_hat"].idxmax()
        problems.append(f"r_hat = {report.max_r_hat:.3f} > {RHAT_MAX} (worst: {worst})")
    if chains == 1:
        problems.append("only one chain: r_hat cannot be checked (use chains >= 2)")
    ess_min = ESS_PER_CHAIN_MIN * chains
    for kind, least in (("bulk", report.min_ess_bulk), ("tail", report.min_ess_tail)):
        if least < ess_min:
            problems.append(f"{kind} ESS = {least:.0f} < {ess_min} (worst: {summary[f'ess_{kind}'].idxmin()})")
    if report.divergences:
        problems.append(f"{report.divergences} divergent transitions (raise target_accept or reparameterise)")
    if problems:
        warnings.warn("MCMC diagnostics: " + "; ".join(problems), ConvergenceWarning, stacklevel=3)
    return report


def svi_report(losses, warn: bool = True, drift: DriftRecord | None = None, edges: list | None = None) -> LossReport:
    """Final ELBO (mean of the last 10% of -loss), whether the loss has settled and, given the drift check's record
    (``drift``: :func:`pyro_bdl.inference.drift.drift_record`, the fit's ``info`` for svi and map), whether the answer is
    still moving (:func:`pyro_bdl.inference.drift.still_moving`).  One warning names both.  ``edges``: the moving
    sites found running to a bound of their support (:func:`pyro_bdl.inference.mode_check.running_to_an_edge`), where
    the density has no mode: the warning says so instead of advising more steps.

    Settled: the means of the last two tenths of the run differ by less than three standard
    errors, or by less than 0.1% of the loss.
    """
    losses = np.asarray(losses, dtype=float)
    report = LossReport(steps_run=int(len(losses)))
    if len(losses) == 0 or not np.isfinite(losses[-1]):
        if warn:
            warnings.warn("SVI: the loss is NaN or infinite; the fit is not usable", ConvergenceWarning, stacklevel=3)
        return report
    k = max(len(losses) // 10, 1)
    last, prev = losses[-k:], losses[-2 * k : -k] if len(losses) >= 2 * k else losses[:k]
    diff = abs(last.mean() - prev.mean())
    se = np.sqrt(last.var() / len(last) + prev.var() / len(prev))
    report.final_elbo = float(-last.mean())
    report.settled = bool(diff <= 3 * se or diff <= 1e-3 * abs(last.mean()))
    moving = drift is not None and still_moving(drift)
    if drift is not None:  # None: not measured (a run too short to have both windows, or stopped early)
        report.moving = moving if np.isfinite(drift.drift) else None
    problems = []
    if not report.settled:
        problems.append(f"the loss has not settled (the last two tenths of the run differ by {diff:.3g}, "
                        f"standard error {se:.3g})")
    if moving:
        problems.append(f"the answer is still moving ({_drift_text(drift)})")
    if edges:
        report.no_mode = [site for site, _ in edges]
        problems.append(_edges_text(edges))
    if warn and problems:
        advice = NO_MODE_ADVICE if edges else MOVING_ADVICE if moving else "run more steps (--steps)"
        warnings.warn(f"SVI: {' and '.join(problems)}; {advice}", ConvergenceWarning, stacklevel=3)
    return report


#: What a warning about a moving answer (:func:`pyro_bdl.inference.drift.still_moving`) tells the user to do.
MOVING_ADVICE = ("run more steps (--steps), a larger learning rate (--lr), or hold the rate for longer "
                 "(--set lr_hold=0.75; 1 keeps it constant)")


#: What a warning about a point fit running to the edge of a support (no mode) tells the user to do.
NO_MODE_ADVICE = ("more steps will not help.  Sample the posterior instead "
                  "(--inference nuts, or svi), write the model non-centred (theta = mu + tau * z, z ~ N(0, 1)), or "
                  "give the scale a prior that vanishes at the edge (e.g. Gamma(2, rate) instead of a half-Normal)")


def _edges_text(edges: list) -> str:
    sites = " and ".join(f"'{site}' is running to {bound:g}" for site, bound in edges)
    return (f"{sites}, the edge of its support: the density rises all the way there, so there is no mode inside "
            f"the support to stop at (as when a hierarchical model's group scale goes to 0 with every group effect "
            f"at its mean, where the density grows without bound)")


def _drift_text(drift: DriftRecord) -> str:
    running, drifting = drift.drift_running, drift.drift_travelling
    window = drift.drift_window or "the late windows"
    visible = np.isfinite(running) and running >= DRIFT_VISIBLE or np.isfinite(drifting) and drifting >= DRIFT_MIN
    if not visible:  # moving by its pace alone: far from the optimum, where a long way reads as a small move
        return (f"'{str(drift.drift_pace_at).split('.', 1)[-1]}' went at {drift.drift_pace:.2f} of the "
                f"optimiser's full pace between {window}, its gradient keeping its sign: still on its way")
    if np.isfinite(running) and running >= DRIFT_VISIBLE:
        at, value, kind, how = (drift.drift_running_at, running, drift.drift_running_kind,
                                "carried at the optimiser's full pace")
    else:
        at, value, kind, how = (drift.drift_travelling_at, drifting, drift.drift_travelling_kind,
                                "drifting beyond the optimiser's jitter")
    what = (f"the sd of '{at}' changed by a factor {np.exp(value):.3g}" if kind == "drift_sd"
            else f"'{at}' moved {value:.2g} of its {drift.drift_units or 'sds'}")
    return f"{what} between {window}, {how}"


def importance_report(ess: float, draws: int, warn: bool = True) -> WeightsReport:
    """Warn when the importance weights' ESS is below 1% of the draws or below 50."""
    if warn and (ess < 0.01 * draws or ess < 50):
        warnings.warn(
            f"importance sampling: the weights' effective sample size is {ess:.1f} of {draws} draws; "
            "estimates are unreliable (use a better proposal or more samples)",
            ConvergenceWarning,
            stacklevel=3,
        )
    return WeightsReport(float(ess))


