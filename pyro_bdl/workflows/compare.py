r"""Which inference method for my model: fit several methods and compare each with a reference posterior.

:func:`compare` fits each method on the same data and judges it against the reference: the model's exact posterior
where its spec declares one (:attr:`~pyro_bdl.registry.PostFit.exact_posterior`, and the options it needs are met),
else a NUTS fit (:data:`~pyro_bdl.inference.method.DEFAULT_METHOD`, reused when it is among the methods).  Per site
element it gives the method's mean and sd, the standardised mean error :math:`(m - m_\mathrm{ref})/s_\mathrm{ref}`, the
sd ratio, and a divergence of the marginal in reference sds: the 1-D Wasserstein-1 distance between the method's
draws and the reference's (``scipy.stats.wasserstein_distance``; between two samples of one distribution it is not
0 but of order :math:`1/\sqrt{\mathrm{draws}}`), or the closed-form Wasserstein-2 distance
:math:`\sqrt{(m - m_\mathrm{ref})^2 + (s - s_\mathrm{ref})^2}` between the Gaussians of those moments when the
reference is moments only.  A point estimate (MAP) gets its mean error only.  With held-out data it adds each
method's held-out metrics (:func:`~pyro_bdl.posterior.evaluation.evaluate_fit`), and PSIS-LOO ranks the fits with
posterior draws (:func:`~pyro_bdl.posterior.diagnostics.compare_loo`).

Example
-------
>>> import torch, pyro_bdl
>>> from pyro_bdl.data.table import Dataset
>>> X = torch.randn(30, 2, generator=torch.Generator().manual_seed(0))
>>> y = X @ torch.tensor([1.0, -0.5]) + 0.3 * torch.randn(30, generator=torch.Generator().manual_seed(1))
>>> data = Dataset("tiny", X, y, ["x0", "x1"], "y")
>>> result = compare("blr", data, ["map", "laplace"], options={"noise": 0.3}, settings={"map": {"steps": 300},
...                  "laplace": {"steps": 300}}, progress=False)
>>> result.reference
'exact'
>>> bool(result.table.query("method == 'laplace'")["mean_error"].abs().max() < 0.05)
True
>>> list(result.summary["method"])
['map', 'laplace']
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from pyro_bdl.data.table import Dataset
from pyro_bdl.fit import fit
from pyro_bdl.inference.method import DEFAULT_METHOD
from pyro_bdl.inference.diagnose import RHAT_MAX, ChainReport
from pyro_bdl.posterior.diagnostics import compare_loo, compare_methods
from pyro_bdl.posterior.evaluation import evaluate_fit
from pyro_bdl.prepare import prepare
from pyro_bdl.registry import resolve, spec_of
from pyro_bdl.workflows.comparison import MAX_PLOTTED, Comparison, element_draws

__all__ = ["compare", "Comparison", "DEFAULT_METHODS", "MAX_PLOTTED"]

#: The methods :func:`compare` fits when none are named.
DEFAULT_METHODS = (DEFAULT_METHOD, "svi", "laplace", "map")

def compare(model: str | Callable, data=None, methods: Sequence[str] = DEFAULT_METHODS, *, reference: str = "auto",
            test: Dataset | None = None, settings: Mapping[str, Mapping] | None = None, options: dict | None = None,
            seed: int = 0, progress: bool = True) -> Comparison:
    """Fit ``model`` with each method and judge each fit against a reference posterior.

    Parameters
    ----------
    model : a zoo model name or a Pyro model callable (its data its keyword arguments), as for :func:`pyro_bdl.fit`.
    data : the data, as for :func:`pyro_bdl.fit`.
    methods : the methods to fit (names of :data:`pyro_bdl.METHODS`); each is checked against the model before
        anything runs: one that does not suit it is refused with the reason.
    reference : ``"auto"`` (the model's exact posterior where it has one for these options, else NUTS),
        ``"exact"``, or a method's name whose fit is the reference (reused when among ``methods``).
    test : held-out data (a :class:`~pyro_bdl.data.table.Dataset` with targets) for each method's held-out
        metrics (zoo models).
    settings : method -> its settings (``{"svi": {"steps": 2000}}``), a ``"guide"`` among them for the methods that
        take one (as :func:`pyro_bdl.fit`'s ``guide``).
    options : zoo model options.
    seed, progress : as for :func:`pyro_bdl.fit`.

    Returns
    -------
    :class:`Comparison` with ``.table``, ``.summary``, ``.loo``, ``.plot()``, ``.to_markdown()``, ``.write()``.
    """
    methods, settings = list(methods), {k: dict(v) for k, v in (settings or {}).items()}
    spec = spec_of(model)
    _check_methods(spec, model, data, methods, settings, reference)
    exact = _exact_available(spec, reference)
    ref_method = None if exact else (DEFAULT_METHOD if reference in ("auto", "exact") else reference)
    run = functools.partial(_fit_method, spec if spec is not None else model, data, settings,
                            dict(options=options, seed=seed, progress=progress))
    results, notes, failures = {}, [], {}
    for method in methods + ([ref_method] if ref_method is not None and ref_method not in methods else []):
        run(method, results, failures, required=method == ref_method)
    ref_moments = ref_draws = None
    if exact:
        if not results:
            raise ValueError(f"every method failed: {'; '.join(f'{k}: {v}' for k, v in failures.items())}")
        try:
            ref_moments, reference_name = _exact_moments(spec, next(iter(results.values()))), "exact"
        except ValueError as error:
            if reference == "exact":
                raise
            notes.append(f"no exact posterior for these options ({error}); the reference is {DEFAULT_METHOD}")
            ref_method = DEFAULT_METHOD
            if ref_method not in results:
                run(ref_method, results, failures, required=True)
    if ref_moments is None:
        checks = results[ref_method].diagnostics
        reference_name, r_hat = ref_method, checks.max_r_hat if isinstance(checks, ChainReport) else float("nan")
        if r_hat > RHAT_MAX:
            notes.append(f"the reference's chains disagree (max r_hat {r_hat:.3g} > {RHAT_MAX}): its marginals are not "
                         "a trustworthy reference (a multimodal posterior, or too few draws), nor the divergences "
                         "measured against them")
        ref_draws = element_draws(results[ref_method])
        ref_moments = {k: (float(v.mean()), float(v.std(ddof=1))) for k, v in ref_draws.items()}
    table = _table(results, reference_name, ref_moments, ref_draws)
    summary = _summary(results, reference_name, table, test, notes, failures)
    loo = _loo(results, notes)
    title = spec.name if spec is not None else getattr(model, "__name__", "model")
    return Comparison(results, reference_name, ref_moments, ref_draws or {}, table, summary, loo, notes, title)


def _fit_method(model, data, settings: dict, common: dict, method: str, results: dict, failures: dict,
                required: bool) -> None:
    """``results[method]``: the method's fit; where it fails on the model (a Hessian that is not positive definite,
    a loss gone NaN: a ValueError), the reason in ``failures[method]``, an answer to "which method" too; the
    reference's failure is raised."""
    try:
        results[method] = fit(model, data, inference=method, **common, **settings.get(method, {}))
    except ValueError as error:
        if required:
            raise
        failures[method] = str(error).split("\n")[0]


def _check_methods(spec, model, data, methods: list, settings: dict, reference: str) -> None:
    """Every method and its settings checked before anything runs, by the registry's own check
    (:func:`~pyro_bdl.registry.resolve`; a user's program: its traits read from one trace against what each method
    refuses)."""
    if not methods:
        raise ValueError("compare needs at least one method")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods named twice: {', '.join(sorted({m for m in methods if methods.count(m) > 1}))}")
    known = set(methods) | {DEFAULT_METHOD if reference in ("auto", "exact") else reference}  # the reference's too
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"settings for {', '.join(unknown)}, which is not among the methods ({', '.join(methods)}) "
                         "nor the reference")
    if spec is None and reference == "exact":
        raise ValueError("reference='exact' needs a zoo model with an exact posterior; a user's model is compared "
                         "with NUTS (reference='auto')")
    if spec is not None and reference == "exact" and spec.hooks.exact_posterior is None:
        raise ValueError(f"model '{spec.name}' has no exact posterior; use reference='auto' (NUTS)")
    # the reference's method too: a NUTS reference where the model has no exact posterior for these options
    candidate = DEFAULT_METHOD if reference == "auto" else None if reference == "exact" else reference
    checked = methods + ([candidate] if candidate is not None and candidate not in methods else [])
    traits = prepare(model, data).sites.traits if spec is None else None  # a zoo model's are declared
    for method in checked:
        given = dict(settings.get(method, {}))
        plan = resolve(spec, method, given.pop("guide", None), given)
        refused = plan.method.refuses & traits if traits is not None else set()
        if refused:
            raise ValueError(f"inference '{method}' does not suit this model: it is {', '.join(sorted(refused))}"
                             + ("" if method in methods else " (it would be the reference: name another with "
                                                               "reference=...)"))


