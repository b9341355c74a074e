"""Draws of a pyro_bdl fit held to a stored long run of Pyro's own NUTS (tests/test_pyro_examples.py and
tests/test_ported_programs.py; the runs: benchmarks/pyro_examples_reference.py, its summaries per site and element:
mean, sd, the ESS of each, kurtosis, r_hat).

Tolerances are the Monte Carlo error of the two estimates (K = 4.5 of its standard errors): for a mean,
sd_ref * sqrt(1 / ESS_ours + 1 / ESS_ref); for an sd, by the delta method on the variance (whose variance is
(m4 - sd^4) / n), sd_ref * sqrt((kurtosis - 1) / 4 * (1 / ESS_sd_ours + 1 / ESS_sd_ref)).  An entry that is
constant in the reference (a Cholesky factor's fixed 1 and 0) must match to 1e-5.
"""

from __future__ import annotations

import contextlib
import warnings

import arviz as az
import numpy as np
import pytest

import pyro_bdl
from support.posterior_checks import K

#: An entry with a reference sd below this is a constant of the parameterisation, compared as such.
CONSTANT = 1e-12


def reference_sites(reference: dict, example) -> dict:
    """The summaries in ``reference`` (a fixture's document) of the sites compared for ``example``."""
    entry = reference["models"].get(example.reference_name)
    if entry is None:  # no reference run stored: nothing to compare (a "-runs" check)
        return {}
    sites = entry["sites"]
    return {s: sites[s] for s in (example.compare or sites)}


def fit_draws(example, result, sites) -> dict[str, np.ndarray]:
    """Our draws of ``sites`` as float64 (chains, draws, elements), relabelled as the reference was."""
    draws = {s: result.samples[s].detach().double().numpy() for s in result.samples}
    if example.relabel is not None:
        draws = example.relabel(draws)
    missing = [s for s in sites if s not in draws]
    assert not missing, f"sites {missing} of the reference are not in the fit's draws {sorted(result.samples)}"
    for s, ref in sites.items():
        assert draws[s].shape[2:] == tuple(ref["shape"]), f"{s}: shape {draws[s].shape[2:]}, reference {ref['shape']}"
        assert np.isfinite(draws[s]).all(), f"{s}: non-finite draws"
    return {s: draws[s].reshape(draws[s].shape[0], draws[s].shape[1], -1) for s in sites}


def _varying(ref) -> np.ndarray:
    return np.array(ref["sd"]) > CONSTANT


def check_mixing(name, draws):
    """pyro_bdl's own MCMC diagnostic rules (r_hat <= 1.01, bulk ESS >= 100 per chain) on relabelled draws."""
    for s, value in draws.items():
        for j in range(value.shape[2]):
            if np.ptp(value[:, :, j]) == 0:
                continue
            rhat, ess = float(az.rhat(value[:, :, j])), float(az.ess(value[:, :, j], method="bulk"))
            assert rhat <= 1.01 and ess >= 100 * value.shape[0], f"{name} {s}[{j}]: r_hat {rhat:.3f}, ESS {ess:.0f}"


def check_nuts(name, draws, sites):
    """Means and sds against the reference's, within K standard errors of the two runs' difference."""
    errors = []
    for s, ref in sites.items():
        value = draws[s]
        mean, sd = value.reshape(-1, value.shape[2]).mean(0), value.reshape(-1, value.shape[2]).std(0, ddof=1)
        r_mean, r_sd, varying = np.array(ref["mean"]), np.array(ref["sd"]), _varying(ref)
        for j in np.flatnonzero(~varying & (np.abs(mean - r_mean) > 1e-5)):
            errors.append(f"{s}[{j}] {mean[j]:.6g}, a constant {r_mean[j]:.6g} in the reference")
        ess_mean = np.array([float(az.ess(value[:, :, j], method="mean")) if v else np.inf
                             for j, v in enumerate(varying)])
        ess_sd = np.array([float(az.ess(value[:, :, j], method="sd")) if v else np.inf for j, v in enumerate(varying)])
        with np.errstate(divide="ignore", invalid="ignore"):
            tol_mean = K * r_sd * np.sqrt(1 / ess_mean + 1 / np.array(ref["ess_mean"]))
            kurt = np.array(ref["kurtosis"])
            tol_sd = K * r_sd * np.sqrt((kurt - 1) / 4 * (1 / ess_sd + 1 / np.array(ref["ess_sd"])))
        for j in np.flatnonzero(varying & (np.abs(mean - r_mean) >= tol_mean)):
            errors.append(f"{s}[{j}] mean {mean[j]:.4g} vs Pyro {r_mean[j]:.4g} (tol {tol_mean[j]:.3g})")
        for j in np.flatnonzero(varying & (np.abs(sd - r_sd) >= tol_sd)):
            errors.append(f"{s}[{j}] sd {sd[j]:.4g} vs Pyro {r_sd[j]:.4g} (tol {tol_sd[j]:.3g})")
    assert not errors, f"{name}: " + "; ".join(errors)


