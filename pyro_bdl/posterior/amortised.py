r"""What a fitted model with an amortised guide answers (the VAE's ``report``, ``evaluate``, ``predict`` and
``plots``): per-row ELBO and importance-sampled log p(x) (:mod:`pyro_bdl.inference.marginal`), the latent means and sds
of q(z | x), reconstructions, and new data from the prior.

Every function takes a :class:`~pyro_bdl.result.FitResult` whose spec declares ``local_latents`` and a guide
(its own, ``guides``), and runs with the fit's own parameters (:meth:`~pyro_bdl.result.FitResult.own_params`).
Estimates use a fixed seed, so the same fit gives the same numbers (before and after ``load_fit``).

Example
-------
>>> import pyro_bdl, torch
>>> fit = pyro_bdl.fit("vae", inference="svi-amortised", options={"latent_dim": 2, "hidden": 16},
...                    epochs=4, progress=False)
>>> table = predict(fit, {"x": torch.rand(3, 64)}, particles=20)
>>> list(table.columns)
['log_px', 'log_px_se', 'elbo', 'z_mean_0', 'z_mean_1', 'z_sd_0', 'z_sd_1']
>>> bool((table["log_px"] >= table["elbo"]).all())
True
>>> simulate(fit, 4)["x"].shape
torch.Size([4, 64])
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from pyro import poutine

from pyro_bdl.data.table import Dataset
from pyro_bdl.inference.marginal import Estimate, estimate

__all__ = ["IS_SAMPLES", "REPORT_ROWS", "guide_of", "estimate_rows", "report", "evaluate", "predict", "latents",
           "codes", "active_units", "ACTIVE_VARIANCE", "reconstruct", "simulate", "plots", "image_grid", "square_side", "class_probabilities", "predict_classes",
           "evaluate_classifier"]

#: K, the draws from q per row for the importance-sampled log p(x) (the ``is_samples`` setting's default).
IS_SAMPLES = 1000
#: The report estimates the training rows' ELBO and log p(x) on at most this many of them (a fixed subset).
REPORT_ROWS = 1000


def guide_of(result):
    """The fit's guide: the fitted one, or (after ``load_fit``) the model's own guide rebuilt on its options (its
    networks take the fit's parameters from :meth:`~pyro_bdl.result.FitResult.own_params`)."""
    if result.guide is not None:
        return result.guide
    spec = result.spec
    return spec.inference.guides[spec.inference.default_guides[result.method]](result.model)


def _particles(result, particles) -> int:
    return int(particles or result.record.settings.get("is_samples") or IS_SAMPLES)


def _features(result, data) -> dict:
    if isinstance(data, dict):
        return data
    return {result.spec.data.features: data.X if hasattr(data, "X") else data}


def estimate_rows(result, data, particles: int | None = None) -> Estimate:
    """:func:`pyro_bdl.inference.marginal.estimate` on ``data`` (a Dataset, a tensor of rows or the model's arguments)."""
    with result.own_params():
        return estimate(result.model, guide_of(result), _features(result, data), _particles(result, particles))


def _summary(est: Estimate, prefix: str) -> dict:
    return {f"{prefix}elbo": float(est.elbo.mean()), f"{prefix}log_px": float(est.log_px.mean()),
            f"{prefix}gap": float((est.log_px - est.elbo).mean()),
            f"{prefix}log_px_se": float(est.log_px_se.pow(2).mean().sqrt() / math.sqrt(len(est.log_px))),
            f"{prefix}rows": int(len(est.log_px)), "is_samples": est.particles}


def report(result) -> dict:
    """Training rows (at most :data:`REPORT_ROWS`, a fixed subset), per row in nats: ``train_elbo``, the
    importance-sampled ``train_log_px`` (K = the ``is_samples`` setting), their ``train_gap`` and the standard
    error of the mean log p(x)."""
    x = result.data[result.spec.data.features]
    if len(x) > REPORT_ROWS:
        x = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(0), device="cpu")[:REPORT_ROWS].to(x.device)]
    return _summary(estimate_rows(result, x), "train_")


def evaluate(result, test) -> dict:
    """Held-out rows: ``test_elbo``, ``test_log_px`` (importance-sampled), ``test_gap``, per row in nats."""
    summary = _summary(estimate_rows(result, test), "test_")
    summary.pop("is_samples")  # the report's, the same K
    return summary


@torch.no_grad()
def latents(result, data) -> dict:
    """site -> (mean, sd) of q(z | x) per row, each (n, L), for every local latent of the model that ``data``
    have."""
    with result.own_params():
        trace = poutine.trace(guide_of(result)).get_trace(**_features(result, data))
    return {name: (trace.nodes[name]["fn"].mean, trace.nodes[name]["fn"].stddev) for name in result.spec.data.local_latents
            if name in trace.nodes}  # a site of rows the data have none of (labelled ones) is left out


