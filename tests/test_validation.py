"""Bad input the tool must refuse cleanly (exit 2, a message naming the file or option, nothing written):
output paths, damaged fit directories, option domains, malformed CSV files, constant columns, an --out
directory that already holds a fit (issue 19)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pyro_bdl
from pyro_bdl.cli import main
from pyro_bdl.data.checks import DataWarning
from pyro_bdl.data.table import DataError, load_csv
from pyro_bdl.storage.paths import FitDirectoryError

MAP = ["--inference", "map", "--steps", "30", "--no-progress"]


def _csv(path: Path, n=30, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    df["y"] = df["a"] - df["b"] + 0.3 * rng.normal(size=n)
    df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A blr map fit directory and the CSV it was fitted on (reused read-only; copy it to damage it)."""
    root = tmp_path_factory.mktemp("fitted")
    data = _csv(root / "good.csv")
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(root / "fit"), *MAP]) == 0
    return root / "fit", data


def _listing(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------- (1) the --out path

def test_out_an_existing_file_is_refused(tmp_path, capsys):
    data, afile = _csv(tmp_path / "good.csv"), tmp_path / "afile"
    afile.write_text("keep me")
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(afile), *MAP]) == 2
    assert f"--out {afile}: is an existing file, not a directory" in capsys.readouterr().err
    assert afile.read_text() == "keep me"


def test_out_under_a_file_is_refused(tmp_path, capsys):
    data, afile = _csv(tmp_path / "good.csv"), tmp_path / "afile"
    afile.write_text("")
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(afile / "sub" / "out"), *MAP]) == 2
    assert f"{afile} is a file, so nothing can be created under it" in capsys.readouterr().err
    assert main(["predict", "whatever", "--data", str(data), "--out", str(afile / "p.csv")]) == 2
    assert f"{afile} is a file" in capsys.readouterr().err


def test_out_in_a_directory_without_write_permission_is_refused(tmp_path, capsys, monkeypatch):
    data, locked = _csv(tmp_path / "good.csv"), tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: stand in for the permission check the OS would make
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    try:
        assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(locked / "out"), *MAP]) == 2
        assert f"--out {locked / 'out'}: no permission to write in {locked}" in capsys.readouterr().err
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_predict_out_a_directory_is_refused(tmp_path, fitted, capsys):
    fit_dir, data = fitted
    assert main(["predict", str(fit_dir), "--data", str(data), "--out", str(tmp_path)]) == 2
    assert "is a directory; give a file name" in capsys.readouterr().err


# ---------------------------------------------------------------- (2) damaged fit directories

def _damage(kind: str, path: Path) -> None:
    raw = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(max(len(raw), 64)))
    elif kind == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("name", ["posterior.nc", "metrics.json"])
@pytest.mark.parametrize("kind", ["truncated", "garbage", "empty"])
def test_damaged_fit_file_is_refused_naming_it(name, kind, tmp_path, fitted, capsys):
    import shutil

    fit_dir = tmp_path / "fit"
    shutil.copytree(fitted[0], fit_dir)
    _damage(kind, fit_dir / name)
    out = tmp_path / "p.csv"
    assert main(["predict", str(fit_dir), "--data", str(fitted[1]), "--out", str(out)]) == 2
    assert str(fit_dir / name) in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(FitDirectoryError, match=str(fit_dir / name)):
        pyro_bdl.load_fit(fit_dir)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "pickle"])
def test_damaged_params_file_is_refused_naming_it(kind, tmp_path, fitted):
    import shutil

    fit_dir = tmp_path / "fit"
    shutil.copytree(fitted[0], fit_dir)
    params = fit_dir / "params.pt"
    if kind == "pickle":  # a pickled object is never loaded (weights_only=True)
        import pickle

        params.write_bytes(pickle.dumps({"w": object()}))
    else:
        import torch

        torch.save({"w": torch.ones(3)}, params)
        _damage(kind, params)
    with pytest.raises(FitDirectoryError, match=str(params)):
        pyro_bdl.load_fit(fit_dir)


def test_edited_netcdf_attributes_are_refused(tmp_path, fitted):
    import arviz as az

    idata = az.from_netcdf(str(fitted[0] / "posterior.nc"))
    idata.posterior.attrs["options"] = "{not json"
    (tmp_path / "fit").mkdir()
    idata.to_netcdf(str(tmp_path / "fit" / "posterior.nc"))
    with pytest.raises(FitDirectoryError, match="posterior.nc: damaged or edited"):
        pyro_bdl.load_fit(tmp_path / "fit")


# ---------------------------------------------------------------- (3) option domains

