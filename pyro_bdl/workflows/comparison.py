r"""The result of :func:`~pyro_bdl.workflows.compare.compare`: several methods' fits of one model judged against a
reference posterior, as tables, a figure of the marginals and a report folder (``report.md``, ``marginals.png``,
``table.csv``, ``summary.csv``) written all or nothing.

Example
-------
>>> print(markdown_table(pd.DataFrame({"method": ["svi"], "divergence": [0.12345]})))
| method | divergence |
| --- | --- |
| svi | 0.1235 |
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pyro_bdl.storage.paths import OutputPathError

__all__ = ["Comparison", "MAX_PLOTTED", "REPORT_FILES", "markdown_table", "check_report_folder", "element_draws"]

#: The most site elements :meth:`Comparison.plot` draws (the first ones, in the table's order).
MAX_PLOTTED = 12

#: The files :meth:`Comparison.write` writes.
REPORT_FILES = ("report.md", "marginals.png", "table.csv", "summary.csv")


@dataclass
class Comparison:
    """Several methods' fits of one model, each judged against a reference posterior.

    Attributes
    ----------
    results : method -> :class:`~pyro_bdl.result.FitResult` (the reference's NUTS fit too, where it is one).
    reference : ``"exact"`` (the model's closed form) or the method whose fit is the reference.
    reference_moments : site element -> (mean, sd) of the reference.
    reference_draws : site element -> 1-D array of the reference's draws (empty for an exact reference).
    table : one row per method and site element: mean, sd, ref_mean, ref_sd, mean_error, sd_ratio, divergence,
        divergence_kind.
    summary : one row per method: mean and max divergence and max |mean error| over the elements, the held-out
        metrics (``test_...``) when held-out data were given, and wall seconds.
    loo : ``az.compare`` on PSIS-LOO (:func:`~pyro_bdl.posterior.diagnostics.compare_loo`), or None.
    notes : what the report should say besides the numbers (fits left out of LOO, ...).
    """

    results: dict
    reference: str
    reference_moments: dict
    reference_draws: dict
    table: pd.DataFrame
    summary: pd.DataFrame
    loo: pd.DataFrame | None = None
    notes: list = field(default_factory=list)
    title: str = "comparison"

    def plot(self, path: str | Path | None = None):
        """A grid of the marginals of the first :data:`MAX_PLOTTED` site elements: the reference's (a filled
        histogram of its draws, or its Gaussian density when exact) and each method's overlaid (a step histogram;
        a point estimate as a vertical line).  Saved to ``path`` if given; returns the figure."""
        import matplotlib.pyplot as plt

        elements = list(self.reference_moments)[:MAX_PLOTTED]
        cols = min(4, len(elements))
        rows = math.ceil(len(elements) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        with np.errstate(divide="ignore", invalid="ignore"):  # a histogram with no draw in the reference's range
            for ax, element in zip(axes.flat, elements):
                self._plot_element(ax, element, colours)
        for ax in list(axes.flat)[len(elements):]:
            ax.set_visible(False)
        axes.flat[0].legend(fontsize=7)
        shown = f" (first {len(elements)} of {len(self.reference_moments)} site elements)" \
            if len(self.reference_moments) > len(elements) else ""
        fig.suptitle(f"{self.title}: marginals against the reference{shown}", fontsize=10)
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, format="png", dpi=110)
        return fig

    def _plot_element(self, ax, element: str, colours: list) -> None:
        """One panel of :meth:`plot`: the reference's marginal of ``element`` and each method's over it."""
        m, s = self.reference_moments[element]
        grid = np.linspace(m - 5 * s, m + 5 * s, 200)
        if len(self.reference_draws.get(element, ())):
            ax.hist(self.reference_draws[element], bins=40, range=(grid[0], grid[-1]), density=True,
                    color="0.8", label=f"reference ({self.reference})")
        else:
            ax.fill_between(grid, np.exp(-0.5 * ((grid - m) / s) ** 2) / (s * math.sqrt(2 * math.pi)),
                            color="0.8", label="reference (exact)")
        for k, (label, result) in enumerate(r for r in self.results.items() if r[0] != self.reference):
            draws = element_draws(result).get(element)
            if draws is None:
                continue
            colour = colours[k % len(colours)]
            if result.point_estimate or len(draws) < 2:
                ax.axvline(float(draws.mean()), color=colour, ls="--", label=label)
            else:
                ax.hist(draws, bins=40, range=(grid[0], grid[-1]), density=True, histtype="step", color=colour,
                        label=label)
        ax.set_title(element, fontsize=9)
        ax.set_yticks([])

    def to_markdown(self) -> str:
        """The report: what was compared, the summary per method, the per-element table, LOO and the notes."""
        shown = min(MAX_PLOTTED, len(self.reference_moments))
        lines = [f"# Which method: {self.title}", "",
                 f"Reference: **{self.reference}**" + (" (the model's exact posterior)" if self.reference == "exact"
                                                        else " (its draws)") + ".", "",
                 "Divergence: the 1-D Wasserstein-1 distance between a method's draws and the reference's, in "
                 "reference sds (between two samples of one distribution it is of order 1/sqrt(draws), not 0); "
                 "against an exact reference (moments only), the Wasserstein-2 distance between the Gaussians of "
                 "those moments.  A point estimate gets its standardised mean error only.", "",
                 "## Summary", "", markdown_table(self.summary), "",
                 f"![marginals](marginals.png) (the first {shown} of {len(self.reference_moments)} site elements)",
                 "", "## Per site element", "", markdown_table(self.table), ""]
        if self.loo is not None:
            lines += ["## PSIS-LOO (az.compare)", "", markdown_table(self.loo.reset_index(names="fit")), ""]
        if self.notes:
            lines += ["## Notes", ""] + [f"- {note}" for note in self.notes] + [""]
        return "\n".join(lines)

    def write(self, folder: str | Path, force: bool = False) -> list[str]:
        """report.md, marginals.png, table.csv and summary.csv in ``folder``, all or none: written in a temporary
        folder beside it, then moved in.  An existing non-empty ``folder`` is refused unless ``force`` (then
        replaced).  Returns the file names."""
        import matplotlib.pyplot as plt

        folder = Path(folder)
        check_report_folder(folder, force)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            (tmp / "report.md").write_text(self.to_markdown())
            self.table.to_csv(tmp / "table.csv", index=False)
            self.summary.to_csv(tmp / "summary.csv", index=False)
            plt.close(self.plot(tmp / "marginals.png"))
            old = None
            if folder.exists():
                old = folder.with_name(f".{folder.name}.old.{os.getpid()}")
                os.replace(folder, old)
            os.replace(tmp, folder)
            if old is not None:
                shutil.rmtree(old)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return list(REPORT_FILES)


def markdown_table(frame: pd.DataFrame) -> str:
    """A frame as a Markdown table, numbers to 4 significant digits (pandas' own needs ``tabulate``).

    >>> print(markdown_table(pd.DataFrame({"a": ["x"], "b": [1 / 3]})))
    | a | b |
    | --- | --- |
    | x | 0.3333 |
    """
    def cell(value) -> str:
        if isinstance(value, (float, np.floating)):
            return "" if np.isnan(value) else f"{value:.4g}"
        return str(value).replace("|", "/")

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "| " + " | ".join("---" for _ in frame.columns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def check_report_folder(folder: str | Path, force: bool = False) -> None:
    """Refuse a report folder that is a file, or (unless ``force``) a non-empty folder."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"--out {folder}: is an existing file, not a directory")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise OutputPathError(f"--out {folder}: is not empty; choose another directory, or pass --force to "
                              "replace it")



def element_draws(result) -> dict:
    """Site element -> 1-D float64 array of its draws, chains together, named as
    :func:`~pyro_bdl.posterior.diagnostics.compare_methods` names rows."""
    out = {}
    for site, value in result.samples.items():
        flat = value.detach().reshape(value.shape[0] * value.shape[1], -1).double().cpu().numpy()
        for j in range(flat.shape[1]):
            out[site if value[0, 0].dim() == 0 else f"{site}[{j}]"] = flat[:, j]
    return out
