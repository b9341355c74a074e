"""The residual network with a latent depth (adaptive-depth-resnet) on the digits and MNIST: accuracy, depth and
compute against the full-depth ResNet of the same size over seeds, the three estimators of z, calibration and OOD.

Tables (markdown, to paste into benchmarks/RESULTS.md):

1. per data set (``digits-01``; ``noisy``: the same images with N(0, ``--noise``^2) pixel noise, clipped to [0, 1];
   ``mnist``: the MNIST t10k images split 8,000 / 2,000, when ``--mnist`` names their folder), over ``--seeds``
   seeds (seed s: the split, the noise and both networks' initialisation and batches), mean and spread: the
   full-depth ResNet (same blocks, one head on the last, trained by plain PyTorch with the same Adam, batches,
   epochs and learning-rate schedule) against every decision rule of the model trained with exact enumeration
   (``threshold`` at 0.9, 0.99 and 0.9999), every head read alone, and a ResNet of one block trained alone:
   test accuracy, its difference to the full-depth net (paired by seed: mean and standard error), mean blocks
   run, compute saved; ECE of the depth-marginalised predictive and AUROC of its entropy for noise and rotated
   digits (OOD, digits only), against the full-depth net's softmax; and the training rows' mean exact posterior
   p(z | x, y);
2. the estimators of z (exact enumeration, score function with a baseline, relaxed; and the global depth, DUN),
   seed 0: test accuracy and compute of the ``mode`` rule, the gradient variance of the guide's parameters (at the
   same point: the score-trained fit's parameters, one fixed batch, so only z's draws vary), the mean total
   variation between q(z | x) and the exact p(z | x, y), and the relaxed objective's bias at its final temperature;
3. harder inputs, deeper z (seed 0): the exact posterior mean depth E[z | x, y] and the ``mode`` rule's blocks on
   clean and noisy test images (a model trained on clean ones) and on its correct and misclassified rows; the
   figure ``adaptive_depth.png`` (the posterior over z of a few noisy images and the histograms of chosen depths);
4. the model at its defaults from the command line (``cli``, over ``--seeds`` seeds, digits and MNIST): ``pyro-bdl
   fit adaptive-depth-resnet --data train.npz`` then ``pyro-bdl predict`` on the clean test images and on noisy
   copies at every ``--noise-levels`` sd: held-out accuracy against the full-depth net, mean blocks run on clean,
   noisy and misclassified images; written to ``--results`` (markdown).

    python benchmarks/adaptive_depth.py            # minutes, one thread
    python benchmarks/adaptive_depth.py --quick    # a smoke run (seconds)
    python benchmarks/adaptive_depth.py --only-cli --seeds 3    # table 4 alone
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

#: The MNIST t10k images (benchmarks/vae_mnist.py reads the same folder).
MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"
#: The threshold rule's confidence levels in table 1.
THRESHOLDS = (0.9, 0.99, 0.9999)
#: The repository root (the command-line runs import pyro_bdl from it) and table 4's default file.
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "adaptive_depth.md"

import numpy as np
import pyro
import torch
import torch.nn.functional as F


def noisy(ds, sd: float, seed: int = 0):
    from pyro_bdl.data.table import Dataset

    g = torch.Generator().manual_seed(seed)
    X = (ds.X + sd * torch.randn(ds.X.shape, generator=g)).clamp(0, 1)
    return Dataset(f"{ds.name}-noisy", X, ds.y, list(ds.feature_names), ds.target_name)


def full_depth_net(train, width, blocks, epochs, lr, batch=128, seed=0):
    """The same ResidualHeads trained on its last head only: Adam, ``lr`` held for half the steps, then decayed
    geometrically to lr / 100 (the engine's schedule)."""
    from pyro_bdl.models.adaptive_depth.networks import ResidualHeads

    torch.manual_seed(seed)
    net = ResidualHeads(train.X.shape[1], int(train.y.max()) + 1, width, blocks)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n, y = len(train.X), train.y.long()
    steps = epochs * math.ceil(n / batch)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 if t < steps / 2 else 0.01 ** ((t - steps / 2) / (steps / 2)))
    for _ in range(steps):
        rows = torch.randint(0, n, (batch,))
        loss = F.cross_entropy(net(train.X[rows])[:, -1], y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return net


def entropy(prob):
    return -(prob * prob.clamp_min(1e-12).log()).sum(-1)


def fit_model(train, options, epochs, lr, elbo="enum", seed=0, **settings):
    import pyro_bdl

    return pyro_bdl.fit("adaptive-depth-resnet", train, inference="svi-amortised", options=options, elbo=elbo,
                        epochs=epochs, lr=lr, seed=seed, progress=False, **settings)


def data_sets(name, seed, args):
    """(train, test) of data set ``name`` for ``seed``."""
    import pyro_bdl
    from pyro_bdl.data.embedded import split_dataset

    if name == "mnist":
        from pyro_bdl.data.images import mnist_split

        return mnist_split(args.mnist, seed=seed)
    train, test = split_dataset(pyro_bdl.load("digits-01"), 0.25, seed=seed, stratify=True)
    if name == "noisy digits":
        return noisy(train, args.noise, seed=2 * seed), noisy(test, args.noise, seed=2 * seed + 1)
    return train, test


def ood_sets(test):
    from pyro_bdl.data.embedded import digits_ood

    return {"noise": digits_ood(test, "noise").X / 16.0, "rotated": digits_ood(test, "rotated").X}


def measure(name, seed, args):
    """One seed of table 1: per row label, (accuracy, mean blocks, multiply-adds, ECE, AUROCs); the model's fit."""
    from pyro_bdl.models.adaptive_depth.decisions import RULES, decide
    from pyro_bdl.models.adaptive_depth.networks import multiply_adds
    from pyro_bdl.models.adaptive_depth.report import depth_inputs, posterior_depth
    from pyro_bdl.posterior.uncertainty import auroc, expected_calibration_error

    train, test = data_sets(name, seed, args)
    early = {k: v for k, v in (("validation", args.validation), ("patience", args.patience)) if v is not None}
    fit = fit_model(train, {"width": args.width, "blocks": args.blocks, "rate": args.rate}, args.epochs, args.lr,
                    seed=seed, **early)
    base = full_depth_net(train, args.width, args.blocks, args.epochs, args.lr, seed=seed)
    y = test.y.long()
    ood = ood_sets(test) if name != "mnist" else {}
    with torch.no_grad():
        base_prob = torch.softmax(base(test.X)[:, -1], -1)
        base_ood = [auroc(entropy(base_prob).numpy(), entropy(torch.softmax(base(v)[:, -1], -1)).numpy())
                    for v in ood.values()]
    inp = depth_inputs(fit, test.X)
    L, full = inp.logp.shape[1], inp.full_macs
    rows = {"full-depth ResNet (MAP)": (float((base_prob.argmax(-1) == y).double().mean()), L, full,
                                        expected_calibration_error(base_prob.numpy(), y.numpy()), base_ood)}
    shallow = full_depth_net(train, args.width, 1, args.epochs, args.lr, seed=seed)
    with torch.no_grad():
        shallow_acc = float((shallow(test.X)[:, -1].argmax(-1) == y).double().mean())
    one_block = multiply_adds(inp.data_dim, inp.logp.shape[-1], inp.width, 1, 1)
    rows["ResNet of 1 block (MAP)"] = (shallow_acc, 1, one_block, math.nan, [])
    rules = [(rule, 0.9) for rule in RULES if rule != "threshold"] + [("threshold", t) for t in THRESHOLDS]
    for rule, threshold in rules:
        d = decide(rule, inp.logp, inp.pi, threshold, joint=not inp.learned)
        cal, aurocs = math.nan, []
        if rule == "marginal":
            cal = expected_calibration_error(d.prob.double().numpy(), y.numpy())
            for v in ood.values():
                o = depth_inputs(fit, v)
                aurocs.append(auroc(entropy(d.prob).numpy(), entropy(decide("marginal", o.logp, o.pi).prob).numpy()))
        label = f"adaptive depth, {rule}" + (f" {threshold}" if rule == "threshold" else "")
        rows[label] = (float((d.pred == y).double().mean()), float(d.blocks.double().mean()),
                       float(inp.macs(d, rule).mean()), cal, aurocs)
    for l in range(L):
        rows[f"head {l + 1} alone"] = (float((inp.logp[:, l].argmax(-1) == y).double().mean()), l + 1,
                                       multiply_adds(inp.data_dim, inp.logp.shape[-1], inp.width, l + 1, 1), math.nan,
                                       [])
    train_inp = depth_inputs(fit, train.X)
    posterior = posterior_depth(train_inp, train.y).mean(0)
    return rows, posterior, fit, (train, test)


def table_rules(name, args):
    """Table 1's rows for data set ``name``: every seed, then mean and spread."""
    start = time.time()
    seeds = [measure(name, seed, args) for seed in range(args.seeds)]
    full = seeds[0][0]["full-depth ResNet (MAP)"][2]
    base = np.array([rows["full-depth ResNet (MAP)"][0] for rows, *_ in seeds])
    lines = []
    for label in seeds[0][0]:
        acc = np.array([rows[label][0] for rows, *_ in seeds])
        blocks = np.mean([rows[label][1] for rows, *_ in seeds])
        macs = np.mean([rows[label][2] for rows, *_ in seeds])
        ece = np.mean([rows[label][3] for rows, *_ in seeds])
        aurocs = np.mean([rows[label][4] for rows, *_ in seeds], 0) if seeds[0][0][label][4] else []
        diff = 100 * (acc - base)
        se = diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
        spread = 100 * acc.std(ddof=1) if len(acc) > 1 else math.nan
        lines.append(f"| {name} | {label} | {100 * acc.mean():.2f} +- {spread:.2f} | "
                     + ("" if label.startswith("full") else f"{diff.mean():+.2f} +- {se:.2f}") + f" | {blocks:.2f} | "
                     f"{100 * (1 - macs / full):.0f}% | " + ("" if math.isnan(ece) else f"{ece:.3f}") + " | "
                     + (" | ".join(f"{a:.3f}" for a in aurocs) if len(aurocs) else " | ") + " |")
    posterior = torch.stack([p for _, p, *_ in seeds]).mean(0)
    print(f"({name}: {args.seeds} seeds in {time.time() - start:.0f} s; full-depth accuracy per seed "
          f"{', '.join(f'{100 * b:.1f}' for b in base)}; training rows' mean p(z | x, y) "
          f"{', '.join(f'{p:.3f}' for p in posterior.tolist())})")
    return lines, seeds[0][2], seeds[0][3]


def harder_inputs(fit, test, args, out):
    """Posterior mean depth and chosen blocks on clean vs noisy test images and on correct vs wrong rows."""
    from pyro_bdl.models.adaptive_depth.decisions import decide
    from pyro_bdl.models.adaptive_depth.report import depth_inputs, posterior_depth

    y = test.y.long()
    L = args.blocks
    depths = torch.arange(1, L + 1, dtype=torch.float64)
    rows, shown = [], {}
    for label, X in (("clean", test.X), ("noisy", noisy(test, args.noise, seed=1).X)):
        inp = depth_inputs(fit, X)
        post = posterior_depth(inp, y).double()
        mode = decide("mode", inp.logp, inp.pi)
        right = decide("marginal", inp.logp, inp.pi).pred == y
        mean = (post * depths).sum(-1)
        shown[label] = (post, mode.blocks, X, mode.blocks[mode.pred == y], mode.blocks[mode.pred != y])
        for part, sel in (("all", torch.ones_like(right)), ("correct", right), ("misclassified", ~right)):
            if bool(sel.any()):
                rows.append(f"| {label} | {part} | {int(sel.sum())} | {float(mean[sel].mean()):.3f} | "
                            f"{float(mode.blocks[sel].double().mean()):.3f} |")
    if out is not None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from pyro_bdl.models.adaptive_depth.plots import plot_depth_histogram, plot_depth_posterior

        fig = plt.figure(figsize=(15, 4), layout="constrained")
        left, right = fig.subfigures(1, 2, width_ratios=[1.1, 1])
        post, _, X, _, _ = shown["noisy"]
        mean = (post * depths).sum(-1)
        order = torch.argsort(mean)
        pick = order[torch.linspace(0, len(order) - 1, 4).round().long()]
        plot_depth_posterior(left, post[pick].float(), inp.prior, [f"noisy image {int(k)}, y={int(y[k])}\n"
                                                                   f"E[z|x,y]={float(mean[k]):.2f}" for k in pick],
                             X[pick] if X.shape[1] in (64, 784) else None)
        axes = right.subplots(1, 2)
        plot_depth_histogram(axes[0], {label: shown[label][1] for label in ("clean", "noisy")}, L)
        axes[0].set_title("mode rule: clean vs noisy test images", fontsize=9)
        plot_depth_histogram(axes[1], {"correct": shown["noisy"][3], "misclassified": shown["noisy"][4]}, L)
        axes[1].set_title("mode rule, noisy images: correct vs wrong", fontsize=9)
        fig.savefig(out / "adaptive_depth.png", dpi=90)
        plt.close(fig)
    return rows


def guide_grad_variance(model, guide, loss, batch, draws, warmup=50):
    """Mean per-coordinate variance of the guide parameters' gradient over ``draws`` evaluations on one batch."""
    x, y = batch
    params = [p for name, p in pyro.get_param_store().named_parameters() if name.startswith("adaptive_depth.guide")]
    grads = []
    for k in range(warmup + draws):
        for p in params:
            p.grad = None
        loss.loss_and_grads(model, guide, x, y)
        if k >= warmup:  # after the baseline has warmed up
            grads.append(torch.cat([p.grad.reshape(-1).clone() for p in params]))
    return float(torch.stack(grads).var(0).mean())


def table_estimators(train, test, args):
    from pyro.infer import Trace_ELBO, TraceEnum_ELBO, TraceGraph_ELBO, config_enumerate

    from pyro_bdl.models.adaptive_depth.decisions import decide
    from pyro_bdl.models.adaptive_depth.model import adaptive_depth_resnet, depth_guide
    from pyro_bdl.models.adaptive_depth.report import depth_inputs, posterior_depth

    base = {"width": args.width, "blocks": args.blocks, "rate": args.rate, "num_classes": int(train.y.max()) + 1}
    fits = {}
    for label, options, elbo in (("exact (enum)", {}, "enum"), ("score function (tracegraph)", {"estimator": "score"}, "tracegraph"),
                                 ("relaxed (trace)", {"estimator": "relaxed"}, "trace"),
                                 ("global depth, DUN (enum)", {"depth": "global"}, "enum")):
        start = time.time()
        fits[label] = (fit_model(train, {"width": args.width, "blocks": args.blocks, "rate": args.rate, **options},
                                 args.epochs, args.lr, elbo),
                       time.time() - start)
    # gradient variance at one point: the score-trained fit's parameters, one fixed batch
    score_fit = fits["score function (tracegraph)"][0]
    g = torch.Generator().manual_seed(0)
    rows_ = torch.randperm(len(train.X), generator=g)[:128]
    batch = (train.X[rows_], train.y[rows_])
    variances = {}
    from pyro_bdl.models.adaptive_depth.networks import DepthGuide

    fresh = DepthGuide(args.width, args.blocks)
    for point in ("trained", "fresh"):
        with score_fit.own_params():
            store = pyro.get_param_store()
            if point == "fresh":  # the network trained, the guide at a new random initialisation
                for name, value in fresh.named_parameters():
                    store[f"adaptive_depth.guide$$${name}"] = value.detach().clone()
            for label, est, loss in (("score function (tracegraph)", "score", TraceGraph_ELBO()),
                                     ("score, no baseline (trace)", "score", Trace_ELBO()),
                                     ("relaxed (trace)", "relaxed", Trace_ELBO())):
                kw = {**base, "estimator": est, "temperature": 0.5}
                model = lambda x, y, kw=kw: adaptive_depth_resnet(x, y, **kw)  # noqa: E731
                guide = lambda x, y, kw=kw: depth_guide(x, y, **kw)  # noqa: E731
                for p in store.values():
                    p.requires_grad_(True)
                variances[label, point] = guide_grad_variance(model, guide, loss, batch, args.grad_draws)
    # the relaxed objective's bias at its final temperature: relaxed ELBO - the discrete ELBO, same guide network
    relaxed_fit = fits["relaxed (trace)"][0]
    with relaxed_fit.own_params():
        for p in pyro.get_param_store().values():
            p.requires_grad_(True)
        kw_r = {**base, "estimator": "relaxed", "temperature": 0.5}
        kw_s = {**base, "estimator": "score"}
        x, y = train.X, train.y
        with torch.no_grad():
            relaxed_elbo = -np.mean([Trace_ELBO().loss(lambda x, y: adaptive_depth_resnet(x, y, **kw_r),
                                                      lambda x, y: depth_guide(x, y, **kw_r), x, y)
                                     for _ in range(20)]) / len(x)
            discrete_elbo = -TraceEnum_ELBO(max_plate_nesting=1).loss(
                lambda x, y: adaptive_depth_resnet(x, y, **kw_s), config_enumerate(lambda x, y: depth_guide(x, y, **kw_s)),
                x, y) / len(x)
    lines = []
    for label, (fit, seconds) in fits.items():
        inp = depth_inputs(fit, test.X)
        d = decide("mode", inp.logp, inp.pi, joint=not inp.learned)
        macs = float(inp.macs(d, "mode").mean())
        tv = ""
        if inp.learned and label != "global depth, DUN (enum)":
            tv = f"{float(0.5 * (inp.pi - posterior_depth(inp, test.y)).abs().sum(-1).mean()):.3f}"
        var = " | ".join(f"{variances[label, point]:.3g}" if (label, point) in variances else
                         ("0" if label.startswith("exact") else "") for point in ("fresh", "trained"))
        lines.append(f"| {label} | {float((d.pred == test.y.long()).double().mean()):.3f} | "
                     f"{float(d.blocks.double().mean()):.2f} | {100 * (1 - macs / inp.full_macs):.0f}% | "
                     f"{var} | {tv} | {seconds:.0f} |")
    lines.append("| score, no baseline (trace) | | | | " + " | ".join(
        f"{variances['score, no baseline (trace)', point]:.3g}" for point in ("fresh", "trained")) + " | | |")
    return lines, relaxed_elbo, discrete_elbo


def cli(*argv: str) -> None:
    """Run ``pyro-bdl *argv`` in a new process (one torch thread), from this checkout's sources."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pyro_bdl.cli", *argv], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pyro-bdl {' '.join(argv)} failed:\n{done.stderr[-2000:]}")


def cli_seed(name, seed, args, folder: Path) -> dict:
    """One seed of table 4: fit from the command line at the model's defaults, predict clean and noisy test rows."""
    import pandas as pd

    train, test = data_sets(name, seed, args)
    np.savez(folder / "train.npz", x=train.X.numpy(), y=train.y.numpy().astype(np.int64))
    sets = {"clean": test.X} | {f"noise {sd:g}": noisy(test, sd, seed=1000 + seed).X for sd in args.noise_levels}
    np.savez(folder / "test.npz", x=torch.cat(list(sets.values())).numpy())
    extra = [] if args.cli_flags is None else args.cli_flags
    cli("fit", "adaptive-depth-resnet", "--data", str(folder / "train.npz"), "--test-fraction", "0", "--seed", str(seed),
        "--out", str(folder / "fit"), "--no-progress", "--threads", "1", "--force", *extra)
    cli("predict", str(folder / "fit"), "--data", str(folder / "test.npz"), "--out", str(folder / "pred.csv"))
    table, y, n = pd.read_csv(folder / "pred.csv"), test.y.long().numpy(), len(test.y)
    fitted = json.loads((folder / "fit" / "metrics.json").read_text())  # what the command line fitted
    o, L = fitted["options"], int(fitted["options"]["blocks"])
    base = full_depth_net(train, int(o["width"]), L, int(fitted["settings"]["epochs"]), fitted["settings"]["lr"],
                          seed=seed)
    with torch.no_grad():
        out = {"full": float((base(test.X)[:, -1].argmax(-1).numpy() == y).mean()), "blocks": L}
    for k, label in enumerate(sets):
        part = table.iloc[k * n:(k + 1) * n]
        wrong = part["pred"].to_numpy() != y
        out[label] = (float((~wrong).mean()), float(part["blocks"].mean()))
        if label == "clean":
            out["misclassified"] = float(part["blocks"][wrong].mean()) if wrong.any() else math.nan
            out["misclassified rows"] = int(wrong.sum())
    return out


def table_cli(names, args) -> list[str]:
    """Table 4: per data set, mean +- se over seeds of each quantity; the markdown lines."""
    lines = ["| data | full-depth net accuracy (%) | model accuracy, clean (%) | difference (points, mean +- se) | "
             "mean blocks, clean | misclassified clean rows: mean blocks (rows) | "
             + " | ".join(f"noise sd {sd:g}: mean blocks (accuracy %)" for sd in args.noise_levels) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(args.noise_levels)]
    for name in names:
        start = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            seeds = [cli_seed(name, s, args, Path(tmp)) for s in range(args.cli_seeds)]
        mean = lambda f: float(np.mean([f(r) for r in seeds]))  # noqa: E731
        diff = np.array([100 * (r["clean"][0] - r["full"]) for r in seeds])
        se = diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
        noise = " | ".join(f"{mean(lambda r, k=k: r[k][1]):.2f} ({100 * mean(lambda r, k=k: r[k][0]):.1f})"
                           for k in (f"noise {sd:g}" for sd in args.noise_levels))
        lines.append(f"| {name} | {100 * mean(lambda r: r['full']):.2f} | {100 * mean(lambda r: r['clean'][0]):.2f} | "
                     f"{diff.mean():+.2f} +- {se:.2f} | {mean(lambda r: r['clean'][1]):.2f} of {seeds[0]['blocks']} | "
                     f"{np.nanmean([r['misclassified'] for r in seeds]):.2f} "
                     f"({sum(r['misclassified rows'] for r in seeds)}) | {noise} |")
        print(f"({name}, command line: {args.cli_seeds} seeds in {time.time() - start:.0f} s; per seed, difference to "
              f"the full-depth net {', '.join(f'{d:+.2f}' for d in diff)} points)")
    return lines


def write_cli_table(lines, names, args, argv, seconds) -> None:
    path = Path(args.results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Adaptive depth at its defaults, from the command line (issue 34)\n\n"
        f"    python benchmarks/adaptive_depth.py {' '.join(argv)}\n\n"
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.machine()}, 2 shared CPU cores, "
        f"one torch thread; torch {torch.__version__}, Pyro {pyro.__version__}; wall time {seconds:.0f} s.  Data "
        f"{', '.join(names)}; seeds 0..{args.cli_seeds - 1} (seed s: the split, the noise, both networks' initialisation)."
        "  Per seed: `pyro-bdl fit adaptive-depth-resnet --data train.npz --test-fraction 0 --seed s` (the model's "
        "defaults) and `pyro-bdl predict` of the clean test images and of noisy copies (N(0, sd^2) pixel noise, "
        "clipped to [0, 1]); the full-depth ResNet (same blocks, one head, plain PyTorch, same Adam, batches, epochs "
        "and schedule) on the same split.  Accuracy: mean over seeds; its difference to the full-depth net paired "
        "by seed, mean +- standard error.  Blocks: the mode rule's blocks run per image, mean over images and seeds; "
        "misclassified: the clean test images the model gets wrong (their count over all seeds).\n\n"
        + "\n".join(lines) + "\n")
    print(f"(table 4 written to {path})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny nets, 2 epochs, 2 seeds, no MNIST: a smoke run")
    parser.add_argument("--seeds", type=int, default=5, help="table 1 over seeds 0..seeds-1")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--lr", type=float, default=None, help="Adam's learning rate (default: the model's)")
    parser.add_argument("--validation", type=float, default=None,
                        help="table 1: the fraction of training rows held out for early stopping (default: the model's)")
    parser.add_argument("--patience", type=int, default=None, help="table 1: early stopping's patience in epochs")
    parser.add_argument("--rate", type=float, default=None, help="the geometric prior's rate (default: the model's)")
    parser.add_argument("--noise", type=float, default=0.3, help="pixel noise sd of the noisy variant")
    parser.add_argument("--grad-draws", type=int, default=200)
    parser.add_argument("--mnist", default=str(MNIST), help="folder with t10k-images-idx3-ubyte.gz ('none': skip)")
    parser.add_argument("--out", default=".", help="folder for adaptive_depth.png")
    parser.add_argument("--noise-levels", type=lambda v: [float(t) for t in v.split(",")], default=[0.1, 0.2, 0.3],
                        help="table 4: pixel noise sds of the noisy test copies, comma-separated")
    parser.add_argument("--only-cli", action="store_true", help="table 4 alone (the model's defaults, command line)")
    parser.add_argument("--results", default=str(RESULTS), help="table 4's markdown file")
    args = parser.parse_args(argv)
    args.cli_flags, args.cli_seeds = None, args.seeds
    if args.quick:
        args.width, args.blocks, args.epochs, args.grad_draws, args.seeds, args.mnist = 8, 3, 2, 10, 2, "none"
        args.cli_flags = ["--option", "width=8", "--option", "blocks=3", "--set", "epochs=2"]
        args.cli_seeds = 1
        args.results = str(Path(args.out) / "adaptive_depth.md")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import pyro_bdl

    if args.lr is None:
        args.lr = pyro_bdl.get_model("adaptive-depth-resnet").inference.method_defaults["svi-amortised"]["lr"]
    if args.rate is None:
        args.rate = pyro_bdl.get_model("adaptive-depth-resnet").options["rate"].default
    names = ["digits", "noisy digits"]
    if args.mnist != "none" and (Path(args.mnist) / "t10k-images-idx3-ubyte.gz").exists():
        names.append("mnist")
    else:
        print(f"(no MNIST images in {args.mnist}: MNIST skipped)")
    start = time.time()
    if not args.only_cli:
        tables_1_to_3(names, args)
    cli_names = [n for n in names if n != "noisy digits"]
    print(f"\nThe model at its defaults from the command line, seeds 0..{args.cli_seeds - 1}:\n")
    lines = table_cli(cli_names, args)
    print("\n".join(lines))
    write_cli_table(lines, cli_names, args, sys.argv[1:] if argv is None else list(argv), time.time() - start)