#: A latent unit is active when its posterior means vary over the data by more than this (Burda et al. 2016).
ACTIVE_VARIANCE = 0.01


def active_units(result, data: Dataset, threshold: float = ACTIVE_VARIANCE) -> torch.Tensor:
    """Indices of the latent units whose means of q(z | x) vary over ``data``'s rows by more than ``threshold``
    (Burda et al. 2016): the units the model uses; the others sit at the prior for every row (collapsed)."""
    (mean, _), = _one_latent(result, data).values()
    return (mean.var(0) > threshold).nonzero().squeeze(-1)


def _one_latent(result, data: Dataset) -> dict:
    if result.spec is None or not result.spec.data.local_latents:
        raise ValueError("codes need an amortised fit of a zoo model with one local latent site (a VAE's z); this "
                         "fit has no amortised encoder")
    found = latents(result, data.X)
    if len(found) != 1:
        raise ValueError(f"codes need a model with one local latent site; {result.spec.name} has {sorted(found)}")
    return found


def codes(result, data: Dataset, units=None) -> Dataset:
    """``data`` with its features replaced by the means of q(z | x), (n, L), or of the latent ``units`` (indices,
    e.g. :func:`active_units` of the training rows): the representation an unsupervised model learned, as a data
    set of its own (the target kept), for a second model to fit on (M1+M2: the semi-supervised VAE on a VAE's
    codes; logistic regression on them).

    >>> import pyro_bdl
    >>> fit = pyro_bdl.fit("vae", inference="svi", options={"latent_dim": 2, "hidden": 8}, epochs=2, progress=False)
    >>> rows = pyro_bdl.Dataset("rows", torch.rand(5, 64), torch.arange(5.0))
    >>> z = codes(fit, rows); z.X.shape, z.feature_names, bool(torch.equal(z.y, rows.y))
    (torch.Size([5, 2]), ['z_0', 'z_1'], True)
    >>> codes(fit, rows, units=[1]).feature_names
    ['z_1']
    """
    (name, (mean, _)), = _one_latent(result, data).items()
    units = torch.arange(mean.shape[-1]) if units is None else torch.as_tensor(units, dtype=torch.long).reshape(-1)
    return Dataset(f"{data.name} (codes)", mean[:, units.to(mean.device)], data.y,
                   [f"{name}_{int(j)}" for j in units], data.target_name)


def predict(result, data, particles: int | None = None) -> pd.DataFrame:
    """Per row: ``log_px`` (importance-sampled with ``particles`` draws, default :data:`IS_SAMPLES` whatever the
    fit's setting, so that a fit and its reloaded copy answer alike), its ``log_px_se``, the ``elbo``, and the mean
    and sd of each latent coordinate under q (``z_mean_j``, ``z_sd_j``)."""
    est = estimate_rows(result, data, particles or IS_SAMPLES)
    table = pd.DataFrame({"log_px": est.log_px.cpu().numpy(), "log_px_se": est.log_px_se.cpu().numpy(), "elbo": est.elbo.cpu().numpy()})
    for name, (mean, sd) in latents(result, data).items():
        for label, value in (("mean", mean), ("sd", sd)):
            for j in range(value.shape[-1]):
                table[f"{name}_{label}_{j}"] = value[:, j].cpu().numpy()
    return table


@torch.no_grad()
def class_probabilities(result, data) -> torch.Tensor:
    """q(y | x) per row, (n, C): the probabilities of the model's guide at its enumerated label site (the first
    local latent with a Categorical distribution), all rows taken as unlabelled."""
    with result.own_params():
        trace = poutine.trace(guide_of(result)).get_trace(**_features(result, data))
    site = next(trace.nodes[name] for name in result.spec.data.local_latents
                if name in trace.nodes and hasattr(trace.nodes[name]["fn"], "probs"))
    return site["fn"].probs


def predict_classes(result, data) -> pd.DataFrame:
    """Per row: ``prob_c`` = q(y = c | x) and ``pred``, the most probable class."""
    probs = class_probabilities(result, data)
    table = pd.DataFrame(probs.cpu().numpy(), columns=[f"prob_{c}" for c in range(probs.shape[-1])])
    table["pred"] = probs.argmax(-1).cpu().numpy()
    return table


def evaluate_classifier(result, test) -> dict:
    """Held-out rows with a label (>= 0): ``test_accuracy`` of argmax q(y | x) and ``test_ll``, the mean
    log q(y | x) of the true label."""
    known = test.y >= 0
    probs = class_probabilities(result, test.X[known])
    labels = test.y[known].long()
    return {"test_rows": int(known.sum()), "test_accuracy": float((probs.argmax(-1) == labels).double().mean()),
            "test_ll": float(probs[torch.arange(len(labels)), labels].clamp_min(1e-12).log().mean())}


