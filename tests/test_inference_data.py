"""One function turns every fit into ArviZ InferenceData: the groups each family must have."""

from __future__ import annotations

import contextlib

import arviz as az
import pytest

import pyro_bdl
import pyro_bdl.datasets
from pyro_bdl.inference import METHODS

#: Very short runs: these tests check structure, not accuracy.
QUICK = {
    "svi": {"steps": 100, "samples": 50}, "svi-meanfield": {"steps": 100, "samples": 50},
    "bbvi": {"steps": 30, "samples": 50, "particles": 2}, "map": {"steps": 100}, "mle": {"steps": 100},
    "nuts": {"samples": 60, "warmup": 40}, "hmc": {"samples": 60, "warmup": 40},
    "metropolis": {"samples": 100, "warmup": 100}, "importance": {"samples": 200},
    "mc-dropout": {"steps": 100, "samples": 20}, "ensemble": {"steps": 100, "members": 2},
}
#: Every method each model supports; the networks only on their cheapest setting (hidden=5).
CASES = [(model, method) for model in ("blr", "coin") for method in pyro_bdl.get_model(model).methods] + [
    ("bnn-regressor", method) for method in pyro_bdl.get_model("bnn-regressor").methods
    if method not in ("nuts", "hmc")
] + [("bnn-classifier", "mc-dropout"), ("bnn-classifier", "ensemble")]
SMALL_NET = {"hidden": "5"}
#: The QUICK runs the diagnostics flag, as they should: short on purpose.
FLAGGED = {**{(model, method): "MCMC diagnostics" for model in ("blr", "coin") for method in ("nuts", "hmc", "metropolis")},
           **{case: "not settled" for case in [("blr", "map"), ("blr", "mle"), ("bnn-regressor", "map"),
                                               ("bnn-regressor", "mle"), ("bnn-regressor", "ensemble"),
                                               ("bnn-classifier", "ensemble")]}}


def test_every_method_has_quick_settings():
    assert set(QUICK) == set(METHODS)


@pytest.mark.parametrize("model,method", CASES)
def test_inference_data_groups(model, method, tmp_path):
    options = SMALL_NET if model.startswith("bnn") else None
    data = pyro_bdl.datasets.digits_split()[1] if model == "bnn-classifier" else None
    warning = FLAGGED.get((model, method))
    with pytest.warns(pyro_bdl.ConvergenceWarning, match=warning) if warning else contextlib.nullcontext():
        result = pyro_bdl.fit(model, data, inference=method, progress=False, options=options, **QUICK[method])
    idata = result.to_inference_data()
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data"):
        assert group in idata.groups(), group
    assert set(idata.posterior.data_vars) == set(result.samples)
    n = len(result.data["y"])
    assert idata.log_likelihood["y"].shape[-1] == n
    assert idata.posterior.attrs["inference"] == method
    family = METHODS[method].family
    if family == "mcmc":
        assert {"diverging", "step_size", "lp"} <= set(idata.sample_stats.data_vars)
        assert idata.posterior.sizes["chain"] == 2
    elif family in ("svi", "point"):
        assert idata.sample_stats["loss"].dims == ("step",)
        assert idata.sample_stats["loss"].size == QUICK[method]["steps"]
    elif family == "ensemble":
        assert idata.sample_stats["loss"].dims == ("member", "step")
        assert idata.posterior.sizes["chain"] == QUICK[method]["members"]
    elif family == "importance":
        assert "log_weight" in idata.sample_stats
    assert bool(idata.posterior.attrs["point_estimate"]) == (family == "point")
    path = tmp_path / "fit.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    assert set(back.groups()) == set(idata.groups())
