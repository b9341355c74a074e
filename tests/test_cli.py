"""The command line end to end, and every kind of bad input it must refuse cleanly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pytest

import pyro_bdl
import pyro_bdl.data.embedded
from pyro_bdl.cli import main

CLI = shutil.which("pyro-bdl") or str(Path(sys.executable).with_name("pyro-bdl"))


def run_cli(*args, cwd):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


def _regression_csv(path: Path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["target"] = 2.0 * df["a"] - df["b"] + 0.3 * rng.normal(size=n)
    df.to_csv(path, index=False)
    return df


def test_list_and_describe(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("blr", "coin", "nuts", "importance", "linear", "coin-few"):
        assert word in out
    assert main(["describe", "blr"]) == 0
    out = capsys.readouterr().out
    assert "prior_scale = 1.0" in out and "Sample sites (default options): w, b, sigma" in out and "ridge" in out
    assert "batch_size" not in out  # blr takes no minibatches: the setting is not offered
    assert main(["describe", "bnn-regressor"]) == 0
    assert "batch_size=None" in capsys.readouterr().out


def test_describe_gives_flags_that_reproduce_the_in_between_settings(capsys):
    """``describe bnn-regressor`` prints, per method, the flags for in-between uncertainty; read back by the
    CLI's own parser they are exactly the options and settings ``IN_BETWEEN`` (and its slow test) uses."""
    from pyro_bdl.cli import build_parser, parse_key_values
    from pyro_bdl.inference import get_method
    from pyro_bdl.models.bnn import IN_BETWEEN

    assert main(["describe", "bnn-regressor"]) == 0
    out = capsys.readouterr().out
    assert "In-between uncertainty" in out
    note = out[out.index("In-between uncertainty"):out.index("Options (--option")].splitlines()
    spec = pyro_bdl.get_model("bnn-regressor")
    for method, entry in IN_BETWEEN.items():
        line = next(line for line in note if line.split()[:1] == [method])
        args = build_parser().parse_args(["fit", "bnn-regressor", "--out", "x", *line.split()[1:]])
        assert spec.resolve_options(parse_key_values(args.option)) == spec.resolve_options(entry["options"])
        runner = get_method(method)
        assert runner.resolve_settings(parse_key_values(args.set, "--set")) == runner.resolve_settings(entry["settings"])