def check_point(name, draws, sites, width, n_draws):
    """Means (or the one MAP draw) within ``width`` reference sds plus K standard errors of the two estimates."""
    errors = []
    for s, ref in sites.items():
        est = draws[s].reshape(-1, draws[s].shape[2]).mean(0)
        r_mean, r_sd, varying = np.array(ref["mean"]), np.array(ref["sd"]), _varying(ref)
        with np.errstate(divide="ignore"):
            mc = np.sqrt(1 / np.array(ref["ess_mean"]) + (1 / n_draws if n_draws else 0.0))
        tol = np.where(varying, r_sd * (width + K * mc), 1e-5)
        for j in np.flatnonzero(np.abs(est - r_mean) >= tol):
            errors.append(f"{s}[{j}] {est[j]:.4g} vs Pyro mean {r_mean[j]:.4g} (sd {r_sd[j]:.3g}, tol {tol[j]:.3g})")
    assert not errors, f"{name}: " + "; ".join(errors)


def check_reference_run(name, entry, compare) -> None:
    """A reference fit to compare with: 4 chains or more, 4000 draws or more, under one transition in 1000
    divergent (a diverging run is biased; this bounds the cut-short transitions far below the means'
    1 / sqrt(ESS)), r_hat under 1.01 on every compared entry that varies."""
    settings = entry["settings"]
    draws = settings["chains"] * settings["samples"]
    assert settings["chains"] >= 4 and draws >= 4000, (name, settings)
    assert entry["divergences"] < 1e-3 * draws, (name, entry["divergences"])
    for site in compare or entry["sites"]:
        summary = entry["sites"][site]
        rhat = np.array(summary["r_hat"], dtype=float)[_varying(summary)]
        assert (rhat < 1.01).all(), (name, site, summary["r_hat"])


#: How far a mean-field SVI mean or a MAP point may lie from the posterior mean, in reference sds, beside the
#: Monte Carlo error (the reasons: tests/test_pyro_examples.py's docstring, ``svi`` and ``map``).
SVI_TOL = 0.3
MAP_TOL = 0.5
#: the checks that compare draws with the reference (the others check that the fit runs, or warns, or refuses)
COMPARING = {"nuts", "nuts-warns", "svi", "map"}
#: the method each check fits with
METHOD = {"nuts": "nuts", "nuts-divergent": "nuts", "nuts-warns": "nuts", "nuts-runs": "nuts", "svi": "svi", "svi-runs": "svi",
          "map": "map", "map-degenerate": "map", "map-no-mode": "map", "map-runs": "map", "map-refuses": "map"}


@contextlib.contextmanager
def _convergence_warnings_pass():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        yield


def _expected_warnings(example, check):
    """The context of the fit: the ConvergenceWarning it must give, or lets pass, or (the default) none."""
    if check == "nuts-divergent":
        return pytest.warns(pyro_bdl.ConvergenceWarning, match="divergent")
    if check == "map-degenerate":
        return pytest.warns(pyro_bdl.ConvergenceWarning)
    if check == "map-no-mode":  # the advice for a density without a mode, not "run more steps"
        return pytest.warns(pyro_bdl.ConvergenceWarning, match="edge of its support.*more steps will not help")
    if check in ("svi-runs", "map-runs", "nuts-warns", "nuts-runs"):  # no convergence claim; nuts-warns: may warn
        return _convergence_warnings_pass()
    if example.relabel is not None and check == "nuts":
        # label switching between chains makes the raw draws' r_hat meaningless: the diagnostics are redone on the
        # relabelled draws (check_mixing)
        return _convergence_warnings_pass()
    return contextlib.nullcontext()


def run_case(name, example, check, settings, reference):
    """Fit ``example`` by ``check``'s method with ``settings`` (seed 0) and hold it to ``reference`` as ``check``
    says (the checks: tests/test_pyro_examples.py's docstring)."""
    sites = reference_sites(reference, example)
    if check == "map-refuses":
        with pytest.raises(ValueError, match="enumerated .* the methods that suit it: svi, nuts, hmc"):
            pyro_bdl.fit(example.model, example.data(), inference="map", progress=False, seed=0, **settings)
        return None
    with _expected_warnings(example, check):
        result = pyro_bdl.fit(example.model, example.data(), inference=METHOD[check], progress=False, seed=0,
                              **settings)
    assert set(result.likelihood_sites).isdisjoint(sites), f"posterior sites as data: {result.likelihood_sites}"
    draws = fit_draws(example, result, sites)
    if check in ("nuts", "nuts-warns"):
        if example.relabel is not None:
            check_mixing(name, draws)
        check_nuts(name, draws, sites)
    elif check == "svi":
        check_point(name, draws, sites, SVI_TOL, result.num_draws)
    elif check == "map":
        assert result.num_draws == 1
        check_point(name, draws, sites, MAP_TOL, 0)
    elif check.startswith("map-"):
        assert result.num_draws == 1
    return result
