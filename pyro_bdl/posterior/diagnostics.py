"""Convergence checks after a fit, and comparisons across methods.

Thresholds follow Vehtari et al. (2021): split-R-hat below 1.01, bulk and tail ESS of at least
100 per chain, and no divergent transitions.

Example
-------
>>> import numpy as np
>>> svi_report(np.linspace(10, 1, 200).tolist() + [1.0] * 800)["settled"]
True
"""

from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
import pandas as pd

from pyro_bdl.inference.base import ConvergenceWarning
from pyro_bdl.inference.drift import DRIFT_MIN, DRIFT_VISIBLE, still_moving

__all__ = ["ConvergenceWarning", "mcmc_report", "svi_report", "importance_report", "compare_methods", "compare_loo"]

#: The diagnostics a fit records in ``info`` that a user reads first (printed by ``pyro-bdl fit``).
DIAGNOSTIC_KEYS = ("final_elbo", "max_r_hat", "min_ess_bulk", "divergences", "importance_ess")

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


def mcmc_report(idata, var_names=None, warn: bool = True) -> dict:
    """max r_hat, min bulk/tail ESS and the number of divergences; warns naming what is wrong."""
    import arviz as az

    chains = idata.posterior.sizes["chain"]
    if chains > 1:  # round_to="none": az.summary rounds r_hat to 2 decimals by default (1.005 reads as 1.01)
        summary = az.summary(idata, var_names=var_names, kind="diagnostics", round_to="none")
    else:  # ESS only: az.summary's r_hat would log a shape warning; the one-chain warning below says it plainly
        summary = _ess_table(idata, var_names)
    report = {
        "max_r_hat": float(summary["r_hat"].max()) if chains > 1 else float("nan"),
        "min_ess_bulk": float(summary["ess_bulk"].min()),
        "min_ess_tail": float(summary["ess_tail"].min()),
        "divergences": _divergences(idata),
    }
    if not warn:
        return report
    problems = []
    if chains > 1 and report["max_r_hat"] > RHAT_MAX:
        worst = summary["r_hat"].idxmax()
        problems.append(f"r_hat = {report['max_r_hat']:.3f} > {RHAT_MAX} (worst: {worst})")
    if chains == 1:
        problems.append("only one chain: r_hat cannot be checked (use chains >= 2)")
    ess_min = ESS_PER_CHAIN_MIN * chains
    for kind in ("bulk", "tail"):
        col = f"ess_{kind}"
        if report[f"min_{col}"] < ess_min:
            problems.append(f"{kind} ESS = {report[f'min_{col}']:.0f} < {ess_min} (worst: {summary[col].idxmin()})")
    if report["divergences"]:
        problems.append(f"{report['divergences']} divergent transitions (raise target_accept or reparameterise)")
    if problems:
        warnings.warn("MCMC diagnostics: " + "; ".join(problems), ConvergenceWarning, stacklevel=3)
    return report


