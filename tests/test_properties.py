"""Property tests (hypothesis): generated malformed CSV files and damaged fit directories (issue 19).

Every case either works or raises a :class:`pyro_bdl.DataError` (the command line: exit 2) naming the file;
never another exception, and nothing is written where the command failed.  The default suite runs
``PYRO_BDL_EXAMPLES`` (default 50) examples per property; set it higher for a longer search.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pyro_bdl  # noqa: E402
from pyro_bdl.cli import main  # noqa: E402
from pyro_bdl.data.table import DataError, load_csv  # noqa: E402

EXAMPLES = int(os.environ.get("PYRO_BDL_EXAMPLES", "50"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------- CSV files

names = st.one_of(st.sampled_from(["x", "x0", "y", "", " ", "x;y", "a\tb", "é", "ключ", "x0"]),
                  st.text(min_size=0, max_size=6))
cells = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e308", "-1e308", "1e-320", "3.5e38", "1e39", "0", "", "nan", "inf", "NA", "\"1,2\"", "abc"]),
    st.integers(-10**30, 10**30).map(str),
    st.text(max_size=4),
)


@st.composite
def csv_bytes(draw):
    if draw(st.booleans()) and draw(st.booleans()):  # a quarter: any bytes at all
        return draw(st.binary(max_size=200))
    header = draw(st.lists(names, min_size=1, max_size=4))
    if draw(st.booleans()):
        header.append("y")
    width = len(header)
    rows = draw(st.lists(st.lists(cells, min_size=max(width - 1, 0), max_size=width + 1), min_size=0, max_size=6))
    sep = draw(st.sampled_from([",", ",", ",", ";", "\t"]))
    text = "\n".join(sep.join(r) for r in [header, *rows]) + draw(st.sampled_from(["", "\n", "\n\n"]))
    raw = text.encode(draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16"])), errors="replace")
    return raw


@SETTINGS
@given(raw=csv_bytes(), target=st.sampled_from(["y", "x", None]))
def test_any_csv_loads_or_is_refused_naming_the_file(raw, target):
    root = Path(tempfile.mkdtemp())
    try:
        path = root / "data.csv"
        path.write_bytes(raw)
        try:
            ds = load_csv(path, target=target)
        except DataError as exc:
            assert str(path) in str(exc), str(exc)
        else:
            assert bool(np.isfinite(ds.X.numpy()).all()), "a loaded table holds only finite numbers"
            assert len(set(ds.feature_names)) == len(ds.feature_names)
            if target is not None:
                assert bool(np.isfinite(ds.y.numpy()).all())
        assert _listing(root) == ["data.csv"]
    finally:
        shutil.rmtree(root)


@settings(max_examples=max(EXAMPLES // 2, 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=csv_bytes())
def test_fit_on_any_csv_exits_0_or_2_and_writes_nothing_on_2(raw):
    root = Path(tempfile.mkdtemp())
    try:
        path = root / "data.csv"
        path.write_bytes(raw)
        out = root / "out"
        code = main(["fit", "blr", "--data", str(path), "--target", "y", "--inference", "map", "--steps", "5",
                     "--out", str(out), "--no-progress"])
        assert code in (0, 2)
        if code == 2:
            assert _listing(root) == ["data.csv"]
    finally:
        shutil.rmtree(root)


# ---------------------------------------------------------------- damaged fit directories

@pytest.fixture(scope="module")
def fit_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    data = root / "data.csv"
    data.write_text("a,b,y\n" + "".join(f"{a},{b},{a - b + 0.1 * e}\n" for (a, b), e in zip(x, rng.normal(size=40))))
    out = root / "fit"  # a standardised network: posterior.nc (with a standardizer), metrics.json, summary.csv
    assert main(["fit", "bnn-regressor", "--inference", "map", "--steps", "20", "--option", "hidden=4", "--data",
                 str(data), "--target", "y", "--out", str(out), "--no-progress", "--test-fraction", "0"]) == 0
    return out, data


FILES = ["posterior.nc", "metrics.json", "summary.csv"]  # params.pt: tests/test_validation.py
ATTRS = ["model", "options", "likelihood_sites", "feature_names", "standardizer", "inference", "seed",
         "inference_library"]
junk = st.one_of(st.text(max_size=12), st.integers().map(str), st.sampled_from(["[]", "{}", "1", "null", "\"x\"",
                                                                               "[1, 2]", "{\"a\": 1}", "blr", "coin"]))


@st.composite
def damage(draw):
    kind = draw(st.sampled_from(["remove", "truncate", "random", "flip", "json", "attr"]))
    name = draw(st.sampled_from(FILES))
    if kind == "json":
        return kind, "metrics.json", draw(st.sampled_from(["[]", "1", "\"text\"", "null", "{", "{\"a\": NaN}"]))
    if kind == "attr":
        return kind, "posterior.nc", (draw(st.sampled_from(ATTRS)), draw(junk))
    if kind == "truncate":
        return kind, name, draw(st.floats(0.0, 0.99))
    if kind == "random":
        return kind, name, draw(st.binary(min_size=0, max_size=300))
    if kind == "flip":
        return kind, name, draw(st.lists(st.tuples(st.floats(0.0, 0.999), st.integers(1, 255)), min_size=1,
                                         max_size=8))
    return kind, name, None


def _apply(fit: Path, kind: str, name: str, arg) -> None:
    path = fit / name
    if kind == "remove":
        path.unlink()
    elif kind == "truncate":
        raw = path.read_bytes()
        path.write_bytes(raw[: int(len(raw) * arg)])
    elif kind == "random":
        path.write_bytes(arg)
    elif kind == "flip":
        raw = bytearray(path.read_bytes())
        for where, xor in arg:
            raw[int(len(raw) * where)] ^= xor
        path.write_bytes(bytes(raw))
    elif kind == "json":
        path.write_text(arg)
    elif kind == "attr":
        import arviz as az

        key, value = arg
        idata = az.from_netcdf(str(path))
        idata.load()
        idata.posterior.attrs[key] = value
        path.unlink()
        idata.to_netcdf(str(path))


@pytest.mark.slow
@SETTINGS
@given(hit=damage())
def test_a_damaged_fit_loads_or_is_refused_naming_the_file(fit_dir, hit):
    fitted, data = fit_dir
    root = Path(tempfile.mkdtemp())
    try:
        fit = root / "fit"
        shutil.copytree(fitted, fit)
        kind, name, arg = hit
        _apply(fit, kind, name, arg)
        before = _listing(root)
        try:
            result = pyro_bdl.load_fit(fit)
        except pyro_bdl.FitDirectoryError as exc:
            assert name in str(exc) or str(fit) in str(exc), str(exc)
        else:  # what still loads must still predict, or be refused by predict naming the problem
            try:
                result.predict(pyro_bdl.load_csv(data, target=None, features=result.record.feature_names))
            except DataError:
                pass
        out = root / "p.csv"
        code = main(["predict", str(fit), "--data", str(data), "--out", str(out)])
        assert code in (0, 2)
        if code == 2:
            assert _listing(root) == before
    finally:
        shutil.rmtree(root)
