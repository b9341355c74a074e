r"""Figures of a network whose depth is a latent variable: the posterior over the depth of a few rows, and how
many blocks the decision rule ran.

* :func:`plot_depth_posterior`: :math:`p(z \mid x, y) \propto p(z)\, p(y \mid x, z)` of a few rows as bars, the
  prior :math:`p(z)` as a line, the input image above when the rows are square images;
* :func:`plot_depth_histogram`: the fraction of rows that ran 1..L blocks, one bar per group of rows (clean and
  noisy, correct and misclassified), with each group's size and mean;
* :func:`plots`: the fit's own figures (the model's ``plots`` hook): ``depth_posterior.png`` (six held-out rows,
  else training rows, from the shallowest to the deepest posterior mean depth) and ``depth_histogram.png`` (the
  fit's rule on those rows, correct against misclassified).

Example
-------
>>> import matplotlib; matplotlib.use("Agg")
>>> import matplotlib.pyplot as plt, torch
>>> fig, ax = plt.subplots()
>>> plot_depth_histogram(ax, {"clean": torch.tensor([1, 1, 2]), "noisy": torch.tensor([1, 3, 3])}, blocks=3)
>>> [round(float(b.get_height()), 3) for b in ax.patches][:3]  # the clean rows' fractions at depth 1, 2, 3
[0.667, 0.333, 0.0]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pyro_bdl.models.adaptive_depth.decisions import decide
from pyro_bdl.models.adaptive_depth.report import depth_inputs, posterior_depth

__all__ = ["plot_depth_posterior", "plot_depth_histogram", "plots"]


def _square(dim: int) -> int | None:
    side = int(round(dim ** 0.5))
    return side if side * side == dim and side > 1 else None


def plot_depth_posterior(fig, post: torch.Tensor, prior: torch.Tensor, titles: list[str], images=None) -> None:
    """One column per row of ``post`` (k, L): p(z | x, y) as bars over z = 1..L, ``prior`` (L,) as a line;
    ``images`` (k, D) square images shown above, or None."""
    k, L = post.shape
    rows = 1 if images is None else 2
    depths = np.arange(1, L + 1)
    for j in range(k):
        if images is not None:
            side = _square(images.shape[1])
            ax = fig.add_subplot(rows, k, j + 1)
            ax.imshow(images[j].reshape(side, side).numpy(), cmap="gray_r", interpolation="nearest")
            ax.set_axis_off()
            ax.set_title(titles[j], fontsize=8)
        ax = fig.add_subplot(rows, k, (rows - 1) * k + j + 1)
        ax.bar(depths, post[j].numpy(), color="tab:blue", label="p(z | x, y)")
        ax.plot(depths, prior.numpy(), "k--", marker=".", lw=1, label="prior p(z)")
        ax.set(ylim=(0, 1), xticks=depths, xlabel="depth z")
        if j == 0:
            ax.set_ylabel("probability")
            ax.legend(fontsize=7)
        if images is None:
            ax.set_title(titles[j], fontsize=8)


def plot_depth_histogram(ax, groups: dict, blocks: int) -> None:
    """Grouped bars: for every group (label -> blocks run per row, (n,)), the fraction of its rows at 1..``blocks``."""
    depths = np.arange(1, int(blocks) + 1)
    width = 0.8 / max(1, len(groups))
    for g, (label, run) in enumerate(groups.items()):
        run = torch.as_tensor(run).double()
        share = [float((run == l).double().mean()) if len(run) else 0.0 for l in depths]
        mean = float(run.mean()) if len(run) else float("nan")
        ax.bar(depths - 0.4 + width * (g + 0.5), share, width=width, label=f"{label} (n={len(run)}, mean {mean:.2f})")
    ax.set(xticks=depths, xlabel="blocks run", ylabel="fraction of rows", ylim=(0, 1))
    ax.legend(fontsize=8)


def plots(result, out: Path, test=None, inputs=depth_inputs, examples: int = 6) -> list[str]:
    """``depth_posterior.png`` and ``depth_histogram.png`` of the held-out rows ``test`` (a labelled Dataset),
    else of the training rows."""
    import matplotlib.pyplot as plt

    out = Path(out)
    if test is not None:
        X, y, what = test.X, test.y.long(), "held-out"
    else:
        X, y, what = result.data[result.spec.data.features], result.data[result.spec.data.target].long(), "training"
    options = result.model.keywords
    inp = inputs(result, X)
    post = posterior_depth(inp, y)
    mean = (post * torch.arange(1, post.shape[-1] + 1)).sum(-1)
    order = torch.argsort(mean)
    pick = order[torch.linspace(0, len(order) - 1, min(examples, len(order))).round().long()]
    images = X[pick] if _square(X.shape[1]) else None
    fig = plt.figure(figsize=(1.9 * len(pick), 4.2 if images is not None else 2.6))
    plot_depth_posterior(fig, post[pick], inp.prior, [f"row {int(i)}, y={int(y[i])}\nE[z|x,y]={float(mean[i]):.2f}"
                                                      for i in pick], images)
    fig.suptitle(f"posterior over the depth of {what} rows, shallowest to deepest", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "depth_posterior.png", dpi=100)
    plt.close(fig)
    d = decide(options["rule"], inp.logp, inp.pi, options["threshold"], joint=not inp.learned)
    right = d.pred == y
    fig, ax = plt.subplots(figsize=(6, 3.5))
    plot_depth_histogram(ax, {"correct": d.blocks[right], "misclassified": d.blocks[~right]}, inp.logp.shape[1])
    ax.set_title(f"blocks run by rule '{options['rule']}', {what} rows", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "depth_histogram.png", dpi=100)
    plt.close(fig)
    return ["depth_posterior.png", "depth_histogram.png"]
