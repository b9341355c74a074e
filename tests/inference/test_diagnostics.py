"""Diagnostics warn, naming what is wrong; comparisons across methods."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_bdl
from pyro_bdl.inference.diagnose import _ess_table, importance_report, mcmc_report, svi_report


def test_short_mcmc_run_warns_with_the_failing_diagnostic():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="ESS"):
        pyro_bdl.fit("blr", inference="metropolis", options={"noise": 0.5}, progress=False,
                     samples=50, warmup=10)


def test_healthy_mcmc_run_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyro_bdl.ConvergenceWarning)
        result = pyro_bdl.fit("coin", inference="nuts", progress=False, samples=500, warmup=300)
    assert result.diagnostics.max_r_hat < 1.01 and result.info.divergences == 0


def test_mcmc_report_uses_unrounded_diagnostics():
    # az.summary rounds r_hat to 2 decimals by default: a healthy 1.006 would read as 1.01
    import arviz as az

    rng = np.random.default_rng(1)
    idata = az.from_dict(posterior={"a": rng.normal(size=(2, 300)), "b": rng.normal(size=(2, 300, 3))})
    report = mcmc_report(idata, warn=False)
    want_rhat = max(float(az.rhat(idata)[v].max()) for v in ("a", "b"))
    want_ess = min(float(az.ess(idata)[v].min()) for v in ("a", "b"))
    assert report.max_r_hat == pytest.approx(want_rhat, rel=1e-12)
    assert report.min_ess_bulk == pytest.approx(want_ess, rel=1e-12)
    assert report.max_r_hat != round(report.max_r_hat, 2)


@pytest.mark.slow
def test_one_chain_report_warns_once_in_its_own_words():
    import arviz as az

    rng = np.random.default_rng(0)
    idata = az.from_dict(posterior={"a": rng.normal(size=(1, 300)), "w": rng.normal(size=(1, 300, 2, 3))})
    with pytest.warns(pyro_bdl.ConvergenceWarning) as caught:
        report = mcmc_report(idata)
    assert [str(w.message) for w in caught] == ["MCMC diagnostics: only one chain: r_hat cannot be checked (use chains >= 2)"]
    assert math.isnan(report.max_r_hat)
    for method in ("bulk", "tail"):
        ess = az.ess(idata, method=method)
        assert getattr(report, f"min_ess_{method}") == pytest.approx(min(float(ess[v].min()) for v in ("a", "w")), rel=1e-12)
    # the same rows, named alike, as az.summary's ESS columns (which it computes the same way)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = az.summary(idata, kind="diagnostics", round_to="none")[["ess_bulk", "ess_tail"]]
    pd.testing.assert_frame_equal(_ess_table(idata), want, check_exact=False, rtol=1e-12)
    # and no "Shape validation failed" from ArviZ's r_hat (its logger prints a message once per process: a fresh one)
    code = ("import warnings, numpy as np, arviz as az; from pyro_bdl.inference.diagnose import mcmc_report; "
            "warnings.simplefilter('ignore'); "
            "mcmc_report(az.from_dict(posterior={'a': np.random.default_rng(0).normal(size=(1, 300))}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Shape validation" not in run.stderr + run.stdout


def test_svi_report_flags_nan_and_unsettled_losses():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="NaN"):
        assert not svi_report([3.0, 2.0, float("nan")]).settled
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):
        assert not svi_report(np.linspace(100, 10, 500)).settled
    rng = np.random.default_rng(0)
    assert svi_report(5.0 + rng.normal(size=1000)).settled


def test_svi_nan_loss_stops_training_with_a_warning():
    def broken(y=None):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        # a log density that pulls mu upwards and is NaN beyond mu = 3
        pyro.factor("broken", torch.where(mu.abs() > 3, torch.tensor(float("nan")), 100.0 * mu))
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # and, as it stopped early, not settled
        with pytest.warns(pyro_bdl.ConvergenceWarning, match="loss became nan at step"):
            result = pyro_bdl.fit(broken, {"y": torch.tensor(1.0)}, inference="map", progress=False, steps=500, lr=0.5)
    assert result.diagnostics.steps_run < 500 and not result.diagnostics.settled


def test_svi_non_finite_parameters_are_put_back_to_the_last_finite_ones():
    """A finite loss with a NaN gradient (sqrt's gradient below 1, masked by where) makes the parameters
    NaN after one step; the next loss is NaN.  The fit keeps the last finite parameters."""
    def broken(y=None):
        mu = pyro.sample("mu", dist.Normal(3.0, 1.0))
        pyro.factor("pull_down", -100.0 * mu + torch.where(mu > 1, torch.sqrt(mu - 1), torch.zeros(())))
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)

    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # and, held at the boundary, not settled
        with pytest.warns(pyro_bdl.ConvergenceWarning, match="put back to those after 1 steps"):
            result = pyro_bdl.fit(broken, {"y": torch.tensor(1.0)}, inference="map", progress=False, steps=500, lr=0.5)
    mu = float(result.posterior_mean("mu"))
    assert math.isfinite(mu) and 1.0 < mu < 3.0, mu


def test_importance_report_warns_on_collapsed_weights():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="effective sample size"):
        importance_report(3.0, 4000)


def test_prior_proposal_collapses_on_informative_data():
    """The textbook failure of importance sampling from the prior, reported rather than hidden."""
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="effective sample size"):
        result = pyro_bdl.fit("blr", inference="importance", proposal="prior", options={"noise": 0.5},
                              progress=False, samples=500)
    assert result.info.importance_ess < 10


@pytest.mark.slow
def test_compare_methods_and_loo():
    nuts = pyro_bdl.fit("coin", inference="nuts", progress=False)  # the defaults: 2 x 1000 draws, diagnostics pass
    fits = {
        "nuts": nuts,
        "importance": pyro_bdl.fit("coin", inference="importance", progress=False, samples=1000),
        "map": pyro_bdl.fit("coin", inference="map", progress=False, steps=300),
    }
    table = pyro_bdl.compare_methods(fits)
    assert list(table.index) == ["pi"]
    assert set(table.columns.get_level_values(0)) == {"nuts", "importance", "map"}
    assert np.isnan(table.loc["pi", ("map", "sd")])
    loo = pyro_bdl.compare_loo(fits)
    assert set(loo.index) == {"nuts", "importance"}


def test_numeric_settings_read_text_and_refuse_what_is_not_a_number():
    from pyro_bdl.inference import get_method

    svi = get_method("svi")
    got = svi.resolve_settings({"steps": "300", "lr": "0.05", "grad_clamp": "inf", "batch_size": "16", "jit": "true"})
    assert (got["steps"], got["lr"], got["grad_clamp"], got["batch_size"], got["jit"]) == (300, 0.05, math.inf, 16, True)
    assert isinstance(got["steps"], int) and svi.resolve_settings({"steps": 2e3})["steps"] == 2000
    for key, bad, message in [("steps", "many", "must be a number"), ("steps", 10.5, "must be a whole number"),
                              ("lr", float("nan"), "must be a number"), ("samples", True, "must be a number"),
                              ("particles", [2], "must be a number"), ("steps", "inf", "must be a whole number")]:
        with pytest.raises(ValueError, match=f"setting '{key}' of inference 'svi' {message}"):
            svi.resolve_settings({key: bad})
    with pytest.raises(ValueError, match="setting 'p' of inference 'mc-dropout' must be a number"):
        pyro_bdl.fit("bnn-regressor", inference="mc-dropout", p="a lot", progress=False)
    fit = pyro_bdl.fit("coin", inference="map", steps="50", progress=False)  # text from Python, as from the CLI
    assert len(fit.losses) == 50


@pytest.mark.parametrize("method,key,bad,domain", [
    ("map", "steps", 0, "a whole number >= 1"), ("svi", "samples", 0, "a whole number >= 1"),
    ("nuts", "chains", "0", "a whole number >= 1"), ("nuts", "warmup", -1, "a whole number >= 0"),
    ("svi", "particles", 0, "a whole number >= 1"), ("ensemble", "members", 0, "a whole number >= 1"),
    ("svi", "batch_size", 0, "a whole number >= 1"), ("nuts", "max_tree_depth", 0, "a whole number >= 1"),
    ("map", "lr", -0.1, "a finite number > 0"), ("map", "lr", 0, "a finite number > 0"),
    ("svi", "lr", "inf", "a finite number > 0"), ("svi", "grad_clamp", 0, "a number > 0"),
    ("svi", "lr_hold", 1.5, r"a number in \[0, 1\]"), ("nuts", "target_accept", 1.5, r"a number in \(0, 1\)"),
    ("mc-dropout", "p", 1, r"a number in \[0, 1\)"), ("importance", "samples", 0, "a whole number >= 1"),
    ("metropolis", "samples", -5, "a whole number >= 1"),
])
def test_numeric_settings_outside_their_domain_are_refused(method, key, bad, domain):
    """Each numeric setting has one declared domain (SETTING_DOMAINS); a value outside it is refused
    before any work, naming the setting, the method and the domain (these used to fail deep inside:
    ZeroDivisionError, IndexError, an empty stack, or ran with nonsense)."""
    from pyro_bdl.inference import SETTING_DOMAINS, get_method

    assert key in SETTING_DOMAINS
    with pytest.raises(ValueError, match=f"setting '{key}' of inference '{method}' must be {domain}, got"):
        get_method(method).resolve_settings({key: bad})
    edge = SETTING_DOMAINS[key].low if not SETTING_DOMAINS[key].open_low else None
    if edge is not None:  # the closed end itself is admitted
        get_method(method).resolve_settings({key: edge})


def test_batch_size_needs_a_minibatching_model_and_caps_at_the_data():
    with pytest.raises(ValueError, match="model 'blr' does not take minibatches"):
        pyro_bdl.fit("blr", inference="map", batch_size=10, steps=5, progress=False)
    with pytest.raises(ValueError, match="model 'last-layer' does not take minibatches"):  # the zoo name
        pyro_bdl.fit("last-layer", inference="map", batch_size=10, steps=5, progress=False)
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 5 steps: only the settings are read
        big = pyro_bdl.fit("bnn-regressor", inference="map", batch_size=10**6, steps=5, progress=False)
    assert big.record.settings["batch_size"] is None  # larger than the 200 rows of sine: the whole data
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):
        small = pyro_bdl.fit("bnn-regressor", inference="map", batch_size=50, steps=5, progress=False)
    assert small.record.settings["batch_size"] == 50


def test_model_settings_go_with_the_models_default_guide():
    """A model's method_defaults apply with its default guide, implicit or named (``--guide beta`` for the
    coin's svi-meanfield gets the Beta guide's 3000 steps at lr 0.1), not with another guide; resolved
    without fitting anything (``resolve``), and the fit records what ``resolve`` said."""
    from pyro_bdl.inference import get_method
    from pyro_bdl.registry import resolve

    spec = pyro_bdl.get_model("coin")
    tuned = spec.inference.method_defaults["svi-meanfield"]
    for guide in (None, spec.inference.default_guides["svi-meanfield"]):
        plan = resolve(spec, "svi-meanfield", guide)
        assert {k: plan.settings[k] for k in tuned} == tuned, guide
        assert plan.guide == spec.inference.default_guides["svi-meanfield"]
    other = resolve(spec, "svi-meanfield", "normal").settings
    method = get_method("svi-meanfield").defaults
    assert {k: other[k] for k in tuned} == {k: method[k] for k in tuned}
    assert resolve(spec, "svi-meanfield", settings={"steps": "7"}).settings["steps"] == 7  # the user's win
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # 10 steps
        fitted = pyro_bdl.fit("coin", inference="svi-meanfield", steps=10, samples=5, progress=False).record.settings
    assert fitted == resolve(spec, "svi-meanfield", settings={"steps": 10, "samples": 5}).settings


def test_unknown_settings_methods_and_guides_are_named():
    with pytest.raises(ValueError, match="unknown setting 'stepz'.*steps"):
        pyro_bdl.fit("coin", inference="svi", stepz=3, progress=False)
    with pytest.raises(ValueError, match="unknown inference method 'gibbs'"):
        pyro_bdl.fit("coin", inference="gibbs", progress=False)
    with pytest.raises(ValueError, match="takes no guide"):
        pyro_bdl.fit("coin", inference="nuts", guide="normal", progress=False)
    with pytest.raises(ValueError, match="unknown guide 'fancy'"):
        pyro_bdl.fit("coin", inference="svi", guide="fancy", progress=False, steps=5)
    with pytest.raises(ValueError, match="unknown model 'wishart-process'"):
        pyro_bdl.fit("wishart-process", inference="svi", progress=False)
    with pytest.raises(ValueError, match="unknown option 'gamma'"):
        pyro_bdl.fit("coin", inference="map", options={"gamma": 1}, progress=False)


@pytest.mark.slow
def test_compare_loo_leaves_out_fits_with_too_few_draws():
    """PSIS-LOO from a handful of draws (an ensemble's members, a short chain) is the in-sample fit, not an
    estimate: such fits are left out, and the warning names them."""
    fits = {"importance": pyro_bdl.fit("coin", inference="importance", samples=1000, progress=False),
            "laplace": pyro_bdl.fit("coin", inference="laplace", progress=False)}
    with pytest.warns(pyro_bdl.ConvergenceWarning):  # 2 x 20 draws: the diagnostics say so too
        fits["short"] = pyro_bdl.fit("coin", inference="nuts", samples=20, warmup=20, progress=False)
    with pytest.warns(UserWarning, match="compare_loo leaves out short: fewer than 100 posterior draws"):
        table = pyro_bdl.compare_loo(fits)
    assert set(table.index) == {"importance", "laplace"}