@pytest.mark.parametrize("model, option, message", [
    ("blr", "prior_scale=-1", "option 'prior_scale' of model 'blr' must be a finite number > 0, got '-1'"),
    ("blr", "noise=0", "option 'noise' of model 'blr' must be a finite number > 0, got '0'"),
    ("blr", "noise=inf", "option 'noise' of model 'blr' must be a finite number > 0, got 'inf'"),
    ("coin", "alpha=0", "option 'alpha' of model 'coin' must be a finite number > 0, got '0'"),
    ("bnn-regressor", "prior_scale=nan", "option 'prior_scale' of model 'bnn-regressor' must be a number, got 'nan'"),
    ("bnn-classifier", "num_classes=1", "option 'num_classes' of model 'bnn-classifier' must be a whole number >= 2"),
    ("last-layer", "feature_scale=-2", "option 'feature_scale' of model 'last-layer' must be a finite number > 0"),
    ("last-layer", "noise=0", "option 'noise' of model 'last-layer' must be a finite number > 0"),
])
def test_option_outside_its_domain_is_refused_before_any_work(model, option, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["fit", model, "--option", option, "--out", str(out), *MAP]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_options_in_their_domain_still_work():
    spec = pyro_bdl.get_model("blr")
    assert spec.resolve_options({"prior_scale": "2", "noise": "none"}) == {"prior_scale": 2.0, "noise": None}


# ---------------------------------------------------------------- (4) malformed CSV files

BAD_CSV = {
    "duplicate header": (b"x0,x0,y\n1,2,3\n4,5,6\n", "the header repeats the column name 'x0' (columns 1 and 2)"),
    "empty header name": (b"x0,,y\n1,2,3\n4,5,6\n", "the header has an empty column name (column 2)"),
    "blank-padded duplicate": (b"x0, x0,y\n1,2,3\n4,5,6\n", "repeats the column name 'x0'"),
    "short row": (b"x0,x1,y\n1,2,3\n4,5\n", "line 3 has 2 field(s); the header has 3"),
    "long row": (b"x0,x1,y\n1,2,3\n4,5,6,7\n", "line 3 has 4 field(s); the header has 3"),
    "semicolons": (b"x0;y\n1;2\n3;4\n", "holding semicolons; pyro-bdl reads comma-separated files"),
    "tabs": (b"x0\ty\n1\t2\n3\t4\n", "holding tabs"),
    "latin-1": ("x\u00e9,y\n1,2\n3,4\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 at line 1)"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text"),
    "nul bytes": (b"x,y\n1,\x002\n", "holds NUL bytes"),
}


@pytest.mark.parametrize("case", BAD_CSV)
def test_malformed_csv_is_refused_naming_the_file(case, tmp_path, capsys):
    raw, message = BAD_CSV[case]
    path = tmp_path / "bad.csv"
    path.write_bytes(raw)
    with pytest.raises(DataError, match=None) as info:
        load_csv(path, target="y")
    assert str(path) in str(info.value) and message in str(info.value), str(info.value)
    out = tmp_path / "out"
    assert main(["fit", "blr", "--data", str(path), "--target", "y", "--out", str(out), *MAP]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_byte_order_mark_is_accepted_and_dropped(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfx,y\n1,2\n3,4\n")
    ds = load_csv(path, target="y")
    assert ds.feature_names == ["x"] and ds.target_name == "y"


def test_quoted_commas_and_blank_lines_still_read(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text('"a,b",y\n1,2\n\n3,4\n')
    ds = load_csv(path, target="y")
    assert ds.feature_names == ["a,b"] and len(ds) == 2


# ---------------------------------------------------------------- (5) constant columns

@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # 20-step fits: the data warnings are tested
def test_constant_target_warns(tmp_path):
    path = tmp_path / "const.csv"
    pd.DataFrame({"x": np.linspace(0, 1, 20), "y": 2.0}).to_csv(path, index=False)
    with pytest.warns(DataWarning, match="the target 'y' is constant"):
        pyro_bdl.fit("blr", str(path), inference="map", target="y", steps=20, progress=False)


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # 20-step fits: the data warnings are tested
def test_all_heads_is_a_fair_coin_experiment_and_does_not_warn():
    """A constant target is a warning for a regression only: all heads is what notebook 01 fits on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        pyro_bdl.fit("coin", "coin-few", inference="map", steps=20, progress=False)


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # 20-step fits: the data warnings are tested
def test_constant_feature_warns_and_the_cli_prints_it(tmp_path, capsys):
    path = tmp_path / "constfeat.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"x": rng.normal(size=20), "c": 1.0, "y": rng.normal(size=20)}).to_csv(path, index=False)
    with pytest.warns(DataWarning, match="feature column\\(s\\) 'c' are constant"):
        pyro_bdl.fit("blr", str(path), inference="map", target="y", steps=20, progress=False)
    assert main(["fit", "blr", "--data", str(path), "--target", "y", "--out", str(tmp_path / "o"), *MAP]) == 0
    assert "warning: " in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # 20-step fits: the data warnings are tested
def test_varied_data_gives_no_data_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        pyro_bdl.fit("blr", str(_csv(tmp_path / "g.csv")), inference="map", target="y", steps=20, progress=False)


# ---------------------------------------------------------------- (7) an --out directory that holds a fit

@pytest.mark.slow
def test_existing_fit_is_refused_without_force(tmp_path, capsys):
    data, out = _csv(tmp_path / "good.csv"), tmp_path / "fit"
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(out), *MAP]) == 0
    before = (out / "posterior.nc").read_bytes()
    capsys.readouterr()
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(out), *MAP, "--seed", "1"]) == 2
    assert f"--out {out}: already holds a fit (posterior.nc, metrics.json)" in capsys.readouterr().err
    assert (out / "posterior.nc").read_bytes() == before
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(out), *MAP, "--seed", "1",
                 "--force"]) == 0
    assert json.loads((out / "metrics.json").read_text())["seed"] == 1
    assert (out / "loss.png").exists()
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(out), "--inference", "nuts",
                 "--samples", "20", "--warmup", "20", "--chains", "1", "--no-progress", "--force"]) == 0
    assert (out / "trace.png").exists() and not (out / "loss.png").exists()  # the replaced fit's files are gone


def test_a_value_beyond_float32_is_refused_not_made_infinite(tmp_path):
    path = tmp_path / "huge.csv"
    path.write_text("x,y\n1,2\n1e39,3\n")
    with pytest.raises(DataError, match="column 'x' holds .* at data row 2, beyond the largest float32"):
        load_csv(path, target="y")


def test_a_damaged_checkpoint_is_refused_naming_it(tmp_path, capsys):
    data, out = _csv(tmp_path / "good.csv"), tmp_path / "out"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"\x00garbage")
    assert main(["fit", "blr", "--data", str(data), "--target", "y", "--out", str(out), *MAP]) == 2
    assert f"{out / 'checkpoint.pt'}: not a readable checkpoint" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")  # 50-step fits: what data they saw is tested
def test_a_zoo_models_data_as_a_dict_is_a_data_set_checked_standardised_and_deciding_options():
    """{"X": X, "y": y} for a zoo model fits as the same data as a Dataset: the number of classes inferred from
    the labels, standardised inputs (the same fit), labels checked; wrong names and shapes refused by name."""
    import torch

    g = torch.Generator().manual_seed(0)
    X = 5.0 + 3.0 * torch.randn(40, 2, generator=g)
    y = (X[:, 0] > 5.0).long() + (X[:, 1] > 5.0).long()  # three classes
    settings = {"inference": "map", "options": {"hidden": [4]}, "steps": 50, "progress": False, "seed": 1}
    as_dict = pyro_bdl.fit("bnn-classifier", {"X": X, "y": y}, **settings)
    as_dataset = pyro_bdl.fit("bnn-classifier", pyro_bdl.Dataset("data", X, y, ["x0", "x1"], "y"), **settings)
    probs = as_dict.predict({"X": X[:3]})
    assert probs.shape[0] == 3
    for site in as_dataset.samples:
        assert torch.equal(as_dict.draws(site), as_dataset.draws(site))
    with pytest.raises(DataError, match="label"):
        pyro_bdl.fit("bnn-classifier", {"X": X, "y": y - 1}, **settings)
    with pytest.raises(ValueError, match=r"takes its data as \['X', 'y'\].*\['X', 'target'\]"):
        pyro_bdl.fit("blr", {"X": X, "target": y.float()}, inference="map", progress=False)
    with pytest.raises(DataError, match="'X' must be \\(rows, features\\)"):
        pyro_bdl.fit("blr", {"X": X[:, 0], "y": y.float()}, inference="map", progress=False)
    with pytest.raises(DataError, match="'y' must be one value per row"):
        pyro_bdl.fit("blr", {"X": X, "y": y[:10].float()}, inference="map", progress=False)
    with pytest.raises(DataError, match="argument 'X' must be an array of numbers, got str"):
        pyro_bdl.fit("blr", {"X": "abc", "y": y.float()}, inference="map", progress=False)
    with pytest.raises(DataError, match="argument 'y' must be an array of numbers, got list"):
        pyro_bdl.fit("blr", {"X": X, "y": ["a"] * len(X)}, inference="map", progress=False)
    flips = torch.tensor([1.0, 0.0, 1.0, 1.0])  # a model with no features: the dict is its target alone
    coin = pyro_bdl.fit("coin", {"y": flips}, inference="map", progress=False, steps=200)
    same = pyro_bdl.fit("coin", pyro_bdl.Dataset("flips", torch.zeros(4, 0), flips, [], "y"), inference="map",
                        progress=False, steps=200)
    assert torch.equal(coin.draws("pi"), same.draws("pi"))
