"""The figures ``pyro-bdl fit`` writes (pyro_bdl.plots): which elements of each site they draw."""

from __future__ import annotations

import arviz as az
import numpy as np

from pyro_bdl import plots


def _idata():
    rng = np.random.default_rng(0)
    return az.from_dict(posterior={"w": rng.normal(size=(2, 50, 3)), "b": rng.normal(size=(2, 50)),
                                   "W": rng.normal(size=(2, 50, 10, 5))})


def test_small_sites_are_drawn_whole_and_large_ones_by_their_first_indices(tmp_path):
    """A 3-feature regression's w is drawn whole (its third weight too); a 10 x 5 weight matrix by its first two
    indices per dimension."""
    coords = plots._first_elements(_idata())
    assert coords == {"W_dim_0": [0, 1], "W_dim_1": [0, 1]}
    plots.plot_posterior(_idata(), tmp_path / "posterior.png")
    plots.plot_trace(_idata(), tmp_path / "trace.png")
    assert (tmp_path / "posterior.png").stat().st_size > 0 and (tmp_path / "trace.png").stat().st_size > 0


def test_the_posterior_figure_has_a_panel_per_drawn_element(tmp_path, monkeypatch):
    panels = []
    plot = az.plot_posterior

    def counting(idata, **kwargs):
        axes = plot(idata, **kwargs)
        panels.append(sum(ax.has_data() for ax in np.asarray(axes).flat))
        return axes

    monkeypatch.setattr(plots.az, "plot_posterior", counting)
    plots.plot_posterior(_idata(), tmp_path / "posterior.png")
    assert panels == [3 + 1 + 2 * 2]