def tables_1_to_3(names, args) -> None:
    """Tables 1-3 (printed) and the figure."""
    print(f"digits-01: 1,347 training, 450 test images (a stratified split per seed); MNIST: 8,000 / 2,000; width "
          f"{args.width}, {args.blocks} blocks, prior rate {args.rate}, {args.epochs} epochs, Adam lr {args.lr}, "
          f"batch 128; seeds 0..{args.seeds - 1}")
    print("\n| data | network / rule | test accuracy (%, mean +- sd) | difference to full depth (points, mean +- se) | "
          "mean blocks | compute saved | ECE | AUROC noise | AUROC rotated |\n|---|---|---|---|---|---|---|---|---|")
    rows, first = [], {}
    for name in names:
        lines, fit, (train, test) = table_rules(name, args)
        rows += lines
        first[name] = (fit, train, test)
    print("\n".join(rows))
    clean_fit, train, test = first["digits"]
    print("\n| test images (model trained on clean) | rows | n | E[z \\| x, y] (exact) | mode rule: mean blocks |\n"
          "|---|---|---|---|---|")
    print("\n".join(harder_inputs(clean_fit, test, args, Path(args.out))))
    lines, relaxed_elbo, discrete_elbo = table_estimators(train, test, args)
    print("\n| estimator of z | test accuracy (mode) | mean blocks | compute saved | guide gradient variance, fresh guide | "
          "trained guide | TV(q(z \\| x), p(z \\| x, y)) | fit seconds |\n|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print(f"\nrelaxed fit, training rows: relaxed ELBO (T = 0.5) {relaxed_elbo:.4f} per row, discrete ELBO with the "
          f"same guide {discrete_elbo:.4f}: bias {relaxed_elbo - discrete_elbo:+.4f} nats per row")


if __name__ == "__main__":
    main()
