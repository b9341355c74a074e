"""One function turns every fit into ArviZ InferenceData: the groups each family must have."""

from __future__ import annotations

import arviz as az
import pytest
from conftest import one_of_each

import pyro_bdl
import pyro_bdl.data.embedded
from pyro_bdl.inference import METHODS
from pyro_bdl.registry import list_models

#: Very short runs (each method's own smoke settings): these tests check structure, not accuracy.
QUICK = {name: dict(method.quick) for name, method in METHODS.items()}
#: Every model with every method it supports (the registry's table), networks on their cheapest setting
#: (hidden=5); not the samplers on networks, minutes even there (their slow tests run them).
CASES = [(spec.name, name) for spec in list_models() for name in spec.methods
         if not ("network" in spec.inference.traits and METHODS[name].family == "mcmc")
         and spec.runs_as(name) == name]  # a name another method answers for (svi on the VAE) runs that one's case
SMALL = {"hidden": "5"}


def test_every_method_has_quick_settings():
    assert all(QUICK.values()), [name for name, quick in QUICK.items() if not quick]


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # smoke runs; the warnings: test_diagnostics
@pytest.mark.parametrize("model,method", one_of_each(CASES))
def test_inference_data_groups(model, method, tmp_path):
    spec = pyro_bdl.get_model(model)
    options = SMALL if "hidden" in spec.options else None
    data = pyro_bdl.data.embedded.digits_split()[1] if spec.default_data == "digits" else None  # 450 rows, not 1797
    result = pyro_bdl.fit(model, data, inference=method, progress=False, options=options, **QUICK[method])
    idata = result.to_inference_data()
    if not result.samples:  # every latent local to a row (an amortised model): no posterior draws, no group for them
        assert spec.data.local_latents and "posterior" not in idata.groups()
        assert set(result.likelihood_sites) <= set(idata.observed_data.data_vars)
        assert idata.sample_stats["loss"].dims == ("step",) and idata.sample_stats.attrs["inference"] == method
        return
    for group in ("posterior", "posterior_predictive", "log_likelihood", "observed_data"):
        assert group in idata.groups(), group
    assert set(idata.posterior.data_vars) == set(result.samples)
    n = len(result.data[spec.data.target])
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


#: One case per registered method (the first model of the table it suits): the round trip through the fit directory.
ROUND_TRIP = list({method: (model, method) for model, method in reversed(CASES)}.values())


def test_every_registered_method_has_a_round_trip_case():
    assert {method for _, method in ROUND_TRIP} == set(METHODS)


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # smoke runs; the warnings: test_diagnostics
@pytest.mark.parametrize("model,method", ROUND_TRIP)
def test_a_fit_written_and_loaded_keeps_every_record(model, method, tmp_path):
    """``write_fit`` then ``load_fit`` gives back the method's outputs, its check and the model's report record by
    record (the same types, the same values as metrics.json holds them), and the same metrics.json: a field a
    method's record gains that the files or the loader drop fails here."""
    from pyro_bdl.inference.outputs import same_metrics

    spec = pyro_bdl.get_model(model)
    options = SMALL if "hidden" in spec.options else None
    data = pyro_bdl.data.embedded.digits_split()[1] if spec.default_data == "digits" else None
    fresh = pyro_bdl.fit(model, data, inference=method, progress=False, options=options, **QUICK[method])
    files = pyro_bdl.write_fit(fresh, tmp_path / "fit", plots=False)  # the figures: test_plots
    assert not [name for name in files if name.endswith(".png")] and sorted(files) == sorted(p.name for p in
                                                                                            (tmp_path / "fit").iterdir())
    loaded = pyro_bdl.load_fit(tmp_path / "fit")
    assert isinstance(fresh.info, METHODS[method].outputs) and same_metrics(loaded.info, fresh.info)
    assert isinstance(fresh.diagnostics, METHODS[method].diagnose.report)
    assert same_metrics(loaded.diagnostics, fresh.diagnostics)
    assert loaded.report.keys() == fresh.report.keys() and loaded.log_evidence == fresh.log_evidence
    assert loaded.metrics() == fresh.metrics()
