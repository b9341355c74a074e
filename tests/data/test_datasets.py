"""The BNN data sets: Standardizer, sine with a gap, digits (split and OOD), the UCI benchmark loader.

The UCI tests build a tiny benchmark folder in tmp_path; they never read the real data.
"""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pytest
import torch
from support.toy_uci import DATA, SPLITS, write_uci

import pyro_bdl.data.embedded
from pyro_bdl.data.embedded import DIGITS_OOD_KINDS, EMBEDDED, SINE_GAP, digits_ood, digits_split, load, sine_grid
from pyro_bdl.data.table import DataError, Dataset
from pyro_bdl.data.transforms import Standardizer
from pyro_bdl.data.uci import load_uci, uci_splits


def test_module_examples_run():
    result = doctest.testmod(pyro_bdl.data.embedded, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------- Standardizer


def test_standardizer_round_trip_and_units():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=g) * torch.tensor([1.0, 10.0, 0.1]) + torch.tensor([5.0, -2.0, 0.0])
    y = 3.0 * torch.randn(50, generator=g) + 7.0
    s = Standardizer.fit(X, y)
    Z = s.transform_X(X)
    assert Z.shape == X.shape and Z.dtype == X.dtype
    assert torch.allclose(Z.mean(0), torch.zeros(3), atol=1e-5)
    assert torch.allclose(Z.std(0, unbiased=False), torch.ones(3), atol=1e-5)
    z = s.transform_y(y)
    assert torch.allclose(s.inverse_y_mean(z), y, atol=1e-5)
    assert torch.allclose(s.inverse_y_sd(torch.tensor([1.0, 2.0])), torch.tensor([1.0, 2.0]) * s.y_sd)
    # a Normal log density in standardised units + shift = the one in original units
    m, sd = torch.tensor(0.3), torch.tensor(0.5)
    lp_std = torch.distributions.Normal(m, sd).log_prob(z)
    lp_orig = torch.distributions.Normal(s.inverse_y_mean(m), s.inverse_y_sd(sd)).log_prob(y)
    assert s.log_density_shift() == pytest.approx(-math.log(s.y_sd))
    assert torch.allclose(lp_std + s.log_density_shift(), lp_orig, atol=1e-4)


def test_standardizer_dict_is_plain_json_and_round_trips():
    s = Standardizer.fit(torch.tensor([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]]), torch.tensor([1.0, 2.0, 4.0]))
    d = s.to_dict()
    back = Standardizer.from_dict(json.loads(json.dumps(d)))
    assert back == s and isinstance(d["x_mean"], list) and isinstance(d["y_sd"], float)
    no_y = Standardizer.fit(torch.ones(4, 2))
    assert Standardizer.from_dict(json.loads(json.dumps(no_y.to_dict()))) == no_y
    with pytest.raises(DataError, match="equal length"):
        Standardizer.from_dict({"x_mean": [0.0, 1.0], "x_sd": [1.0]})


def test_standardizer_constant_columns_get_sd_one():
    # naval-like: a constant column (whose float32 mean is not exact) next to a varying one
    X = torch.tensor([[288.0, 0.1], [288.0, 0.2], [288.0, 0.7]] * 7)
    s = Standardizer.fit(X, torch.full((21,), 0.95))
    assert s.x_sd[0].item() == 1.0 and s.y_sd == 1.0
    Z = s.transform_X(X)
    assert torch.isfinite(Z).all() and torch.allclose(Z[:, 0], torch.zeros(21), atol=1e-4)
    assert s.log_density_shift() == 0.0


def test_standardizer_without_y_and_shape_errors():
    s = Standardizer.fit(torch.randn(5, 2))
    assert s.y_mean is None and s.y_sd is None
    with pytest.raises(DataError, match="fitted without a target"):
        s.transform_y(torch.zeros(3))
    with pytest.raises(DataError, match="X has 3 column"):
        s.transform_X(torch.zeros(4, 3))
    with pytest.raises(DataError, match=r"shape \(n, d\)"):
        Standardizer.fit(torch.zeros(4))
    with pytest.raises(DataError, match=r"y must have shape \(5,\)"):
        Standardizer.fit(torch.zeros(5, 2), torch.zeros(4))
    with pytest.raises(DataError, match="NaN"):
        Standardizer.fit(torch.tensor([[1.0], [math.nan]]))