@pytest.mark.slow
def test_fit_and_predict_end_to_end(tmp_path):
    """A real subprocess through the installed console script: fit with NUTS on a CSV, then predict."""
    df = _regression_csv(tmp_path / "train.csv")
    out = tmp_path / "run"
    proc = run_cli("fit", "blr", "--inference", "nuts", "--data", "train.csv", "--target", "target",
                   "--out", out, "--seed", "3", "--samples", "300", "--warmup", "200", "--option", "prior_scale=2",
                   "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "wrote posterior.nc" in proc.stdout
    for name in ("posterior.nc", "summary.csv", "metrics.json", "trace.png", "posterior.png"):
        assert (out / name).stat().st_size > 0, name
    idata = az.from_netcdf(str(out / "posterior.nc"))
    assert {"posterior", "posterior_predictive", "log_likelihood", "observed_data", "sample_stats"} <= set(idata.groups())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "blr" and metrics["method"] == "nuts" and metrics["seed"] == 3
    assert metrics["options"]["prior_scale"] == 2.0
    assert metrics["max_r_hat"] < 1.05 and metrics["min_ess_bulk"] > 50 and metrics["divergences"] == 0
    assert metrics["wall_seconds"] > 0
    summary = pd.read_csv(out / "summary.csv", index_col=0)
    assert {"w[0]", "w[1]", "b", "sigma"} <= set(summary.index)
    assert abs(summary.loc["w[0]", "mean"] - 2.0) < 0.3

    df.drop(columns="target").head(7).to_csv(tmp_path / "new.csv", index=False)
    proc = run_cli("predict", out, "--data", "new.csv", "--out", "pred.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert list(pred.columns[:2]) == ["mean", "sd"] and {"lower", "upper"} <= set(pred.columns)
    assert len(pred) == 7
    assert (pred["lower"] < pred["mean"]).all() and (pred["mean"] < pred["upper"]).all()
    truth = 2.0 * df["a"].head(7) - df["b"].head(7)
    assert (np.abs(pred["mean"] - truth) < 4 * pred["sd"]).all()


@pytest.mark.slow
@pytest.mark.parametrize("method,plot", [("svi", "loss.png"), ("map", "loss.png"), ("importance", "trace.png")])
def test_fit_coin_writes_method_specific_files(method, plot, tmp_path, capsys):
    out = tmp_path / method
    assert main(["fit", "coin", "--inference", method, "--out", str(out), "--no-progress", "--steps", "500"]
                if method != "importance" else
                ["fit", "coin", "--inference", method, "--out", str(out), "--no-progress"]) == 0
    assert (out / plot).exists() and (out / "posterior.png").exists()
    metrics = json.loads((out / "metrics.json").read_text())
    heads = float(pyro_bdl.load("coin").y.sum())
    assert metrics["p_next_heads_exact"] == pytest.approx((1 + heads) / (2 + 30))  # Laplace's rule, 30 tosses
    assert metrics["point_estimate"] == (method == "map")
    (tmp_path / "rows.csv").write_text("y\n0\n1\n")
    assert main(["predict", str(out), "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    pred = pd.read_csv(tmp_path / "p.csv")
    assert len(pred) == 2 and np.allclose(pred["mean"], pred["mean"][0])  # the same coin for every row


def test_a_gp_fits_from_a_file_and_predicts_new_rows(tmp_path):
    """The exact GP through the CLI as a user runs it: a CSV of their own, map, then predict on new rows, the
    epistemic sd larger far from the data than inside it."""
    x = np.linspace(-1.0, 1.0, 25)
    y = np.sin(3.0 * x) + 0.1 * np.random.default_rng(0).standard_normal(25)
    pd.DataFrame({"x": x, "y": y}).to_csv(tmp_path / "train.csv", index=False)
    out = tmp_path / "gp"
    assert main(["fit", "gp", "--data", str(tmp_path / "train.csv"), "--target", "y", "--inference", "map",
                 "--steps", "500", "--lr", "0.05", "--option", "kernel=matern52", "--out", str(out), "--no-progress",
                 "--no-plots"]) == 0
    pd.DataFrame({"x": [0.0, 3.0]}).to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", str(out), "--data", str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    pred = pd.read_csv(tmp_path / "p.csv")
    assert pred["epistemic_sd"][1] > 3 * pred["epistemic_sd"][0]
    assert abs(pred["mean"][0] - np.sin(0.0)) < 4 * pred["sd"][0]


def test_a_gp_classifier_fits_from_a_file_and_predicts_probabilities(tmp_path):
    """GP classification through the CLI: a CSV of two classes split by x = 0, svi with minibatches, then predict:
    each side's class, the probabilities summing to one."""
    x = np.random.default_rng(0).uniform(-2, 2, 80)
    pd.DataFrame({"x": x, "label": (x > 0).astype(int)}).to_csv(tmp_path / "train.csv", index=False)
    out = tmp_path / "gpc"
    assert main(["fit", "gp-classifier", "--data", str(tmp_path / "train.csv"), "--target", "label", "--inference",
                 "svi", "--steps", "600", "--lr", "0.05", "--batch-size", "40", "--set", "samples=50", "--option",
                 "inducing=10", "--out", str(out), "--no-progress", "--no-plots"]) == 0
    pd.DataFrame({"x": [-1.5, 1.5]}).to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", str(out), "--data", str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    pred = pd.read_csv(tmp_path / "p.csv")
    assert pred["pred"].tolist() == [0, 1] and np.allclose(pred["prob_0"] + pred["prob_1"], 1.0, atol=1e-5)


@pytest.mark.slow
def test_load_fit_round_trip(tmp_path):
    result = pyro_bdl.fit("blr", inference="map", progress=False, steps=1500)
    pyro_bdl.store.write_fit(result, tmp_path / "fit")
    back = pyro_bdl.load_fit(tmp_path / "fit")
    X = result.data["X"][:5]
    pd.testing.assert_frame_equal(result.predict(X)[["mean"]], back.predict(X)[["mean"]], atol=1e-5)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


BAD_INPUTS = {
    "nan": (["fit", "blr", "--target", "y"], "x,y\n1,2\n2,\n3,4\n", "column 'y' has 1 NaN/missing/infinite value(s) at data row(s) 2"),
    "missing target": (["fit", "blr", "--target", "price"], "x,y\n1,2\n2,3\n", "target column 'price' not found"),
    "non-binary coin": (["fit", "coin", "--target", "y"], "y\n0\n1\n2\n", "must hold only 0 and 1; found 2"),
    "empty file": (["fit", "blr", "--target", "y"], "", "the file is empty"),
    "header only": (["fit", "blr", "--target", "y"], "x,y\n", "has no data rows"),
    "text column": (["fit", "blr", "--target", "y"], "x,y\n1,2\nabc,3\n", "column 'x' is not numeric"),
    "unknown model": (["fit", "gpr", "--target", "y"], "x,y\n1,2\n", "unknown model 'gpr'"),
    "unknown method": (["fit", "blr", "--target", "y", "--inference", "vi"], "x,y\n1,2\n", "unknown inference method 'vi'"),
    "unknown option": (["fit", "blr", "--target", "y", "--option", "width=3"], "x,y\n1,2\n", "unknown option 'width'"),
    "bad option value": (["fit", "blr", "--target", "y", "--option", "prior_scale=big"], "x,y\n1,2\n", "prior_scale='big'"),
    "unsupported method": (["fit", "blr", "--target", "y", "--guide", "mvn", "--inference", "nuts"], "x,y\n1,2\n", "takes no guide"),
    "bad setting value": (["fit", "blr", "--target", "y", "--inference", "map", "--set", "steps=many"], "x,y\n1,2\n",
                          "setting 'steps' of inference 'map' must be a number, got 'many'"),
    "setting out of its domain": (["fit", "blr", "--target", "y", "--inference", "map", "--steps", "0"], "x,y\n1,2\n",
                                  "setting 'steps' of inference 'map' must be a whole number >= 1, got 0"),
    "minibatch on a model without": (["fit", "blr", "--target", "y", "--inference", "map", "--batch-size", "1"],
                                     "x,y\n1,2\n", "model 'blr' does not take minibatches"),
    "setting without value": (["fit", "blr", "--target", "y", "--set", "steps"], "x,y\n1,2\n",
                              "--set takes KEY=VALUE, got 'steps'"),
    "option without key": (["fit", "blr", "--target", "y", "--option", "=2"], "x,y\n1,2\n",
                           "--option takes KEY=VALUE, got '=2'"),
    "unknown kernel": (["fit", "gp", "--target", "y", "--option", "kernel=rbf+squiggle"], "x,y\n1,2\n",
                       "unknown kernel 'squiggle'"),
    "non-positive fixed hyperparameter": (["fit", "gp", "--target", "y", "--option", "fixed=lengthscale=0"],
                                          "x,y\n1,2\n", "'lengthscale' must be positive and finite"),
    "unknown gp approximation": (["fit", "gp", "--target", "y", "--option", "approximation=fitc"], "x,y\n1,2\n",
                                 "approximation must be one of exact, collapsed, svgp"),
    "gp minibatch without svgp": (["fit", "gp", "--target", "y", "--inference", "svi", "--batch-size", "1",
                                   "--option", "approximation=exact"], "x,y\n1,2\n3,4\n",
                                  "batch_size (minibatches) needs approximation=svgp"),
    "gp classifier labels out of range": (["fit", "gp-classifier", "--target", "y"], "x,y\n1,0\n2,-1\n",
                                          "class labels in 'y' must be integers 0, 1"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_exits_nonzero_and_writes_nothing(case, tmp_path, capsys):
    args, text, message = BAD_INPUTS[case]
    csv = _write(tmp_path / "data.csv", text)
    out = tmp_path / "out"
    code = main([*args, "--data", str(csv), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err, err
    assert not (out / "posterior.nc").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["data.csv"]  # no output dir, no partial files


def test_missing_data_file_and_bad_predict_inputs(tmp_path, capsys):
    assert main(["fit", "blr", "--data", str(tmp_path / "nope.csv"), "--target", "y", "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["predict", str(tmp_path), "--data", "x.csv", "--out", str(tmp_path / "p.csv")]) == 2
    assert "no posterior.nc" in capsys.readouterr().err
    fit_dir = tmp_path / "fit"
    assert main(["fit", "blr", "--inference", "map", "--steps", "50", "--out", str(fit_dir), "--no-progress",
                 "--no-plots"]) == 0
    assert "posterior.nc" in capsys.readouterr().out and not list(fit_dir.glob("*.png"))  # the records, no figures
    bad = _write(tmp_path / "new.csv", "x1,x2\n1,2\n")
    assert main(["predict", str(fit_dir), "--data", str(bad), "--out", str(tmp_path / "p.csv")]) == 2
    assert "feature column(s) 'x3' not found" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.slow
def test_unknown_command_exits_nonzero(tmp_path):
    proc = run_cli("frobnicate", cwd=tmp_path)
    assert proc.returncode != 0 and "invalid choice" in proc.stderr


@pytest.mark.slow
def test_network_fit_holds_out_data_and_plots(tmp_path, capsys):
    out = tmp_path / "reg"
    assert main(["fit", "bnn-regressor", "--inference", "map", "--steps", "1500", "--out", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    held = metrics["heldout"]
    assert held["fraction"] == 0.2 and held["test_rows"] == 40  # 20% of the 200 sine points
    assert held["rmse"] < 0.1 and 0.7 <= held["coverage_94"] <= 1.0
    assert (out / "predictive.png").exists()
    out = tmp_path / "cls"
    assert main(["fit", "bnn-classifier", "--inference", "ensemble", "--set", "members=2", "--steps", "200",
                 "--option", "hidden=16", "--out", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["members"] == 2 and metrics["heldout"]["accuracy"] > 0.85
    assert (out / "reliability.png").exists()
    rows = pyro_bdl.data.embedded.digits_split()[1].to_frame().drop(columns="target").head(5)
    rows.to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", str(out), "--data", str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    pred = pd.read_csv(tmp_path / "p.csv")
    # the columns, plus expected_entropy (aleatoric: entropy = expected_entropy + mutual_info)
    assert list(pred.columns) == [f"prob_{c}" for c in range(10)] + ["pred", "entropy", "expected_entropy", "mutual_info"]
    np.testing.assert_allclose(pred["entropy"], pred["expected_entropy"] + pred["mutual_info"], atol=1e-5)
    assert np.allclose(pred[[f"prob_{c}" for c in range(10)]].sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("args", [("fit", "coin", "--inference", "map", "--steps", "20", "--out", "fit", "--no-progress")])
def test_cli_shows_no_arviz_notice(tmp_path, args):
    """ArviZ 0.2x prints a multi-line FutureWarning on its first import of the day (stamped in the user's
    cache): a fresh cache directory makes it due, and the CLI must not show it.  (``list`` and ``describe`` do not
    import ArviZ at all: tests/test_layout.py.)"""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([CLI, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cache" / "arviz" / "daily_warning").exists()  # ArviZ did reach its notice
    assert "FutureWarning" not in done.stderr and "ArviZ is undergoing" not in done.stderr, done.stderr
    assert done.stdout.strip()


def test_a_reader_that_goes_away_ends_the_command_quietly(monkeypatch):
    """`pyro-bdl describe blr | head -2`: the closed pipe ends the command with status 141, not a traceback."""
    import io

    class ClosedPipe(io.TextIOBase):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["describe", "blr"]) == 141
