"""Programs we did not write (tests/support/ported_programs.py), through ``pyro_bdl.fit`` as a user runs them: what
broke for a new user in issue 53, each checked where it broke."""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest
import torch
from support.ported_programs import lkj, lkj_data, one_observed, two_observed, two_observed_data

import pyro_bdl
from pyro_bdl.posterior.diagnostics import rows_log_likelihood

pytestmark = pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # short runs: what is checked is below

SHORT = {"nuts": {"samples": 60, "warmup": 60, "chains": 1}, "svi": {"steps": 100, "samples": 30},
         "map": {"steps": 100}}


@pytest.mark.parametrize("method", list(SHORT))
def test_a_float64_fit_reloads_in_float64_and_works(method, tmp_path):
    """Pyro's lkj.py passes y as float64: the fit draws in float64, and the loaded fit does too (it used to come back
    float32, and its InferenceData failed with "expected scalar type Float but found Double")."""
    y = lkj_data()
    fit = pyro_bdl.fit(lkj, {"y": y}, inference=method, progress=False, **SHORT[method])
    assert {v.dtype for v in fit.samples.values()} == {torch.float64}
    pyro_bdl.write_fit(fit, tmp_path / "fit", plots=False)
    back = pyro_bdl.load_fit(tmp_path / "fit", model=lkj)
    assert all(torch.equal(back.samples[k], v) for k, v in fit.samples.items())
    again, fresh = back.to_inference_data(), fit.to_inference_data()
    assert (again.log_likelihood["obs"].values == fresh.log_likelihood["obs"].values).all()


def test_loo_over_rows_sums_the_sites_a_row_observes():
    """A program observing two sites of each row (a height and a flag): compare_loo leaves rows out, each row's
    log-likelihood the sum of its two sites' (it raised ArviZ's TypeError, "several log likelihood arrays"); the
    program that models the flags ranks above the one that calls them coin flips."""
    data, run = two_observed_data(), {"samples": 300, "warmup": 200, "chains": 2}
    fits = {name: pyro_bdl.fit(program, data, inference="nuts", progress=False, **run)
            for name, program in (("two", two_observed), ("one", one_observed))}
    table = pyro_bdl.compare_loo(fits)
    assert list(table.index) == ["two", "one"]
    idata = fits["two"].to_inference_data()
    by_hand = idata.log_likelihood["height"].values + idata.log_likelihood["flag"].values
    rows = rows_log_likelihood(idata).log_likelihood
    assert list(rows.data_vars) == ["height+flag"] and np.array_equal(rows["height+flag"].values, by_hand)
    assert table.loc["two", "elpd_loo"] == pytest.approx(float(az.loo(rows_log_likelihood(idata)).elpd_loo))
    one_site = pyro_bdl.compare_loo(fits, var_name="height")  # ArviZ's var_name: one site compared
    assert one_site.loc["two", "elpd_loo"] > table.loc["two", "elpd_loo"]


def test_sites_without_a_common_row_are_refused_naming_them():
    idata = az.from_dict(log_likelihood={"a": np.zeros((1, 5, 3)), "b": np.zeros((1, 5, 4))})
    with pytest.raises(ValueError, match=r"observes a \[3\], b \[4\].*var_name='a'"):
        rows_log_likelihood(idata)