# --------------------------------------------------------------------------- sine


def test_sine_has_a_gap_and_the_grid_goes_beyond_the_data():
    ds = load("sine")
    assert ds.X.shape == (200, 1) and ds.y.shape == (200,) and ds.feature_names == ["x"] and ds.target_name == "y"
    x = ds.X[:, 0]
    lo, hi = SINE_GAP
    assert not ((x > lo) & (x < hi)).any()
    assert (x < lo).sum() > 50 and (x > hi).sum() > 50  # both clusters are populated
    grid = sine_grid()
    assert grid.shape == (200, 1) and sine_grid(7).shape == (7, 1)
    assert grid.min() < x.min() and grid.max() > x.max()
    assert ((grid > lo) & (grid < hi)).sum() >= 5  # the grid does look into the gap
    assert torch.equal(load("sine").y, ds.y)  # fixed seed
    with pytest.raises(ValueError, match="n >= 2"):
        sine_grid(1)


# --------------------------------------------------------------------------- digits


def test_digits_table():
    ds = load("digits")
    assert ds.X.shape == (1797, 64) and ds.target_name == "target" == EMBEDDED["digits"].target
    names = ds.feature_names
    assert names[0] == "pixel_0_0" and names[9] == "pixel_1_1" and names[-1] == "pixel_7_7"
    assert ds.feature_names == [f"pixel_{r}_{c}" for r in range(8) for c in range(8)]
    assert sorted(torch.unique(ds.y).tolist()) == list(range(10))
    assert ds.X.min() == 0 and ds.X.max() == 16
    assert "digits_split" in EMBEDDED["digits"].doc


def test_digits_split_is_stratified_and_fixed():
    train, test = digits_split()
    assert (len(train), len(test)) == (1347, 450) and train.X.shape[1] == test.X.shape[1] == 64
    assert train.feature_names == test.feature_names == load("digits").feature_names
    full = load("digits")
    counts = torch.bincount(full.y.long(), minlength=10).double()
    for part in (train, test):
        c = torch.bincount(part.y.long(), minlength=10).double()
        assert (c > 0).all()
        assert torch.allclose(c / c.sum(), counts / counts.sum(), atol=0.01)
    # together they are the whole data set, each row once
    together = torch.cat([train.X, test.X])
    assert together.shape == full.X.shape
    assert torch.equal(together.sum(0), full.X.sum(0))
    again_train, again_test = digits_split()
    assert torch.equal(again_test.X, test.X) and torch.equal(again_train.y, train.y)
    _, other = digits_split(seed=1)
    assert not torch.equal(other.X, test.X)
    assert len(digits_split(test_fraction=0.5)[1]) in (898, 899)
    with pytest.raises(ValueError, match="between 0 and 1"):
        digits_split(test_fraction=1.0)


@pytest.mark.parametrize("kind", DIGITS_OOD_KINDS)
def test_digits_ood_shapes_and_range(kind):
    _, test = digits_split()
    ood = digits_ood(test, kind)
    assert ood.X.shape == test.X.shape and ood.y is None and ood.feature_names == test.feature_names
    assert ood.X.min() >= 0 and ood.X.max() <= 16
    assert not torch.equal(ood.X, test.X)
    assert torch.equal(digits_ood(test, kind).X, ood.X)  # deterministic


def test_digits_ood_transforms():
    _, test = digits_split()
    img = test.X[0].reshape(8, 8)
    rot = digits_ood(test, "rotated").X[0].reshape(8, 8)
    assert torch.equal(rot, torch.rot90(img, 1, (0, 1)))
    assert torch.equal(digits_ood(test, "inverted").X, 16 - test.X)
    noise = digits_ood(test, "noise").X
    assert torch.equal(noise, noise.round()) and len(torch.unique(noise)) == 17
    with pytest.raises(ValueError, match="rotated, noise, inverted"):
        digits_ood(test, "blurred")


