"""The residual network with a latent depth (adaptive-depth-resnet) on the digits: accuracy, depth and compute
against the full-depth ResNet of the same size, the three estimators of z, calibration and OOD detection.

Tables (markdown, to paste into benchmarks/RESULTS.md):

1. per data set (``digits-01``, and ``noisy``: the same images with N(0, ``--noise``^2) pixel noise, clipped to
   [0, 1]): the full-depth ResNet (same blocks, one head on the last, trained by plain PyTorch with the same
   Adam, batches, epochs and learning-rate schedule) against every decision rule of the model trained with exact
   enumeration: test accuracy, mean blocks run, multiply-adds per example and compute saved; ECE of the
   depth-marginalised predictive and AUROC of its entropy for noise and rotated digits (OOD), against the
   full-depth net's softmax;
2. the estimators of z (exact enumeration, score function with a baseline, relaxed; and the global depth, DUN):
   test accuracy and compute of the ``mode`` rule, the gradient variance of the guide's parameters (at the same
   point: the score-trained fit's parameters, one fixed batch, so only z's draws vary), the mean total variation
   between q(z | x) and the exact p(z | x, y), and the relaxed objective's bias at its final temperature;
3. harder inputs, deeper z: the exact posterior mean depth E[z | x, y] and the ``mode`` rule's blocks on clean
   and noisy test images (a model trained on clean ones) and on its correct and misclassified rows; the figure
   ``adaptive_depth.png`` (the posterior over z of a few images and the histogram of chosen depths).

    python benchmarks/adaptive_depth.py            # minutes, one thread
    python benchmarks/adaptive_depth.py --quick    # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pyro
import torch
import torch.nn.functional as F


def noisy(ds, sd: float, seed: int = 0):
    from pyro_bdl.data import Dataset

    g = torch.Generator().manual_seed(seed)
    X = (ds.X + sd * torch.randn(ds.X.shape, generator=g)).clamp(0, 1)
    return Dataset(f"{ds.name}-noisy", X, ds.y, list(ds.feature_names), ds.target_name)


def full_depth_net(train, width, blocks, epochs, lr, batch=128, seed=0):
    """The same ResidualHeads trained on its last head only: Adam, ``lr`` held for half the steps, then decayed
    geometrically to lr / 100 (the engine's schedule)."""
    from pyro_bdl.depth_networks import ResidualHeads

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


def fit_model(train, options, epochs, lr, elbo="enum"):
    import pyro_bdl

    return pyro_bdl.fit("adaptive-depth-resnet", train, inference="svi-amortised", options=options, elbo=elbo,
                        epochs=epochs, lr=lr, progress=False)


def ood_sets(test):
    from pyro_bdl.datasets import digits_ood

    return {"noise": digits_ood(test, "noise").X / 16.0, "rotated": digits_ood(test, "rotated").X}


def table_rules(name, train, test, args):
    from pyro_bdl.depth_decisions import RULES, decide
    from pyro_bdl.depth_report import depth_inputs
    from pyro_bdl.uncertainty import auroc, expected_calibration_error

    options = {"width": args.width, "blocks": args.blocks, "rate": args.rate}
    start = time.time()
    fit = fit_model(train, options, args.epochs, args.lr)
    fit_seconds = time.time() - start
    start = time.time()
    base = full_depth_net(train, args.width, args.blocks, args.epochs, args.lr)
    base_seconds = time.time() - start
    y = test.y.long()
    ood = ood_sets(test)
    with torch.no_grad():
        base_prob = torch.softmax(base(test.X)[:, -1], -1)
        base_ood = {k: entropy(torch.softmax(base(v)[:, -1], -1)) for k, v in ood.items()}
    inp = depth_inputs(fit, test.X)
    full = inp.full_macs
    rows = [f"| {name} | full-depth ResNet (MAP) | {float((base_prob.argmax(-1) == y).double().mean()):.3f} | "
            f"{args.blocks:.2f} | {full} | 0% | {expected_calibration_error(base_prob.numpy(), y.numpy()):.3f} | "
            + " | ".join(f"{auroc(entropy(base_prob).numpy(), base_ood[k].numpy()):.3f}" for k in ood) + " |"]
    for rule in RULES:
        d = decide(rule, inp.logp, inp.pi, 0.9, joint=not inp.learned)
        macs = float(inp.macs(d, rule).mean())
        cal = ood_cells = ""
        if rule == "marginal":
            cal = f"{expected_calibration_error(d.prob.double().numpy(), y.numpy()):.3f}"
            cells = []
            for k, v in ood.items():
                o = depth_inputs(fit, v)
                po = decide("marginal", o.logp, o.pi).prob
                cells.append(f"{auroc(entropy(d.prob).numpy(), entropy(po).numpy()):.3f}")
            ood_cells = " | ".join(cells)
        else:
            ood_cells = " | "
        rows.append(f"| {name} | adaptive depth, {rule} | {float((d.pred == y).double().mean()):.3f} | "
                    f"{float(d.blocks.double().mean()):.2f} | {macs:.0f} | {100 * (1 - macs / full):.0f}% | {cal} | "
                    f"{ood_cells} |")
    print(f"({name}: model fit {fit_seconds:.0f} s, full-depth net {base_seconds:.0f} s)")
    return rows, fit


def harder_inputs(fit, test, args, out):
    """Posterior mean depth and chosen blocks on clean vs noisy test images and on correct vs wrong rows."""
    from pyro_bdl.depth_decisions import decide
    from pyro_bdl.depth_report import posterior_depth
    from pyro_bdl.depth_report import depth_inputs

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
        shown[label] = (post, mode.blocks, X)
        for part, sel in (("all", torch.ones_like(right)), ("correct", right), ("misclassified", ~right)):
            if bool(sel.any()):
                rows.append(f"| {label} | {part} | {int(sel.sum())} | {float(mean[sel].mean()):.3f} | "
                            f"{float(mode.blocks[sel].double().mean()):.3f} |")
    if out is not None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
        post, _, X = shown["noisy"]
        order = torch.argsort((post * depths).sum(-1))
        for k in [order[0], order[len(order) // 2], order[-1]]:
            axes[0].plot(depths.numpy(), post[k].numpy(), marker="o", label=f"noisy test image {int(k)}")
        axes[0].set(xlabel="depth z", ylabel="p(z | x, y)", title="posterior over depth (shallowest, median, deepest)")
        axes[0].legend(fontsize=7)
        for ax, label in zip(axes[1:], ("clean", "noisy")):
            blocks = shown[label][1].numpy()
            ax.hist(blocks, bins=np.arange(0.5, L + 1.5), rwidth=0.8)
            ax.set(xlabel="blocks run (mode rule)", ylabel="test images", title=f"{label} test images")
        fig.tight_layout()
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

    from pyro_bdl.depth_decisions import decide
    from pyro_bdl.depth_report import posterior_depth
    from pyro_bdl.depth_report import depth_inputs
    from pyro_bdl.models.adaptive_depth_resnet import adaptive_depth_resnet, depth_guide

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
    from pyro_bdl.depth_networks import DepthGuide

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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny nets, 2 epochs: a smoke run")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--rate", type=float, default=0.5, help="the geometric prior's rate (the model's default 0.5)")
    parser.add_argument("--noise", type=float, default=0.3, help="pixel noise sd of the noisy variant")
    parser.add_argument("--grad-draws", type=int, default=200)
    parser.add_argument("--out", default=".", help="folder for adaptive_depth.png")
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.blocks, args.epochs, args.grad_draws = 8, 3, 2, 10
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import pyro_bdl
    from pyro_bdl.datasets import split_dataset

    train, test = split_dataset(pyro_bdl.load("digits-01"), 0.25, seed=0, stratify=True)
    print(f"digits-01: {len(train.X)} training, {len(test.X)} test images; width {args.width}, {args.blocks} blocks, "
          f"{args.epochs} epochs, Adam lr {args.lr}, batch 128")
    print("\n| data | network / rule | test accuracy | mean blocks | multiply-adds | compute saved | ECE | "
          "AUROC noise | AUROC rotated |\n|---|---|---|---|---|---|---|---|---|")
    rows, clean_fit = table_rules("digits", train, test, args)
    rows2, _ = table_rules("noisy digits", noisy(train, args.noise), noisy(test, args.noise, seed=1), args)
    print("\n".join(rows + rows2))
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