def svi_report(losses, warn: bool = True, drift: Mapping | None = None, edges: list | None = None) -> dict:
    """Final ELBO (mean of the last 10% of -loss), whether the loss has settled and, given the drift check's record
    (``drift``: :func:`pyro_bdl.inference.drift.drift_record`, as the fit's ``info`` holds it), whether the answer is
    still moving (:func:`pyro_bdl.inference.drift.still_moving`).  One warning names both.  ``edges``: the moving
    sites found running to a bound of their support (:func:`pyro_bdl.posterior.mode_check.running_to_an_edge`), where
    the density has no mode: the warning says so instead of advising more steps.

    Settled: the means of the last two tenths of the run differ by less than three standard
    errors, or by less than 0.1% of the loss.
    """
    losses = np.asarray(losses, dtype=float)
    report = {"final_elbo": float("nan"), "settled": False, "steps_run": int(len(losses))}
    if len(losses) == 0 or not np.isfinite(losses[-1]):
        if warn:
            warnings.warn("SVI: the loss is NaN or infinite; the fit is not usable", ConvergenceWarning, stacklevel=3)
        return report
    k = max(len(losses) // 10, 1)
    last, prev = losses[-k:], losses[-2 * k : -k] if len(losses) >= 2 * k else losses[:k]
    diff = abs(last.mean() - prev.mean())
    se = np.sqrt(last.var() / len(last) + prev.var() / len(prev))
    report["final_elbo"] = float(-last.mean())
    report["settled"] = bool(diff <= 3 * se or diff <= 1e-3 * abs(last.mean()))
    moving = drift is not None and still_moving(drift)
    if drift is not None:  # None: not measured (a run too short to have both windows, or stopped early)
        report["moving"] = moving if np.isfinite(drift.get("drift", float("nan"))) else None
    problems = []
    if not report["settled"]:
        problems.append(f"the loss has not settled (the last two tenths of the run differ by {diff:.3g}, "
                        f"standard error {se:.3g})")
    if moving:
        problems.append(f"the answer is still moving ({_drift_text(drift)})")
    if edges:
        report["no_mode"] = [site for site, _ in edges]
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


def _drift_text(drift: Mapping) -> str:
    running, drifting = drift.get("drift_running", float("nan")), drift.get("drift_travelling", float("nan"))
    visible = np.isfinite(running) and running >= DRIFT_VISIBLE or np.isfinite(drifting) and drifting >= DRIFT_MIN
    if not visible:  # moving by its pace alone: far from the optimum, where a long way reads as a small move
        return (f"'{str(drift.get('drift_pace_at')).split('.', 1)[-1]}' went at {drift['drift_pace']:.2f} of the "
                f"optimiser's full pace between {drift.get('drift_window', 'the late windows')}, its gradient "
                f"keeping its sign: still on its way")
    key, how = (("drift_running", "carried at the optimiser's full pace") if np.isfinite(running) and running >= DRIFT_VISIBLE
                else ("drift_travelling", "drifting beyond the optimiser's jitter"))
    at, value = drift.get(f"{key}_at"), drift[key]
    what = (f"the sd of '{at}' changed by a factor {np.exp(value):.3g}" if drift.get(f"{key}_kind") == "drift_sd"
            else f"'{at}' moved {value:.2g} of its {drift.get('drift_units', 'sds')}")
    return f"{what} between {drift.get('drift_window', 'the late windows')}, {how}"


def importance_report(ess: float, draws: int, warn: bool = True) -> dict:
    """Warn when the importance weights' ESS is below 1% of the draws or below 50."""
    if warn and (ess < 0.01 * draws or ess < 50):
        warnings.warn(
            f"importance sampling: the weights' effective sample size is {ess:.1f} of {draws} draws; "
            "estimates are unreliable (use a better proposal or more samples)",
            ConvergenceWarning,
            stacklevel=3,
        )
    return {"importance_ess": float(ess)}


def compare_methods(results: Mapping[str, object], sites=None) -> pd.DataFrame:
    """Posterior mean and sd of every site element, one column pair per method.

    ``results`` maps a label (e.g. the method) to a :class:`~pyro_bdl.result.FitResult`.
    Rows are site elements (``w[0]``, ``b``, ...); columns a (method, statistic) MultiIndex.
    """
    frames = {}
    for label, result in results.items():
        rows = {}
        for name, value in result.samples.items():
            if sites is not None and name not in sites:
                continue
            flat = value.reshape(value.shape[0] * value.shape[1], -1).double()
            for j in range(flat.shape[1]):
                key = name if value[0, 0].dim() == 0 else f"{name}[{j}]"
                sd = float(flat[:, j].std()) if flat.shape[0] > 1 else float("nan")
                rows[key] = {"mean": float(flat[:, j].mean()), "sd": sd}
        frames[label] = pd.DataFrame(rows).T
    return pd.concat(frames, axis=1)


#: PSIS-LOO from fewer posterior draws than this is not an estimate: ``compare_loo`` leaves such fits out.
MIN_LOO_DRAWS = 100


def compare_loo(results: Mapping[str, object], **kwargs) -> pd.DataFrame:
    """``az.compare`` on PSIS-LOO for the fits that have a posterior sample of at least :data:`MIN_LOO_DRAWS`
    draws (point estimates and, e.g., a 5-member ensemble are left out, with a warning naming them: their
    "LOO" would be the in-sample fit)."""
    import arviz as az

    points = [k for k, r in results.items() if r.point_estimate or r.num_draws <= 1]
    few = [k for k, r in results.items() if k not in points and r.num_draws < MIN_LOO_DRAWS]
    if points:
        warnings.warn(f"compare_loo leaves out {', '.join(points)}: a point estimate has no posterior draws to "
                      "leave a point out of (PSIS-LOO needs draws; its log-likelihood is the in-sample fit)",
                      UserWarning, stacklevel=2)
    if few:
        warnings.warn(f"compare_loo leaves out {', '.join(few)}: fewer than {MIN_LOO_DRAWS} posterior draws",
                      UserWarning, stacklevel=2)
    idatas = {k: r.to_inference_data() for k, r in results.items() if k not in points and k not in few}
    if len(idatas) < 2:
        raise ValueError(f"compare_loo needs at least two fits with {MIN_LOO_DRAWS} or more posterior draws "
                         f"(nuts, svi, laplace, ...); {len(idatas)} of the {len(results)} given have them")
    with warnings.catch_warnings():  # ArviZ's own use of a pandas keyword pandas deprecates: nothing a user can change
        warnings.filterwarnings("ignore", "The inplace keyword in DataFrame.sort_values is deprecated")
        return az.compare(idatas, ic="loo", **kwargs)