def _exact_available(spec, reference: str) -> bool:
    return spec is not None and spec.hooks.exact_posterior is not None and reference in ("auto", "exact")


def _exact_moments(spec, result) -> dict:
    """The model's exact posterior on the data it saw, as site element -> (mean, sd); a ValueError where these
    options have none."""
    exact = spec.hooks.exact_posterior(**result.standardized_data, **result.record.options)
    out = {}
    for site, (mean, sd) in exact.items():
        mean, sd = torch.as_tensor(mean).double().reshape(-1), torch.as_tensor(sd).double().reshape(-1)
        scalar = torch.as_tensor(exact[site][0]).dim() == 0
        for j in range(len(mean)):
            out[site if scalar else f"{site}[{j}]"] = (float(mean[j]), float(sd[j]))
    return out


def _table(results: dict, reference: str, ref_moments: dict, ref_draws: dict | None) -> pd.DataFrame:
    """One row per method (the reference's own fit aside) and reference site element."""
    from scipy.stats import wasserstein_distance

    judged = {k: r for k, r in results.items() if k != reference}
    moments = compare_methods(judged) if judged else pd.DataFrame()
    rows = []
    for label, result in judged.items():
        draws = element_draws(result)
        for element, (m_ref, s_ref) in ref_moments.items():
            if element not in draws:
                continue
            mean, sd = moments.loc[element, (label, "mean")], moments.loc[element, (label, "sd")]
            row = {"method": label, "element": element, "mean": mean, "sd": sd, "ref_mean": m_ref, "ref_sd": s_ref,
                   "mean_error": (mean - m_ref) / s_ref, "sd_ratio": sd / s_ref if np.isfinite(sd) else np.nan,
                   "divergence": np.nan, "divergence_kind": "point (mean error only)"}
            if not result.point_estimate and len(draws[element]) > 1:
                if ref_draws:
                    row["divergence"] = wasserstein_distance(draws[element], ref_draws[element]) / s_ref
                    row["divergence_kind"] = "W1 / ref sd"
                else:
                    row["divergence"] = math.hypot(mean - m_ref, sd - s_ref) / s_ref
                    row["divergence_kind"] = "Gaussian W2 / ref sd"
            rows.append(row)
    return pd.DataFrame(rows, columns=["method", "element", "mean", "sd", "ref_mean", "ref_sd", "mean_error",
                                       "sd_ratio", "divergence", "divergence_kind"])


