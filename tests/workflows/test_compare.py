"""``pyro_bdl.compare`` / ``pyro-bdl compare``: several methods judged against a reference posterior.

Tolerances are Monte Carlo standard errors (K = 4.5 of them: tests/posterior_checks.py) from the measured ESS of
NUTS and the number of draws of the other methods, with the optimiser's allowance stated where it is used.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from support.posterior_checks import K, ess

import pyro_bdl
from pyro_bdl.cli import main
from pyro_bdl.data.table import Dataset
from pyro_bdl.storage.paths import OutputPathError
from pyro_bdl.workflows import compare as compare_module

#: What an optimiser leaves of a mode in reference sds (a converged MAP on a 3-dimensional quadratic).
OPTIMISER = 0.02
LAPLACE_DRAWS = 4000


def tiny_blr(n: int = 40, seed: int = 1) -> Dataset:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 + 0.5 * rng.normal(size=n)
    return Dataset("tiny", torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32), ["x0", "x1"], "y")


@pytest.fixture(scope="module")
def blr_comparison():
    # nuts: 2 x 1000 draws; at 2 x 500 the R-hat warning fires by chance (benchmarks/RESULTS.md, "Thresholds after the draws changed")
    return pyro_bdl.compare("blr", tiny_blr(), ["nuts", "laplace", "map"], options={"noise": 0.5},
                            settings={"nuts": {"samples": 1000, "warmup": 300, "chains": 2},
                                      "laplace": {"steps": 500, "samples": LAPLACE_DRAWS}, "map": {"steps": 500}},
                            progress=False)


@pytest.mark.slow
def test_blr_against_its_exact_posterior(blr_comparison):
    """laplace is exact on blr (a Gaussian posterior) up to the optimiser and its draws' Monte Carlo error; nuts within
    its Monte Carlo error from its measured ESS; map is a point: its mean error only."""
    c = blr_comparison
    assert c.reference == "exact" and set(c.table["element"]) == {"w[0]", "w[1]", "b"}
    laplace = c.table[c.table["method"] == "laplace"]
    assert np.all(laplace["mean_error"].abs() < K / np.sqrt(LAPLACE_DRAWS) + OPTIMISER), laplace
    assert np.all((laplace["sd_ratio"] - 1).abs() < K / np.sqrt(2 * LAPLACE_DRAWS) + OPTIMISER), laplace
    nuts = c.table[c.table["method"] == "nuts"].set_index("element")
    ess_mean = np.concatenate([ess(c.results["nuts"], "w", "mean"), ess(c.results["nuts"], "b", "mean")])
    errors = nuts.loc[["w[0]", "w[1]", "b"], "mean_error"].to_numpy()
    assert np.all(np.abs(errors) < K / np.sqrt(ess_mean)), (errors, ess_mean)
    point = c.table[c.table["method"] == "map"]
    assert point["divergence"].isna().all() and (point["divergence_kind"] == "point (mean error only)").all()
    assert np.all(point["mean_error"].abs() < OPTIMISER)  # the MAP of a Gaussian posterior is its mean
    assert (c.table.loc[c.table["method"] != "map", "divergence_kind"] == "Gaussian W2 / ref sd").all()
    assert list(c.summary["method"]) == ["nuts", "laplace", "map"] and (c.summary["seconds"] > 0).all()


def test_the_table_can_fail_a_wrong_fit(blr_comparison):
    """The same comparison against a moved reference reads a mean error of the move (the check is not vacuous)."""
    moved = {k: (m + 3 * s, s) for k, (m, s) in blr_comparison.reference_moments.items()}
    table = compare_module._table({"laplace": blr_comparison.results["laplace"]}, "exact", moved, None)
    assert np.all((table["mean_error"] + 3).abs() < K / np.sqrt(LAPLACE_DRAWS) + OPTIMISER)
    assert np.all(table["divergence"] > 2.9)


def normal_mean(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    with pyro.plate("data", len(y)):
        pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


@pytest.mark.slow
def test_a_users_program_against_nuts(tmp_path):
    """A user's program has no exact posterior: nuts is the reference (its draws), and laplace, exact for this
    Gaussian posterior, agrees with it within the Monte Carlo error of both."""
    y = torch.randn(20, generator=torch.Generator().manual_seed(0)) + 2.0
    c = pyro_bdl.compare(normal_mean, {"y": y}, ["nuts", "laplace", "map"],
                         settings={"nuts": {"samples": 500, "warmup": 300}, "laplace": {"samples": LAPLACE_DRAWS}},
                         progress=False)
    assert c.reference == "nuts" and c.title == "normal_mean"
    assert set(c.table["method"]) == {"laplace", "map"} and list(c.table["element"].unique()) == ["mu"]
    row = c.table[c.table["method"] == "laplace"].iloc[0]
    assert row["divergence_kind"] == "W1 / ref sd"
    ess_nuts = float(ess(c.results["nuts"], "mu", "mean")[0])
    assert abs(row["mean_error"]) < K * np.sqrt(1 / ess_nuts + 1 / LAPLACE_DRAWS) + OPTIMISER, (row, ess_nuts)
    assert c.loo is not None and "nuts" in c.loo.index and "laplace" in c.loo.index
    assert any("leaves out map" in note for note in c.notes)
    assert c.summary.iloc[0]["method"] == "nuts (reference)"


def test_the_report_is_written_and_an_existing_folder_refused(blr_comparison, tmp_path):
    out = tmp_path / "report"
    files = blr_comparison.write(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(files)
    text = (out / "report.md").read_text()
    assert "Reference: **exact**" in text and "| laplace | w[0] |" in text and "![marginals](marginals.png)" in text
    assert (out / "marginals.png").stat().st_size > 5000
    with pytest.raises(OutputPathError, match="not empty"):
        blr_comparison.write(out)
    (out / "stale.txt").write_text("old")
    blr_comparison.write(out, force=True)
    assert not (out / "stale.txt").exists() and [p.name for p in tmp_path.iterdir()] == ["report"]


def test_a_method_that_does_not_suit_the_model_is_refused_before_any_fit(monkeypatch):
    def no_fit(*args, **kwargs):
        raise AssertionError("a fit ran before the methods were checked")

    monkeypatch.setattr(compare_module, "fit", no_fit)
    with pytest.raises(ValueError, match="does not support inference 'mc-dropout' .*network"):
        pyro_bdl.compare("blr", tiny_blr(), ["map", "mc-dropout"])
    with pytest.raises(ValueError, match="unknown"):
        pyro_bdl.compare("blr", tiny_blr(), ["map", "nust"])
    with pytest.raises(ValueError, match="settings for svi, which is not among the methods"):
        pyro_bdl.compare("blr", tiny_blr(), ["map"], settings={"svi": {"steps": 10}})


def test_the_cli_writes_a_report_and_refuses_bad_input(tmp_path, capsys):
    data = tiny_blr(30)
    csv = tmp_path / "tiny.csv"
    np.savetxt(csv, np.column_stack([data.X.numpy(), data.y.numpy()]), delimiter=",", header="x0,x1,y", comments="")
    common = ["compare", "blr", "--data", str(csv), "--target", "y", "--option", "noise=0.5", "--no-progress"]
    out = tmp_path / "out"
    assert main([*common, "--methods", "map,laplace", "--set", "map.steps=300", "--set", "laplace.steps=300",
                 "--test-fraction", "0.2", "--out", str(out)]) == 0
    assert (out / "report.md").exists() and (out / "table.csv").exists() and (out / "marginals.png").exists()
    assert "test_ll" in (out / "summary.csv").read_text()
    for bad, message in ((["--methods", "map,nust"], "nust"), (["--methods", "map", "--set", "steps=3"], "METHOD.KEY"),
                         (["--methods", "map,mc-dropout"], "does not support")):
        capsys.readouterr()
        assert main([*common, *bad, "--out", str(tmp_path / "bad")]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert main([*common, "--methods", "map", "--out", str(out)]) == 2  # the report already there
    assert "not empty" in capsys.readouterr().err
