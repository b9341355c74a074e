"""The figures ``pyro-bdl fit`` writes (pyro_bdl.posterior.plots): which elements of each site they draw."""

from __future__ import annotations

import arviz as az
import numpy as np

from pyro_bdl.posterior import plots


def _idata():
    rng = np.random.default_rng(0)
    return az.from_dict(posterior={"w": rng.normal(size=(2, 50, 3)), "b": rng.normal(size=(2, 50)),
                                   "W": rng.normal(size=(2, 50, 10, 5))})


def test_small_sites_are_drawn_whole_and_large_ones_by_their_first_indices():
    """A 3-feature regression's w is drawn whole (its third weight too); a 10 x 5 weight matrix by its first two
    indices per dimension."""
    assert plots._drawn_elements(_idata()) == {"W_dim_0": [0, 1], "W_dim_1": [0, 1]}


def test_the_trace_figure_has_a_line_per_drawn_element_and_chain(tmp_path, monkeypatch):
    """trace.png, compact: one row per site, its trace panel a line per element drawn and chain (2 chains)."""
    lines = []
    plot = az.plot_trace

    def counting(idata, **kwargs):
        axes = plot(idata, **kwargs)
        lines.extend(len(row[1].get_lines()) for row in np.asarray(axes))
        return axes

    monkeypatch.setattr(plots.az, "plot_trace", counting)
    plots.plot_trace(_idata(), tmp_path / "trace.png")
    assert lines == [3 * 2, 1 * 2, 2 * 2 * 2] and (tmp_path / "trace.png").exists()


def test_the_posterior_figure_has_a_panel_per_drawn_element(tmp_path, monkeypatch):
    panels = []
    plot = az.plot_posterior

    def counting(idata, **kwargs):
        axes = plot(idata, **kwargs)
        panels.append(sum(ax.has_data() for ax in np.asarray(axes).flat))
        return axes

    monkeypatch.setattr(plots.az, "plot_posterior", counting)
    plots.plot_posterior(_idata(), tmp_path / "posterior.png")
    assert panels == [3 + 1 + 2 * 2] and (tmp_path / "posterior.png").exists()
