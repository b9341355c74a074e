r"""Bayes by Backprop on MNIST as Blundell et al. (2015) ran it: 2 x 400, 2 x 800 and 2 x 1200 ReLU nets, the Gaussian
and the scale-mixture priors, each chosen on a validation split, then pruning by the signal-to-noise ratio
|mu| / sigma (the paper's Table 2 and Figure 4; issue 54).

Run on demand (needs the MNIST test set, ``../shared/data/mnist-t10k``)::

    OMP_NUM_THREADS=1 python benchmarks/bbb_mnist.py --out benchmarks/results/bbb_mnist
    python benchmarks/bbb_mnist.py --rows 400 --nets 16 --epochs 1 --grid-epochs 1 --out /tmp/bbb   # a smoke run

The 10,000 official MNIST test images are split with a fixed seed, stratified, into 8,000 training and 2,000 test
images (as ``sparse_vd.py``; the paper trained on the 60,000 training images, so its errors are the reference, not
the target).  The priors' settings are chosen on the first net of ``--nets``, on a validation split of the 8,000
(``--validation`` images held out), ``--grid-epochs`` epochs a candidate: the Gaussian prior's scale s (``bnn-
classifier``'s ``prior_scale``: sd s / sqrt(fan-in)) and the mixture's (pi, sigma1, sigma2) from Blundell's grid
(a subset).  Every fit is ``svi-meanfield`` with local reparameterisation, Adam at ``--lr``, minibatches of
``--batch-size``, the KL term spread evenly over the minibatches (the paper's alternative weighting,
2^(M-i) / (2^M - 1), is not used).

Pruning: the weights and biases of lowest |mu| / sigma (over the whole net) are set to zero in every posterior
draw, for each fraction of ``--fractions``; the test error is that of the pruned posterior's predictive.
Writes ``bbb_mnist.md`` (the tables, with the command, date and machine) and ``snr.png`` (the histogram of
log10 |mu| / sigma per prior, and the error against the fraction pruned) to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import pyro_bdl
from pyro_bdl.data.embedded import split_dataset
from pyro_bdl.models.sparse_vd.pruning import normal_factors, prune, with_draws
from pyro_bdl.posterior.evaluation import evaluate_fit
from pyro_bdl.storage.files import atomic_write, atomic_write_text
from sparse_vd import load_mnist  # the same IDX reader and 8k/2k split as the sparse-VD benchmark

#: Blundell et al. (2015), Table 1: test error (%) on MNIST (60k training images), as shared/REFERENCE.md quotes it;
#: Table 2: 95 % of the weights pruned by signal-to-noise at 1.29 %.
PAPER = {("normal", 400): 1.82, ("normal", 800): 1.99, ("normal", 1200): 2.04, ("scale-mixture", 400): 1.36,
         ("scale-mixture", 800): 1.34, ("scale-mixture", 1200): 1.32}
#: The candidates tried on the validation split (a subset of Blundell et al.'s grid for the mixture:
#: pi in {1/4, 1/2, 3/4}, -log sigma1 in {0, 1, 2}, -log sigma2 in {6, 7, 8}).
NORMAL_SCALES = (1.0, 4.0, 8.0)
MIXTURES = ((0.5, 1.0, math.exp(-6)), (0.25, 1.0, math.exp(-7)), (0.75, 1.0, math.exp(-6)),
            (0.5, math.exp(-1), math.exp(-7)))


def fit_net(train, width: int, prior: str, setting, epochs: int, args):
    """``bnn-classifier`` 2 x ``width`` under ``prior`` (its scale s, or the mixture), by svi-meanfield."""
    options = {"hidden": (width, width), "prior": prior}
    options.update({"prior_scale": setting} if prior == "normal" else {"mixture": setting})
    steps = epochs * math.ceil(len(train) / args.batch_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant border pixels; a loss still falling at the end
        return pyro_bdl.fit("bnn-classifier", train, inference="svi-meanfield", options=options, seed=args.seed,
                            progress=False, steps=steps, lr=args.lr, batch_size=args.batch_size, lr_hold=0.5,
                            grad_clamp=math.inf, local_reparam=True, samples=args.samples)


def error(fit, test) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return 100 * (1 - evaluate_fit(fit, test)["accuracy"])


def log_snr(fit) -> dict:
    """``{site: log |mu| / sigma}`` of the fit's mean-field Normal factors."""
    factors = normal_factors(fit.guide, fit.data)
    return {name: loc.abs().log() - scale.log() for name, (loc, scale) in factors.items()}


def pruned(fit, snr: dict, fraction: float):
    """The fit with the ``fraction`` of entries of lowest signal-to-noise ratio zeroed in every draw."""
    if fraction <= 0:
        return fit
    every = torch.cat([v.flatten() for v in snr.values()]).sort().values
    k = round(fraction * len(every))  # the k lowest entries go: those below the (k+1)-th
    threshold = float(every[k]) if k < len(every) else math.inf
    noise = {name: -v for name, v in snr.items()}  # prune() zeroes the entries above its threshold
    return with_draws(fit, prune(fit.samples, noise, -threshold))


