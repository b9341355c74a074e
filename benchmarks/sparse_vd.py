r"""Sparse variational dropout on MNIST: LeNet-300-100's compression and test error against the dense nets
trained the same way, next to Molchanov, Ashukha & Vetrov (2017).

Run on demand (needs the MNIST test set, ``../shared/data/mnist-t10k``; the test suite runs it on a tiny
IDX folder made in the test)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sparse_vd.py --data ../shared/data/mnist-t10k

The 10,000 official MNIST *test* images are split with a fixed seed, stratified, into 8,000 training and
2,000 test images (the 60,000 training images are not available here; the paper trains on them, so its
numbers are the reference, not the target).  Every net is 784-300-100-10 (LeNet-300-100), fitted by
``pyro_bdl.fit(MODEL, train, inference="svi-meanfield", ...)`` with the same epochs, minibatch size,
learning rate and schedule: ``sparse-vd`` (log-uniform prior, local reparameterisation, pruning at
log alpha > 3), the dense Bayes-by-Backprop net ``bnn-classifier`` (normal prior, local
reparameterisation), and the dense point net ``bnn-classifier`` fitted by ``mle`` (no prior: the paper's
dense baseline is a plain network).  One line per fit, then the ratios of sparse VD to each dense net.
``--lenet5 CHANNELS:KERNEL:HIDDEN`` fits the convolutional ``sparse-vd-lenet5`` alone (the zoo has no dense
convolutional net to set beside it).
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import pyro_bdl
from pyro_bdl.data.embedded import split_dataset
from pyro_bdl.data.images import read_idx
from pyro_bdl.data.table import Dataset
from pyro_bdl.models.sparse_vd.pruning import dense_result
from pyro_bdl.posterior.evaluation import evaluate_fit

#: Molchanov et al. (2017), Table 1, LeNet-300-100 on the full MNIST (60k training images): test error (%) and
#: compression (weights / non-zero weights); also in shared/REFERENCE.md.
PAPER = {"dense": (1.64, 1.0), "sparse-vd": (1.92, 68.0), "sparsity_per_layer": "98.9-97.2-62.0%"}


def load_mnist(folder: str | Path, rows: int | None = None) -> Dataset:
    """MNIST from its IDX files in ``folder`` (t10k-images / t10k-labels): X (n, 784) in [0, 1], y (n,)."""
    folder = Path(folder)
    images = read_idx(next(folder.glob("*images-idx3-ubyte*")))
    labels = read_idx(next(folder.glob("*labels-idx1-ubyte*")))
    if len(images) != len(labels):
        raise ValueError(f"{folder}: {len(images)} images but {len(labels)} labels")
    X = torch.tensor(images.reshape(len(images), -1), dtype=torch.float32) / 255.0
    y = torch.tensor(labels, dtype=torch.float32)
    if rows is not None:
        X, y = X[:rows], y[:rows]
    side = images.shape[1]
    return Dataset("mnist", X, y, [f"pixel_{i // side}_{i % side}" for i in range(X.shape[1])], "label")


def fit_one(name: str, model: str, inference: str, train, test, args, options=None) -> dict:
    steps = args.epochs * math.ceil(len(train) / args.batch_size)
    # the networks' SVI schedule (rate held for half the steps, no gradient clamp) for every net
    settings = {"steps": steps, "lr": args.lr, "batch_size": args.batch_size, "grad_clamp": math.inf, "lr_hold": 0.5}
    if inference == "svi-meanfield":
        settings.update(local_reparam=True, samples=args.samples)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = pyro_bdl.fit(model, train, inference=inference, options=options or {"hidden": args.hidden}, seed=args.seed,
                           progress=args.progress, **settings)
    seconds = time.perf_counter() - start
    for w in caught:  # a fit that stopped or has not settled says so (constant border pixels: not worth a line)
        if "constant" not in str(w.message):
            print(f"warning [{name}]: {w.message}")
    row = {"name": name, "error": 100 * (1 - evaluate_fit(fit, test)["accuracy"]), "seconds": seconds,
           "seconds_per_epoch": fit.record.wall_seconds / args.epochs, "compression": 1.0, "kept": ""}
    if "compression" in fit.report:
        row["dense_error"] = 100 * (1 - evaluate_fit(dense_result(fit), test)["accuracy"])
        row["compression"] = fit.report["compression"]
        row["kept"] = "-".join(f"{100 * (1 - v):.1f}" for v in fit.report["kept_fraction"].values()) + "% sparsity"
    return row


def epoch_seconds(model: str, train, args, epochs: int) -> float:
    """Wall seconds of one epoch of ``model``'s svi-meanfield fit (local reparameterisation), without the fixed
    costs (compilation, draws): the difference between fits of ``2 * epochs`` and ``epochs``, over ``epochs``."""
    steps = epochs * math.ceil(len(train) / args.batch_size)
    seconds = []
    for n in (steps, 2 * steps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = pyro_bdl.fit(model, train, inference="svi-meanfield", options={"hidden": args.hidden},
                               progress=False, steps=n, lr=args.lr, batch_size=args.batch_size, samples=2,
                               local_reparam=True)
        seconds.append(fit.record.wall_seconds)
    return (seconds[1] - seconds[0]) / epochs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/mnist-t10k", help="folder with the MNIST IDX files")
    parser.add_argument("--rows", type=int, help="use the first ROWS images only (smoke runs)")
    parser.add_argument("--test-fraction", type=float, default=0.2, help="held out (0.2: 8,000 / 2,000)")
    parser.add_argument("--hidden", default="300,100")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=20, help="posterior draws kept (predictions average them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dense", nargs="*", default=["svi-meanfield", "mle"], choices=["svi-meanfield", "mle"],
                        help="dense references to fit (none: sparse VD only)")
    parser.add_argument("--lenet5", metavar="CHANNELS:KERNEL:HIDDEN",
                        help="fit sparse-vd-lenet5 instead, e.g. 20,50:5:500 (LeNet-5-Caffe); no dense conv net here")
    parser.add_argument("--timing-rounds", type=int, default=3,
                        help="rounds of the per-epoch timing of sparse VD against dense BBB, fitted in turn (0: none)")
    parser.add_argument("--timing-epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    data = load_mnist(args.data, args.rows)
    train, test = split_dataset(data, args.test_fraction, seed=0, stratify=True)
    print(f"MNIST t10k split (seed 0, stratified): {len(train)} train / {len(test)} test; {args.hidden} hidden; "
          f"{args.epochs} epochs of minibatches of {args.batch_size}, lr {args.lr}; torch threads {args.threads}")
    if args.lenet5:
        channels, kernel, hidden = args.lenet5.split(":")
        options = {"channels": channels, "kernel": kernel, "hidden": hidden}
        row = fit_one(f"sparse-vd-lenet5 {args.lenet5}", "sparse-vd-lenet5", "svi-meanfield", train, test, args, options)
        print(f"{row['name']:<42} test error {row['error']:.2f}% (before pruning {row['dense_error']:.2f}%)  "
              f"compression {row['compression']:.1f}x  {row['kept']}  {row['seconds_per_epoch']:.2f} s/epoch")
        print("paper (60k training images): LeNet-5 dense 0.80%, sparse VD 0.75% at 280x")
        return
    rows = [fit_one("sparse-vd", "sparse-vd", "svi-meanfield", train, test, args)]
    names = {"svi-meanfield": "dense BBB (bnn-classifier, svi-meanfield)", "mle": "dense point net (bnn-classifier, mle)"}
    rows += [fit_one(names[m], "bnn-classifier", m, train, test, args) for m in args.dense]
    for row in rows:
        dense = f" (before pruning {row['dense_error']:.2f}%)" if "dense_error" in row else ""
        print(f"{row['name']:<42} test error {row['error']:.2f}%{dense}  compression {row['compression']:.1f}x  "
              f"{row['kept']}  {row['seconds_per_epoch']:.2f} s/epoch")
    sparse = rows[0]
    for row in rows[1:]:
        print(f"ratio sparse-vd/{row['name'].split(' (')[0]} [seconds per epoch] = "
              f"{sparse['seconds_per_epoch'] / row['seconds_per_epoch']:.2f}")
        print(f"difference sparse-vd - {row['name'].split(' (')[0]} [test error, points] = "
              f"{sparse['error'] - row['error']:+.2f}")
    print(f"paper (60k training images): dense {PAPER['dense'][0]}%, sparse VD {PAPER['sparse-vd'][0]}% at "
          f"{PAPER['sparse-vd'][1]:.0f}x ({PAPER['sparsity_per_layer']} sparsity per layer)")
    # the seconds per epoch above come from fits run one after another on a shared machine; this times both
    # nets in turn, several rounds, fixed costs removed, and keeps the median ratio
    ratios = []
    for _ in range(args.timing_rounds):
        sparse_s = epoch_seconds("sparse-vd", train, args, args.timing_epochs)
        dense_s = epoch_seconds("bnn-classifier", train, args, args.timing_epochs)
        ratios.append(sparse_s / dense_s)
        print(f"timing round: sparse-vd {sparse_s:.2f} s/epoch, dense BBB {dense_s:.2f} s/epoch")
    if ratios:
        print(f"ratio sparse-vd/dense BBB [seconds per epoch, median of {len(ratios)} rounds in turn] = "
              f"{float(np.median(ratios)):.2f}")


if __name__ == "__main__":
    main()