# --------------------------------------------------------------------------- UCI loader (a toy folder: tests/toy_uci.py)

def test_uci_loader_selects_rows_and_target(tmp_path):
    folder = write_uci(tmp_path / "toy")
    assert uci_splits(folder) == 2
    train, test = load_uci(folder, 1)
    assert train.X.shape == (7, 3) and train.y.shape == (7,) and test.X.shape == (3, 3) and test.y.shape == (3,)
    assert train.feature_names == ["x0", "x1", "x2"] and train.target_name == test.target_name == "y"
    assert train.X.dtype == torch.float32 and train.y.dtype == torch.float32
    rows = SPLITS[1][0]
    assert torch.equal(train.X, torch.tensor(DATA[rows][:, :3], dtype=torch.float32))  # original units, in order
    assert train.y.tolist() == [-float(r) for r in rows]  # column 4, not 3
    assert test.y.tolist() == [0.0, -1.0, -2.0]
    train0, test0 = load_uci(str(folder))
    assert test0.X[:, 0].tolist() == [7.0, 8.0, 9.0]
    # constant column 1 standardises without dividing by zero
    s = Standardizer.fit(train.X, train.y)
    assert s.x_sd[1].item() == 1.0 and torch.isfinite(s.transform_X(test.X)).all()


def test_uci_feature_order_and_other_target(tmp_path):
    folder = write_uci(tmp_path / "toy", features="2\n0", target="3")
    train, _ = load_uci(folder, 0)
    assert train.feature_names == ["x0", "x1"]
    assert train.X[:, 0].tolist() == [r**2 for r in range(7)] and train.X[:, 1].tolist() == list(range(7))
    assert train.y.tolist() == [100.0 + r for r in range(7)]


def test_uci_splits_counted_without_n_splits_file(tmp_path):
    folder = write_uci(tmp_path / "toy", n_splits=False)
    assert uci_splits(folder) == 2
    with pytest.raises(DataError, match=r"split 2 out of range; there are 2 splits \(0\.\.1\)"):
        load_uci(folder, 2)


@pytest.mark.parametrize("split", [2, 5, -1])
def test_uci_split_out_of_range(tmp_path, split):
    folder = write_uci(tmp_path / "toy")
    with pytest.raises(DataError, match=f"split {split} out of range; there are 2 splits"):
        load_uci(folder, split)


