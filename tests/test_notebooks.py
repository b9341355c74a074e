"""Every notebook in notebooks/ runs top to bottom (with PYRO_BDL_SMOKE=1: tiny run lengths; in the slow tier), and
every cell that plots shows its figure, both in the committed file and when run."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

#: A call that draws: plt.subplots(...), az.plot_trace(...), plot_reliability(...), ax.plot(...), df.plot(...)
#: (plt.close / plt.rcParams / plt.style do not draw).
PLOTTING_CALL = re.compile(r"\bplt\.(?!close\b|rcParams\b|style\b)\w+\(|\bplot_\w*\(|\.plot\w*\(")


def cells_without_figures(nb) -> list[int]:
    """Indices (among the code cells) of the cells that call a plotting function but have no image output."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    return [i for i, cell in enumerate(code) if PLOTTING_CALL.search(cell.source)
            and not any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))]


def test_there_are_notebooks():
    assert NOTEBOOKS


def test_the_plotting_call_pattern():
    assert PLOTTING_CALL.search("fig, ax = plt.subplots(1, 2)") and PLOTTING_CALL.search("az.plot_trace(idata);")
    assert PLOTTING_CALL.search("ax.plot(x, y)") and PLOTTING_CALL.search("plot_reliability(p, y, ax=ax)")
    assert not PLOTTING_CALL.search("import matplotlib.pyplot as plt\nfrom m import plot_reliability, rmse")
    assert not PLOTTING_CALL.search("plt.close(fig)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_notebook_shows_every_figure(path):
    nb = nbformat.read(path, as_version=4)
    assert not cells_without_figures(nb), f"{path.name}: code cells that plot without an image output"


@pytest.mark.slow  # 2-5 minutes for the six even at smoke lengths; the committed outputs are checked above
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PYRO_BDL_SMOKE", "1")
    # a non-inline backend in the environment (as on a headless machine) must not strip the figures:
    # each notebook asks for the inline backend itself (%matplotlib inline)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel's torch on one thread, like the tests (conftest.py)
    nb = nbformat.read(path, as_version=4)
    # run in a scratch directory so the source tree is neither imported nor written to
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors
    assert not cells_without_figures(nb), "code cells that plot without an image output"
    assert nb.cells[-1].cell_type == "markdown"
