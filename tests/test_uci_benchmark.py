"""Smoke test of benchmarks/uci_regression.py on a tiny UCI folder made here (the real files are not needed)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from test_datasets import write_uci

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "uci_regression.py"


@pytest.mark.filterwarnings("ignore")
def test_uci_benchmark_runs_the_default_fits_and_reports_them(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("uci_regression", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    write_uci(tmp_path / "toy")
    results = bench.run(str(tmp_path), ["toy"], [0, 1], ["mc-dropout"])
    rows = results[("toy", "mc-dropout")]
    assert len(rows) == 2 and all(math.isfinite(r) and math.isfinite(ll) for r, ll, _ in rows)
    table = bench.report(results)
    assert "toy" in table and "mc-dropout" in table
    assert "split  1 mc-dropout: RMSE" in capsys.readouterr().out