@torch.no_grad()
def reconstruct(result, data) -> torch.Tensor:
    """The likelihood's mean at the latent means of q(z | x): (n, D), what the model makes of each row."""
    kwargs = _features(result, data)
    means = {name: mean for name, (mean, _) in latents(result, data).items()}
    with result.own_params():
        trace = poutine.trace(poutine.condition(result.model, data=means)).get_trace(**kwargs)
    return trace.nodes[result.likelihood_sites[0]]["fn"].mean


@torch.no_grad()
def simulate(result, num: int, seed: int = 0) -> dict:
    """``num`` new rows from the prior: ``{"x": a draw of x, "mean": the likelihood's mean given the drawn z}``
    (for images the mean is the picture; the draw is noisier)."""
    torch.manual_seed(seed)
    with result.own_params():
        trace = poutine.trace(result.model).get_trace(**{result.spec.data.size: int(num)})
    site = trace.nodes[result.likelihood_sites[0]]
    return {"x": site["value"], "mean": site["fn"].mean}


def square_side(D: int) -> int | None:
    """The side of a square image of ``D`` pixels, or None."""
    side = math.isqrt(D)
    return side if side * side == D else None


def image_grid(ax, images: np.ndarray, side: int, cols: int) -> None:
    """Draw ``images`` (n, side * side) on ``ax`` in a grid of ``cols`` columns, one pixel of space between."""
    rows = math.ceil(len(images) / cols)
    canvas = np.zeros((rows * (side + 1), cols * (side + 1)))  # white between images
    for k, img in enumerate(images):
        r, c = divmod(k, cols)
        canvas[r * (side + 1):r * (side + 1) + side, c * (side + 1):c * (side + 1) + side] = img.reshape(side, side)
    ax.imshow(canvas, cmap="gray_r", interpolation="nearest")
    ax.set_axis_off()


def plots(result, out: Path, test=None) -> list[str]:
    """``reconstructions.png`` (inputs above their reconstructions), ``samples.png`` (from the prior),
    ``latent.png`` (latent means of the held-out rows, else the training rows, coloured by label when there are
    labels; a latent space of more than 2 dimensions is shown on its first two principal axes) and
    ``elbo.png`` (the ELBO per row, per epoch, training and validation)."""
    import matplotlib.pyplot as plt

    out = Path(out)
    rows = test if test is not None else result.data[result.spec.data.features]
    X = rows.X if hasattr(rows, "X") else rows
    labels = getattr(rows, "y", None)
    written = []
    side = square_side(X.shape[1])
    if side is not None:
        show = X[:16]
        fig, axes = plt.subplots(2, 1, figsize=(8, 2.4))
        image_grid(axes[0], show.cpu().numpy(), side, 16)
        image_grid(axes[1], reconstruct(result, show).cpu().numpy(), side, 16)
        axes[0].set_title("inputs (top) and reconstructions: likelihood mean at the mean of q(z | x)", fontsize=9)
        fig.savefig(out / "reconstructions.png", dpi=100)
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(6, 6))
        image_grid(ax, simulate(result, 64)["mean"].cpu().numpy(), side, 8)
        ax.set_title("new images from the prior (likelihood mean)", fontsize=9)
        fig.savefig(out / "samples.png", dpi=100)
        plt.close(fig)
        written += ["reconstructions.png", "samples.png"]
    mean = next(iter(latents(result, X).values()))[0].cpu().numpy()
    axis_names = ["z_0", "z_1"]
    if mean.shape[1] > 2:  # the first two principal axes of the latent means
        centred = mean - mean.mean(0)
        mean = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
        axis_names = ["principal axis 1 of z means", "principal axis 2"]
    fig, ax = plt.subplots(figsize=(6, 5))
    if mean.shape[1] == 1:
        mean = np.column_stack([mean[:, 0], np.zeros(len(mean))])
    if labels is None:
        ax.scatter(mean[:, 0], mean[:, 1], s=4)
    else:
        fig.colorbar(ax.scatter(mean[:, 0], mean[:, 1], s=4, c=labels.cpu().numpy(), cmap="tab10"), ax=ax, label="label")
    ax.set(xlabel=axis_names[0], ylabel=axis_names[1], title="latent means of q(z | x)")
    fig.tight_layout()
    fig.savefig(out / "latent.png", dpi=100)
    plt.close(fig)
    written.append("latent.png")
    history = getattr(result.info, "elbo_history", None)
    if history:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        epochs = np.arange(1, len(history["train"]) + 1)
        ax.plot(epochs, history["train"], label="training (running, per row)")
        if history.get("validation"):
            ax.plot(epochs, history["validation"], label="validation (per row)")
        ax.set(xlabel="epoch", ylabel="ELBO per row (nats)", title="ELBO")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "elbo.png", dpi=100)
        plt.close(fig)
        written.append("elbo.png")
    return written
