"""The result of an SBC run (:func:`pyro_bdl.workflows.sbc.sbc`): its ranks, their checks per site entry
(:mod:`pyro_bdl.posterior.rank_uniformity`), a verdict, and the ECDF-difference plot.

Example
-------
>>> rng = np.random.default_rng(0)
>>> result = SBCResult(pd.DataFrame({"mu": rng.integers(0, 20, 100)}), max_rank=19, model="mine", method="nuts")
>>> result.calibrated(), list(result.table().columns)[:3]
(True, ['site', 'chi2_p', 'ecdf_p'])
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pyro_bdl.posterior.rank_uniformity import ecdf_band, uniformity

__all__ = ["SBCResult"]


@dataclass
class SBCResult:
    """The ranks of an SBC run and their checks.

    Attributes
    ----------
    ranks : DataFrame, (replications, entries): the rank of the prior draw of each scalar entry of each latent site
        among ``max_rank`` posterior draws, 0..max_rank; columns ``site`` or ``site[i]`` / ``site[i,j]``.
    max_rank : L, the posterior draws per replication.
    model, method : what was checked.
    fits : DataFrame, one row per replication: its seed, the fit's draws, least bulk ESS, the thinning stride,
        divergences, whether it was refit longer, and its warnings.
    seconds : wall time of the run (the replications computed in it, not those read from a checkpoint).
    """

    ranks: pd.DataFrame
    max_rank: int
    model: str = ""
    method: str = ""
    fits: pd.DataFrame = field(default_factory=pd.DataFrame)
    seconds: float = float("nan")

    def table(self, alpha: float = 0.05) -> pd.DataFrame:
        """One row per site entry (:func:`uniformity`): the chi-square p-value, the simultaneous ECDF test's p-value,
        whether the ECDF stays in its band at level ``alpha``, the shape of a failure, the mean fractional rank and
        the spread (mean squared distance of the fractional rank from 1/2 over its value under uniformity: > 1, ranks
        at the ends)."""
        table = uniformity(self.ranks, self.max_rank, alpha)
        table.insert(0, "site", [_site_of(entry) for entry in table.index])
        return table

    def calibrated(self, alpha: float = 0.05) -> bool:
        """Every entry in its band at level ``alpha / entries`` (Bonferroni: the chance that a calibrated method
        fails anywhere is at most ``alpha``)."""
        return bool((self.table(alpha / max(1, self.ranks.shape[1]))["in_band"]).all())

    def summary(self, alpha: float = 0.05) -> str:
        """The verdict, the table and what the fits reported, as text."""
        entries = self.ranks.shape[1]
        verdict = "calibrated" if self.calibrated(alpha) else "NOT calibrated"
        lines = [f"SBC of {self.model or 'the model'} under {self.method or 'the method'}: {len(self.ranks)} "
                 f"replications, L = {self.max_rank} draws each: {verdict} (every entry's ECDF in its band at "
                 f"alpha = {alpha:g} / {entries} entries)",
                 self.table(alpha).to_string(float_format=lambda v: f"{v:.3g}")]
        if len(self.fits) and "refit" in self.fits:
            warned = self.fits["warnings"][self.fits["warnings"] != ""]
            common = Counter(_gist(m) for text in warned for m in text.split("; ")).most_common(1)
            lines.append(f"fits: {int(self.fits['divergences'].gt(0).sum())} with divergences, "
                         f"{int(self.fits['refit'].sum())} run longer for their ESS, {int(self.fits['short'].sum())} "
                         f"thinned beyond their ESS, {len(warned)} with warnings"
                         + (f" (most often, in {common[0][1]}: {common[0][0]})" if common else ""))
        return "\n".join(lines)

    def plot(self, sites=None, ax=None, alpha: float = 0.05, max_panels: int = 16):
        """ECDF-difference plot: for each site entry, the ECDF of the fractional ranks minus the uniform CDF, with
        its simultaneous ``1 - alpha`` band (grey); a panel whose curve leaves the band is titled in red.

        Parameters
        ----------
        sites : site names (all their entries) or entry names to show; default every entry.
        ax : a matplotlib Axes (one entry) or an array of at least as many Axes; default a new figure.
        max_panels : at most this many panels; the figure says how many entries were left out.

        Returns
        -------
        the matplotlib Figure.
        """
        import matplotlib.pyplot as plt

        entries = self._entries(sites)
        shown = entries[:max_panels]
        table = self.table(alpha)
        if ax is None:
            cols = min(4, len(shown))
            rows = math.ceil(len(shown) / cols)
            fig, axes = plt.subplots(rows, cols, figsize=(max(3.2 * cols, 6.4), 2.7 * rows + 0.4), squeeze=False)
        else:
            axes = np.atleast_1d(np.asarray(ax, dtype=object))
            if axes.size < len(shown):
                raise ValueError(f"ax holds {axes.size} Axes for {len(shown)} panels: pass as many, or sites=...")
            fig = axes.flat[0].figure
        axes = list(np.asarray(axes, dtype=object).flat)
        band = ecdf_band(len(self.ranks), self.max_rank, alpha)
        for entry, axis in zip(shown, axes):
            _plot_entry(axis, self.ranks[entry].to_numpy(), self.max_rank, band, entry, table.loc[entry])
        for axis in axes[len(shown):]:
            axis.set_visible(False)
        verdict = "calibrated" if self.calibrated(alpha) else "NOT calibrated"
        title = (f"SBC: {self.model} under {self.method}, {len(self.ranks)} replications, L = {self.max_rank}: "
                 f"{verdict} (every entry in its band at {alpha:g} / {self.ranks.shape[1]}); bands {1 - alpha:.0%}")
        if len(entries) > len(shown):
            title += f" (showing {len(shown)} of {len(entries)} entries: choose with sites=..., or raise max_panels)"
        fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 13), replace_whitespace=False), fontsize=10)
        if ax is None:  # a figure of its own; the layout of a caller's figure is the caller's
            fig.tight_layout()
        return fig

    def _entries(self, sites) -> list[str]:
        """The entries of ``sites`` (site or entry names), in the ranks' order; an error naming the unknown ones."""
        if sites is None:
            return list(self.ranks.columns)
        sites = [sites] if isinstance(sites, str) else list(sites)
        unknown = [s for s in sites if s not in self.ranks.columns and s not in {_site_of(c) for c in self.ranks}]
        if unknown:
            raise ValueError(f"unknown site {', '.join(map(repr, unknown))}; the sites ranked: "
                             f"{', '.join(dict.fromkeys(_site_of(c) for c in self.ranks))}")
        return [c for c in self.ranks.columns if c in sites or _site_of(c) in sites]