def test_uci_missing_folder(tmp_path):
    with pytest.raises(DataError, match="no such folder"):
        load_uci(tmp_path / "nowhere")
    with pytest.raises(DataError, match="no such folder"):
        uci_splits(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no splits"):
        load_uci(tmp_path / "empty")


@pytest.mark.parametrize(
    "name", ["data.txt", "index_features.txt", "index_target.txt", "index_train_1.txt", "index_test_1.txt"]
)
def test_uci_missing_file_is_named(tmp_path, name):
    folder = write_uci(tmp_path / "toy")
    (folder / name).unlink()
    with pytest.raises(DataError, match=f"missing file {name}"):
        load_uci(folder, 1)


@pytest.mark.parametrize("kwargs,file,message", [
    ({"features": "0 1 5"}, "index_features.txt", r"1 column index\(es\) out of range \(5\); data.txt has 5 columns"),
    ({"target": "-1"}, "index_target.txt", r"column index\(es\) out of range \(-1\)"),
    ({"target": "3 4"}, "index_target.txt", "holds 2 indices; expected exactly one target column"),
    ({"target": ""}, "index_target.txt", "holds no indices"),
    ({"features": "0 4"}, "index_features.txt", "lists the target column 4 as a feature"),
    ({"features": "0 x"}, "index_features.txt", "'x' is not an integer index"),
    ({"splits": {0: ([0, 1, 10, 12], [2, 3])}}, "index_train_0.txt",
     r"2 row index\(es\) out of range \(10, 12\); data.txt has 10 rows \(valid: 0\.\.9\)"),
    ({"splits": {0: ([0, 1, 2], [2, 3])}}, None, r"split 0 puts 1 row\(s\) in both train and test \(2\)"),
])
def test_uci_bad_indices(tmp_path, kwargs, file, message):
    folder = write_uci(tmp_path / "toy", **kwargs)
    with pytest.raises(DataError, match=message) as info:
        load_uci(folder, 0)
    if file is not None:
        assert file in str(info.value)


def test_uci_nan_and_malformed_data(tmp_path):
    data = DATA.copy()
    data[6, 2] = np.nan
    folder = write_uci(tmp_path / "nan", data=data)
    message = r"data.txt: 1 NaN or infinite value\(s\) in the used columns, first at row 6, column 2"
    with pytest.raises(DataError, match=message):
        load_uci(folder, 0)
    data = DATA.copy()
    data[6, 3] = np.nan  # an unused column (the target is 4) does not matter
    assert len(load_uci(write_uci(tmp_path / "unused", data=data), 0)[0]) == 7
    folder = write_uci(tmp_path / "ragged")
    lines = (folder / "data.txt").read_text().splitlines()
    (folder / "data.txt").write_text("\n".join(lines[:3] + [lines[3] + " 1.0"] + lines[4:]))
    with pytest.raises(DataError, match="line 4 has 6 value"):
        load_uci(folder, 0)
    (folder / "data.txt").write_text("\n".join(lines[:3] + [lines[3].replace("3.0000000e+00", "abc", 1)] + lines[4:]))
    with pytest.raises(DataError, match="line 4 holds 'abc', not a number"):
        load_uci(folder, 0)
    (folder / "data.txt").write_text("\n\n")
    with pytest.raises(DataError, match="the file is empty"):
        load_uci(folder, 0)


def test_uci_bad_n_splits_and_split_type(tmp_path):
    folder = write_uci(tmp_path / "toy")
    with pytest.raises(TypeError, match="split must be an integer"):
        load_uci(folder, "0")
    (folder / "n_splits.txt").write_text("twenty\n")
    with pytest.raises(DataError, match="n_splits.txt: expected one positive integer"):
        uci_splits(folder)


def test_standardizer_takes_its_columns_from_a_reference_and_its_target_from_the_rows():
    X, y = torch.tensor([[0.0], [1.0]]), torch.tensor([3.0, 5.0])
    pool = torch.tensor([[0.0], [2.0], [4.0], [6.0]])
    s = Standardizer.fit(X, y, x_reference=pool)
    assert s.x_mean.tolist() == [3.0] and s.x_sd.tolist() == pytest.approx([5.0**0.5])
    assert (s.y_mean, s.y_sd) == (4.0, 1.0)
    with pytest.raises(DataError, match="x_reference has 2 columns"):
        Standardizer.fit(X, y, x_reference=torch.zeros(3, 2))


def test_fit_standardises_on_the_inputs_it_is_given():
    """A few labelled rows standardised by a pool's columns (active learning): the fit's transform is the pool's,
    and inputs of another width are refused."""
    import pyro_bdl

    pool = pyro_bdl.load("sine")
    few = Dataset("few", pool.X[:8], pool.y[:8], pool.feature_names, pool.target_name)
    with pytest.warns(pyro_bdl.ConvergenceWarning):  # 20 steps: the transform is what is checked, not the fit
        fit = pyro_bdl.fit("bnn-regressor", few, "map", steps=20, progress=False, standardize_on=pool.X,
                           options={"hidden": (5,)})
    assert fit.standardizer.x_mean.tolist() == pytest.approx(pool.X.double().mean(0).tolist())
    assert fit.standardizer.y_mean == pytest.approx(float(few.y.double().mean()))
    with pytest.raises(DataError, match=r"standardize_on must be inputs \(rows, 1\)"):
        pyro_bdl.fit("bnn-regressor", few, "map", steps=20, progress=False, standardize_on=torch.zeros(4, 3))