def _summary(results: dict, reference: str, table: pd.DataFrame, test, notes: list, failures: dict) -> pd.DataFrame:
    """One row per method: mean and max divergence, max |mean error|, held-out metrics, seconds."""
    rows = []
    for label, result in results.items():
        part = table[table["method"] == label]
        row = {"method": label + (" (reference)" if label == reference else ""),
               "mean_divergence": part["divergence"].mean() if len(part) else np.nan,
               "max_divergence": part["divergence"].max() if len(part) else np.nan,
               "max_abs_mean_error": part["mean_error"].abs().max() if len(part) else np.nan}
        if test is not None:
            try:
                row.update({k if k.startswith("test") else f"test_{k}": v for k, v in evaluate_fit(result, test).items()
                            if k != "test_rows"})
            except (ValueError, TypeError) as error:
                notes.append(f"{label}: no held-out metrics ({error})")
        if isinstance(result.diagnostics, ChainReport):  # is the reference sound?
            row.update(result.diagnostics.headline())
        row["seconds"] = result.record.wall_seconds
        rows.append(row)
    for label, reason in failures.items():
        rows.append({"method": f"{label} (failed)"})
        notes.append(f"{label} failed: {reason}")
    return pd.DataFrame(rows)


def _loo(results: dict, notes: list) -> pd.DataFrame | None:
    """``compare_loo`` of the fits, its warnings kept as notes; None (with the reason) where it cannot be."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loo = compare_loo(results)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            notes.append(f"no PSIS-LOO comparison: {error}")
            loo = None
    notes.extend(str(w.message) for w in caught if w.category is UserWarning and "compare_loo" in str(w.message))
    if loo is not None and loo["elpd_loo"].isna().any():
        notes.append(f"PSIS-LOO gave no estimate (NaN) for {', '.join(loo.index[loo['elpd_loo'].isna()])}: its "
                     "importance weights failed (draws far from the posterior: heavy tails the Pareto fit cannot take)")
    return loo
