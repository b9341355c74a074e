"""CSV loading and the embedded data sets."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from pyro_bdl.data.embedded import EMBEDDED, load
from pyro_bdl.data.table import DataError, as_model_kwargs, load_csv


@pytest.mark.parametrize("name", list(EMBEDDED))
def test_embedded_data_sets_load(name):
    ds = load(name)
    assert len(ds) > 0 and ds.y.shape == (len(ds),) and torch.isfinite(ds.X).all()
    assert ds.target_name == EMBEDDED[name].target


def test_csv_round_trip_and_feature_selection(tmp_path):
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [0.5, 0.1, 0.2], "t": [1.0, 0.0, 1.0]})
    df.to_csv(tmp_path / "d.csv", index=False)
    ds = load_csv(tmp_path / "d.csv", "t")
    assert ds.feature_names == ["a", "b"] and ds.X.shape == (3, 2)
    assert torch.equal(ds.y, torch.tensor([1.0, 0.0, 1.0]))
    only_b = load_csv(tmp_path / "d.csv", None, features=["b"])
    assert only_b.y is None and only_b.X.shape == (3, 1)


@pytest.mark.parametrize("text,message", [
    ("", "the file is empty"),
    ("a,t\n", "has no data rows"),
    ("a,t\n1,inf\n", "column 't' has 1 NaN/missing/infinite"),
    ("a,t\n1,2\nx,3\n", "column 'a' is not numeric (row 2 holds 'x')"),
    ("a,u\n1,2\n", "target column 't' not found; columns are: a, u"),
])
def test_csv_errors_name_the_problem(tmp_path, text, message):
    (tmp_path / "d.csv").write_text(text)
    with pytest.raises(DataError) as info:
        load_csv(tmp_path / "d.csv", "t")
    assert message in str(info.value)


def test_csv_path_needs_a_target(tmp_path):
    with pytest.raises(DataError, match="needs a target column"):
        load(str(tmp_path / "x.csv"))


def test_model_kwargs_for_feature_free_models():
    """A model without features (the coin) gets its target and the number of rows under its own names."""
    import pyro_bdl

    ds = load("coin")
    kwargs = pyro_bdl.get_model("coin").data_kwargs(ds)
    assert set(kwargs) == {"y", "n"} and kwargs["n"] == len(ds) and kwargs["y"] is ds.y
    with pytest.raises(TypeError, match="Dataset, a dict"):
        as_model_kwargs([1, 2, 3])
