"""Figures written by ``pyro-bdl fit``: trace or loss, and the marginal posteriors."""

from __future__ import annotations

from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_loss", "plot_trace", "plot_posterior", "write_plots"]


def plot_loss(losses, path: Path) -> None:
    """The loss (negative ELBO) per step with a running median; one line per ensemble member."""
    rows = np.atleast_2d(np.asarray(losses, dtype=float))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, row in enumerate(rows):
        row = row[np.isfinite(row)]
        label = "" if len(rows) == 1 else f" (member {i})"
        ax.plot(row, lw=0.5, alpha=0.5, label="loss" + label if len(rows) == 1 else None)
        k = max(len(row) // 50, 1)
        if len(row) > k:
            trend = np.array([np.median(row[max(0, j - k) : j + 1]) for j in range(len(row))])
            ax.plot(trend, lw=1.5, label=f"running median ({k} steps){label}")
    finite = rows[np.isfinite(rows)]
    low, high = np.percentile(finite, [1, 99]) if finite.size else (0, 1)
    ax.set_ylim(low - 0.05 * (high - low + 1e-9), high + 0.05 * (high - low + 1e-9))
    ax.set(xlabel="step", ylabel="loss = -ELBO", title="training loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_trace(idata, path: Path) -> None:
    axes = az.plot_trace(idata, compact=True)
    fig = np.asarray(axes).flat[0].figure
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_posterior(idata, path: Path, point_estimate: bool = False) -> None:
    """Marginal posteriors (94% HDI); for a point estimate, the estimated values."""
    if point_estimate:
        names, values = [], []
        for var, da in idata.posterior.data_vars.items():
            flat = da.values.reshape(-1)
            names += [var] if flat.size == 1 else [f"{var}[{j}]" for j in range(flat.size)]
            values += flat.tolist()
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(names) + 1.5))
        ax.scatter(values, range(len(names)))
        ax.set_yticks(range(len(names)), names)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set(title=f"{idata.posterior.attrs.get('inference', '')} point estimate", xlabel="value")
        fig.tight_layout()
    else:
        axes = az.plot_posterior(idata)
        fig = np.asarray(axes).flat[0].figure
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(result, idata, out: Path) -> list[str]:
    """Write ``loss.png`` (SVI, MAP, MLE) or ``trace.png`` (samplers), and ``posterior.png``."""
    written = []
    if result.losses is not None:
        plot_loss(result.losses, out / "loss.png")
        written.append("loss.png")
    else:
        plot_trace(idata, out / "trace.png")
        written.append("trace.png")
    plot_posterior(idata, out / "posterior.png", point_estimate=result.point_estimate)
    written.append("posterior.png")
    return written