def _gist(message: str) -> str:
    """A warning's message with its numbers as ``#`` (and its worst site left out): the same warning, counted once."""
    return re.sub(r"\d+(\.\d+)?", "#", message.split(" (worst:")[0])


def _site_of(entry: str) -> str:
    return entry.split("[")[0]


def _plot_entry(axis, ranks: np.ndarray, max_rank: int, band, entry: str, row) -> None:
    """One panel: the ECDF difference of ``ranks`` over its band."""
    z, lower, upper = band.z, band.lower / band.n - band.z, band.upper / band.n - band.z
    below = (ranks[None, :] < np.arange(1, max_rank + 1)[:, None]).mean(1)
    axis.fill_between(np.r_[0, z, 1], np.r_[0, lower, 0], np.r_[0, upper, 0], step="post", color="0.85", lw=0)
    axis.step(np.r_[0, z, 1], np.r_[0, below - z, 0], where="post", color="C0" if row["in_band"] else "C3", lw=1.2)
    axis.axhline(0.0, color="0.5", lw=0.6)
    axis.set_xlim(0, 1)
    axis.set_xlabel("fractional rank")
    axis.set_ylabel("ECDF - uniform")
    label = "" if row["in_band"] else "\n" + row["shape"].replace(" (", ":\n").rstrip(")")
    axis.set_title(f"{entry} (ECDF p = {row['ecdf_p']:.2g}){label}", fontsize=8,
                   color="k" if row["in_band"] else "C3")