def choose(train, args) -> dict:
    """Each prior's setting, chosen by validation error on the first net."""
    fitting, validation = split_dataset(train, args.validation / len(train), seed=1, stratify=True)
    width, chosen, lines = args.nets[0], {}, []
    given = {"normal": args.normal_scale, "scale-mixture": args.mixture}
    for prior, candidates in (("normal", NORMAL_SCALES), ("scale-mixture", MIXTURES)):
        if prior not in args.priors:
            continue
        if given[prior] is not None:  # chosen before (on another net): no grid
            chosen[prior] = given[prior]
            continue
        scores = []
        for setting in candidates:
            start = time.perf_counter()
            e = error(fit_net(fitting, width, prior, setting, args.grid_epochs, args), validation)
            scores.append(e)
            shown = setting if prior == "normal" else ", ".join(f"{v:.4g}" for v in setting)
            lines.append(f"| {prior} | {shown} | {e:.2f} | {time.perf_counter() - start:.0f} |")
            print(lines[-1], flush=True)
        chosen[prior] = candidates[int(np.argmin(scores))]
    return chosen, lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"))
    parser.add_argument("--rows", type=int, help="use the first ROWS images only (smoke runs)")
    parser.add_argument("--nets", type=lambda t: [int(v) for v in t.split(",")], default=[400, 800, 1200])
    parser.add_argument("--priors", type=lambda t: t.split(","), default=["normal", "scale-mixture"])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--grid-epochs", type=int, default=30)
    parser.add_argument("--validation", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--samples", type=int, default=20, help="posterior draws of each fit")
    parser.add_argument("--fractions", type=lambda t: [float(v) for v in t.split(",")], default=[0, 0.5, 0.75, 0.95,
                                                                                                  0.98])
    parser.add_argument("--normal-scale", type=float, help="the normal prior's s, chosen before (skips its grid)")
    parser.add_argument("--mixture", type=lambda t: tuple(float(v) for v in t.split(",")),
                        help="the mixture's pi,sigma1,sigma2, chosen before (skips its grid)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = load_mnist(args.data, args.rows)
    train, test = split_dataset(data, 0.2, seed=0, stratify=True)
    started = time.perf_counter()
    chosen, grid = choose(train, args)
    rows, curves, snrs = [], {}, {}
    for width in args.nets:
        for prior in args.priors:
            start = time.perf_counter()
            fit = fit_net(train, width, prior, chosen[prior], args.epochs, args)
            seconds = time.perf_counter() - start
            snr = log_snr(fit)
            errors = [error(pruned(fit, snr, f), test) for f in args.fractions]
            curves[prior, width], snrs[prior, width] = errors, snr
            paper = PAPER.get((prior, width))
            rows.append(f"| 2 x {width} | {prior} | {errors[0]:.2f} | {'' if paper is None else f'{paper:.2f}'} | "
                        + " | ".join(f"{e:.2f}" for e in errors[1:]) + f" | {seconds:.0f} |")
            print(rows[-1], flush=True)
    _plot(out / "snr.png", snrs, curves, args.fractions)
    command = "python benchmarks/bbb_mnist.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__}"
    settings = "; ".join(f"{p}: {s if p == 'normal' else ', '.join(f'{v:.4g}' for v in s)}" for p, s in chosen.items())
    text = "\n".join([
        "# Bayes by Backprop on MNIST 8k/2k: priors and pruning by signal-to-noise", "",
        f"`{command}`, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; "
        f"{time.perf_counter() - started:.0f} s. {len(train)} training / {len(test)} test images; {args.epochs} "
        f"epochs, minibatches of {args.batch_size}, Adam lr {args.lr}, {args.samples} posterior draws.", "",
        f"Validation ({args.validation} of the training images held out, 2 x {args.nets[0]}, {args.grid_epochs} "
        f"epochs a candidate): test error (%) on the validation images.", "",
        "| prior | setting | validation error (%) | seconds |", "|---|---|---|---|", *grid, "",
        f"Chosen: {settings}.", "",
        "Test error (%) of the posterior predictive, unpruned and with the lowest |mu| / sigma fraction zeroed:", "",
        "| net | prior | error | paper (60k) | " + " | ".join(f"{100 * f:g}% pruned" for f in args.fractions[1:])
        + " | seconds |", "|---|---|---|---|" + "---|" * len(args.fractions), *rows, ""])
    atomic_write_text(out / "bbb_mnist.md", text)
    print(text)


def _plot(path: Path, snrs: dict, curves: dict, fractions) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for (prior, width), snr in snrs.items():
        values = torch.cat([v.flatten() for v in snr.values()]).double() / math.log(10)
        left.hist(values.clamp(-4, 4).numpy(), bins=100, histtype="step", density=True, label=f"2 x {width}, {prior}")
    left.set(xlabel="log10 |mu| / sigma (clamped to [-4, 4])", ylabel="density", title="signal-to-noise ratios")
    left.legend(fontsize=8)
    for (prior, width), errors in curves.items():
        right.plot([100 * f for f in fractions], errors, marker="o", label=f"2 x {width}, {prior}")
    right.set(xlabel="weights pruned (%)", ylabel="test error (%)", title="pruning by |mu| / sigma")
    right.legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)


if __name__ == "__main__":
    main()
