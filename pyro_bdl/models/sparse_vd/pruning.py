r"""Pruning a network by its posterior noise: :math:`\log\alpha` per weight, the pruned draws, what is kept, figures.

A mean-field Normal guide factor :math:`q(w) = \mathcal N(\mu, \sigma^2)` has :math:`\alpha = \sigma^2 / \mu^2`: the
variance of the multiplicative noise on the weight (Gaussian dropout rate :math:`p = \alpha / (1 + \alpha)`).
Weights with :math:`\log\alpha` above a threshold (Molchanov et al.: 3, i.e. :math:`p > 0.95`) carry
noise, not signal, and are set to zero.  :func:`normal_factors` reads the factors of any guide whose factors
are Normal (traced once; the fit keeps them with its parameters, :data:`PREFIX`), :func:`log_alphas` turns them
into :math:`\log\alpha`, :func:`prune` zeroes the pruned entries of posterior draws, :func:`dense_result`
draws the posterior before pruning,
:func:`kept_summary` counts what is kept, and :func:`plot_log_alpha` / :func:`plot_first_layer` draw the
histogram of :math:`\log\alpha` per layer and the kept weights of the first layer as images.
:func:`pruning_hooks` gives a model these as its spec's ``hooks`` (``posterior``, ``report`` and ``plots``).

Example
-------
>>> import torch
>>> samples = {"layer0.weight": torch.ones(1, 2, 3, 4)}
>>> la = {"layer0.weight": torch.tensor([[5.0, 0.0, 0.0, 0.0]] * 3)}
>>> pruned = prune(samples, la, threshold=3.0)
>>> pruned["layer0.weight"][0, 0, 0].tolist()
[0.0, 1.0, 1.0, 1.0]
>>> kept_summary(la, 3.0)
{'kept_fraction': {'layer0.weight': 0.75}, 'weights': 12, 'kept_weights': 9, 'compression': 1.3333333333333333}
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from pyro import poutine

from pyro_bdl.inference.local_reparam import normal_of
from pyro_bdl.nn.log_uniform import log_alpha
from pyro_bdl.registry import PostFit

__all__ = ["pruning_hooks", "PREFIX", "normal_factors", "factor_params", "factors_from_params", "log_alphas", "prune", "kept_summary",
           "dense_result", "with_draws", "training_quality", "plot_log_alpha", "plot_first_layer", "image_side"]


#: The fit keeps each pruned site's Normal factor in its learned parameters (``params.pt``) under these names
#: (``{PREFIX}{site}.loc`` / ``.scale``): what log alpha, the pruning and the dense posterior are made from,
#: in the session that fitted it or after ``load_fit``.
PREFIX = "posterior."


@torch.no_grad()
def normal_factors(guide, data: dict, sites=None) -> dict:
    """``{site: (loc, scale)}`` (each of the site's shape) for every latent site (of ``sites``, if given) whose
    factor in ``guide`` is Normal; ``guide(**data)`` is traced once."""
    with poutine.block():
        trace = poutine.trace(guide).get_trace(**data)
    out = {}
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site["is_observed"] or (sites is not None and name not in sites):
            continue
        normal = normal_of(site["fn"])
        if normal is not None:
            shape = site["value"].shape
            out[name] = tuple(t.detach().expand(shape).clone() for t in normal)
    return out


def factor_params(factors: dict) -> dict:
    """The factors as named tensors, for the fit's ``params`` (:data:`PREFIX`)."""
    return {f"{PREFIX}{name}.{part}": value for name, pair in factors.items() for part, value in zip(("loc", "scale"), pair)}


def factors_from_params(params: dict) -> dict:
    """The factors back from a fit's ``params``: ``{site: (loc, scale)}``."""
    sites = [k[len(PREFIX):-len(".loc")] for k in params if k.startswith(PREFIX) and k.endswith(".loc")]
    return {name: (params[f"{PREFIX}{name}.loc"], params[f"{PREFIX}{name}.scale"]) for name in sites}


def log_alphas(factors: dict) -> dict:
    """``{site: log alpha}`` of Normal factors ``{site: (loc, scale)}``."""
    return {name: log_alpha(loc, scale) for name, (loc, scale) in factors.items()}


def prune(samples: dict, log_alphas: dict, threshold: float) -> dict:
    """``samples`` (site -> (chains, draws, *shape)) with every entry whose log alpha exceeds ``threshold``
    set to zero in every draw; sites without a log alpha are left as they are."""
    out = dict(samples)
    for name, la in log_alphas.items():
        if name in out:
            out[name] = out[name] * (la <= threshold).to(out[name].dtype)
    return out


def kept_summary(log_alphas: dict, threshold: float) -> dict:
    """The fraction of weights kept per site, the counts, and the compression ratio (weights / kept)."""
    kept = {name: int((la <= threshold).sum()) for name, la in log_alphas.items()}
    total = sum(la.numel() for la in log_alphas.values())
    return {"kept_fraction": {name: kept[name] / la.numel() for name, la in log_alphas.items()},
            "weights": total, "kept_weights": sum(kept.values()),
            "compression": total / max(sum(kept.values()), 1)}


@torch.no_grad()
def dense_result(result, samples: int | None = None):
    """The fit before pruning: a copy of ``result`` (a :class:`~pyro_bdl.result.FitResult` whose ``params`` hold
    its Normal factors, :data:`PREFIX`) with ``samples`` new draws (default: as many as it has) of every
    factor, nothing zeroed.  ``dense_result(fit).predict(X)`` is the dense network's prediction,
    ``fit.predict(X)`` the pruned one's."""
    factors = factors_from_params(result.params)
    if not factors:
        raise ValueError("this fit keeps no Normal posterior factors to draw the dense network from (fitted by a "
                         "point method, or by a guide without Normal factors)")
    num = samples or result.num_draws
    draws = dict(result.samples)
    for name, (loc, scale) in factors.items():
        draws[name] = (loc + scale * torch.randn((num,) + tuple(loc.shape), dtype=loc.dtype, device=loc.device)).unsqueeze(0)
    return with_draws(result, draws)


def with_draws(result, samples: dict):
    """A copy of ``result`` (a :class:`~pyro_bdl.result.FitResult`) whose posterior draws are ``samples`` (site ->
    (chains, draws, *shape)), with nothing cached from the old ones (its training predictive, its InferenceData)
    and no report of them."""
    import dataclasses

    out = dataclasses.replace(result, samples=samples, report={})
    for cached in ("training_predictive", "_idata"):
        out.__dict__.pop(cached, None)
    return out


def training_quality(result) -> dict:
    """The fit on its training data, in the data's units: ``accuracy`` of the mean class probabilities, or
    ``rmse`` of the predictive mean."""
    pred = result.training_predictive
    site = result.likelihood_sites[0]
    observed = np.asarray(pred.observed[site])
    if site in pred.probs:
        probs = pred.probs[site].reshape((-1,) + pred.probs[site].shape[2:]).mean(0)
        return {"accuracy": float(np.mean(probs.argmax(-1) == observed))}
    mean = pred.mean[site].reshape((-1,) + observed.shape).mean(0)
    return {"rmse": float(np.sqrt(np.mean((mean - observed) ** 2)))}


def image_side(size: int) -> int | None:
    """The side of a square image of ``size`` pixels, or None."""
    side = math.isqrt(size)
    return side if side * side == size else None


def plot_log_alpha(log_alphas: dict, threshold: float, path: Path) -> None:
    """A histogram of log alpha per weight site, the pruning threshold marked."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(log_alphas), figsize=(3.2 * len(log_alphas), 3), squeeze=False)
    for ax, (name, la) in zip(axes[0], log_alphas.items()):
        values = la.flatten().clamp(-12, 12).cpu().numpy()
        kept = float((la <= threshold).float().mean())
        ax.hist(values, bins=60, color="C0")
        ax.axvline(threshold, color="C3", lw=1, label=f"threshold {threshold:g}")
        ax.set(title=f"{name}: {100 * kept:.1f}% kept", xlabel="log alpha (clamped to [-12, 12])")
        ax.set_yscale("log")
    axes[0, 0].set_ylabel("weights")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_first_layer(weight: torch.Tensor, path: Path, units: int = 32) -> None:
    """The first layer's kept weights as images (Molchanov et al.'s figure): ``weight`` (out, side * side), zero
    where pruned.  Left: how many weights each input pixel keeps; right: the ``units`` hidden units that keep
    the most, each unit's incoming weights as an image (red positive, blue negative, white pruned)."""
    import matplotlib.pyplot as plt

    side = image_side(weight.shape[-1])
    if side is None:
        raise ValueError(f"the first layer takes {weight.shape[-1]} inputs: not a square image")
    kept = weight != 0
    order = torch.argsort(kept.sum(-1), descending=True)[:units]
    order = order[kept[order].any(-1)]
    cols = max(1, math.ceil(math.sqrt(max(len(order), 1))))
    rows = max(1, math.ceil(len(order) / cols))
    fig = plt.figure(figsize=(4 + 1.1 * cols, max(3.5, 1.1 * rows)))
    grid = fig.add_gridspec(rows, cols + 3)
    ax = fig.add_subplot(grid[:, :3])
    image = ax.imshow(kept.sum(0).reshape(side, side).cpu().numpy(), cmap="viridis")
    fig.colorbar(image, ax=ax, shrink=0.7)
    ax.set(title=f"kept weights per input pixel\n({int(kept.sum())} of {kept.numel()})", xticks=[], yticks=[])
    for k, unit in enumerate(order.tolist()):
        w = weight[unit].reshape(side, side).cpu().numpy()
        scale = float(np.abs(w).max()) or 1.0
        sub = fig.add_subplot(grid[k // cols, 3 + k % cols])
        sub.imshow(w, cmap="RdBu_r", vmin=-scale, vmax=scale)
        sub.set(xticks=[], yticks=[])
        sub.set_title(f"unit {unit}", fontsize=7)
    fig.suptitle(f"first layer, kept weights of the {len(order)} units that keep the most")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def pruning_hooks(option: str = "threshold") -> PostFit:
    """The :class:`~pyro_bdl.registry.PostFit` hooks of a model pruned by its posterior noise, the threshold
    being its option ``option``: ``posterior`` (the draws with log alpha > threshold zeroed, the guide's Normal
    factors kept with the fit's parameters; a point estimate, e.g. MLE's, has none and prunes nothing),
    ``report`` (metrics.json: kept fraction per site, compression, the fit on the training data before and
    after pruning, wall time per epoch) and ``plots`` (``log_alpha.png``; ``first_layer.png`` when the first
    site's rows are square images)."""

    def posterior(samples, guide, data, options):
        factors = normal_factors(guide, data, samples) if guide is not None else {}
        return prune(samples, log_alphas(factors), options[option]), factor_params(factors)

    def report(result) -> dict:
        settings, rows = result.record.settings, result.record.rows or len(next(iter(result.data.values())))
        epochs = settings.get("steps", 0) * (settings.get("batch_size") or rows) / rows
        out = {"seconds_per_epoch": result.record.wall_seconds / epochs if epochs else None}  # the whole fit's time
        la = log_alphas(factors_from_params(result.params))
        if la:
            threshold = result.record.options[option]
            out.update(threshold=threshold, **kept_summary(la, threshold))
            out.update({f"train_{k}_dense": v for k, v in training_quality(dense_result(result)).items()})
            out.update({f"train_{k}_pruned": v for k, v in training_quality(result).items()})
        return out

    def plots(result, out_dir, test=None) -> list[str]:
        la = log_alphas(factors_from_params(result.params))
        if not la:
            return []
        plot_log_alpha(la, result.record.options[option], Path(out_dir) / "log_alpha.png")
        first = result.posterior_mean(next(iter(la))).float()  # zero where pruned (zero in every draw)
        first = first.reshape(first.shape[0], -1)  # a unit's incoming weights, or a channel's kernel, as an image
        if image_side(first.shape[-1]) is None:
            return ["log_alpha.png"]
        plot_first_layer(first, Path(out_dir) / "first_layer.png")
        return ["log_alpha.png", "first_layer.png"]

    return PostFit(posterior=posterior, report=report, plots=plots)
