"""Figures written by ``pyro-bdl fit``: trace or loss, and the marginal posteriors."""

from __future__ import annotations

from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import numpy as np

from pyro_bdl.data.task import Task
from pyro_bdl.posterior.inference_data import quiet_arviz
from pyro_bdl.posterior.uncertainty import plot_reliability

__all__ = ["plot_loss", "plot_trace", "plot_posterior", "draw_predictive_band", "plot_predictive_band", "write_plots"]


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


#: A site with at most this many elements is drawn whole (a regression's weights); a larger one by the first two
#: indices of each of its dimensions (a network's thousands of weights: a handful of panels).
SHOWN_WHOLE = 8


def _drawn_elements(idata, per_dim: int = 2, whole: int = SHOWN_WHOLE) -> dict:
    """ArviZ coords of the elements the figures draw: every element of a site with at most ``whole`` of them, the
    first ``per_dim`` indices of every dimension of a larger one (a dimension it shares with a smaller site is cut
    for both)."""
    coords = {}
    for da in idata.posterior.data_vars.values():
        if int(np.prod(da.shape[2:], dtype=np.int64)) <= whole:
            continue
        for dim in da.dims[2:]:
            coords[dim] = list(da[dim].values[:per_dim])  # the first coordinates (a pruned site's: flat indices)
    return coords


def plot_trace(idata, path: Path) -> None:
    with quiet_arviz():
        axes = az.plot_trace(idata, compact=True, coords=_drawn_elements(idata))
    fig = np.asarray(axes).flat[0].figure
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_posterior(idata, path: Path, point_estimate: bool = False) -> None:
    """Marginal posteriors (94% HDI); for a point estimate, the estimated values."""
    if point_estimate:
        names, values = [], []
        for var, da in idata.posterior.sel(_drawn_elements(idata)).data_vars.items():
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
        with quiet_arviz():  # one chain of a guide's draws: ArviZ's "Shape validation failed" is not news
            axes = az.plot_posterior(idata, coords=_drawn_elements(idata))
        fig = np.asarray(axes).flat[0].figure
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw_predictive_band(result, ax=None, test=None, grid=None, legend: bool = True):
    """1-D regression on ``ax``: data, predictive mean, epistemic band (mean +- 2 epistemic sd) and the
    total 94% interval, over ``grid`` (n, 1) (default: the data's range and a quarter of it on each side).

    Returns the axes.  Example: ``draw_predictive_band(pyro_bdl.fit("bnn-regressor", "sine",
    inference="ensemble"))``.
    """
    import torch

    features, target = result.spec.data.features, result.spec.data.target
    train_x = result.data[features][:, 0]
    train_y = result.data[target]
    if grid is None:
        lo, hi = float(train_x.min()), float(train_x.max())
        pad = 0.25 * (hi - lo)
        grid = torch.linspace(lo - pad, hi + pad, 300).unsqueeze(-1)
    table = result.predict(grid)
    x = grid[:, 0].cpu().numpy()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(x, table["lower"], table["upper"], alpha=0.2, label="94% predictive interval")
    ax.fill_between(x, table["mean"] - 2 * table["epistemic_sd"], table["mean"] + 2 * table["epistemic_sd"],
                    alpha=0.35, label="mean +- 2 epistemic sd")
    ax.plot(x, table["mean"], lw=1.5, label="predictive mean")
    ax.scatter(train_x.cpu().numpy(), train_y.cpu().numpy(), s=6, color="k", label="training data")
    if test is not None:
        ax.scatter(test.X[:, 0].cpu().numpy(), test.y.cpu().numpy(), s=10, marker="x", color="C3", label="held out")
    record = result.record
    ax.set(xlabel=record.feature_names[0] if record.feature_names else "x", ylabel=record.target or "y",
           title=f"{record.model} / {result.method}")
    if legend:
        ax.legend(fontsize=8)
    return ax


def plot_predictive_band(result, test, path: Path) -> None:
    """:func:`draw_predictive_band` saved to ``path``."""
    fig, ax = plt.subplots(figsize=(7, 4))
    draw_predictive_band(result, ax, test)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_plots(result, idata, out: Path, test=None) -> list[str]:
    """Write ``loss.png`` (optimisers) or ``trace.png`` (samplers) and ``posterior.png``; with held-out
    data also ``predictive.png`` (1-D regression) or ``reliability.png`` (classification); and the model's
    own figures (its spec's ``hooks.plots``)."""
    written = []
    spec = result.spec
    features = spec.data.features if spec is not None else None
    if result.task is Task.REGRESSION and features is not None and spec.data.target is not None \
            and result.data[features].shape[-1] == 1:
        plot_predictive_band(result, test, out / "predictive.png")
        written.append("predictive.png")
    if result.task is Task.CLASSIFICATION and test is not None:
        table = result.predict(test)
        probs = table[[c for c in table.columns if c.startswith("prob_")]].to_numpy()
        ax = plot_reliability(probs, test.y.cpu().numpy().astype(int))
        ax.figure.savefig(out / "reliability.png", dpi=100)
        plt.close(ax.figure)
        written.append("reliability.png")
    if result.losses is not None:
        plot_loss(result.losses, out / "loss.png")
        written.append("loss.png")
    elif result.samples:
        plot_trace(idata, out / "trace.png")
        written.append("trace.png")
    if result.samples:  # a model whose every latent is local has no posterior draws to show
        plot_posterior(idata, out / "posterior.png", point_estimate=result.point_estimate)
        written.append("posterior.png")
    if spec is not None and spec.hooks.plots is not None:  # the model's own figures
        written += spec.hooks.plots(result, out, test)
    return written
