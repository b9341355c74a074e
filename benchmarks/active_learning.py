r"""Active learning in the setting of Gal, Islam & Ghahramani (2017), "Deep Bayesian Active Learning with Image Data".

Their experiment: MNIST, a CNN with MC dropout, 20 balanced initial labels, 10 acquired per round from a pool, the
labels it takes to reach a test error of 10% and 5% (their Table 1, for 60k MNIST with a CNN: BALD 145 / 335,
variation ratios 120 / 295, max entropy 165 / 355, mean std 230 / 695, random 255 / 835).  Ours: the zoo's
``bnn-classifier`` (an MLP, 50 hidden units) with ``mc-dropout`` on

* ``digits``: scikit-learn's 8x8 digits, the embedded split (1,347 pool rows, 450 test rows);
* ``mnist``: the 10k MNIST test set split 8,000 pool / 2,000 test (``--mnist``, default ``../shared/data/mnist-t10k``;
  skipped where absent);
* ``uci``: a UCI regression (``--uci``, default ``../shared/data/uci/concrete``, split 0: its training rows are the
  pool), ``bnn-regressor`` with max predictive variance against random.

Every run: ``pyro_bdl.workflows.active_learning.compare_acquisitions`` with the settings printed in the table's
header; each run is kept in a checkpoint under ``--out`` as it goes, so an interrupted benchmark resumes.  Writes
``active_learning.md`` (labels to reach each target per seed, the final metrics) and ``active_learning_<case>.png``
(the learning curves, the band over seeds) to ``--out``::

    .venv/bin/python benchmarks/active_learning.py --cases digits mnist uci --seeds 3 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from datetime import date
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pyro_bdl.data.embedded import digits_split  # noqa: E402
from pyro_bdl.data.images import mnist_split  # noqa: E402
from pyro_bdl.data.uci import load_uci  # noqa: E402
from pyro_bdl.workflows.active_learning import compare_acquisitions, labels_to_reach, plot_learning_curves  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: What the paper reports, for the table's header (their Table 1; not in shared/REFERENCE.md: quoted from the paper).
PAPER = ("The paper (60k MNIST, a CNN with MC dropout, 20 balanced initial labels, 10 per round): labels to 10% / 5% "
         "test error: BALD 145 / 335, variation ratios 120 / 295, max entropy 165 / 355, mean std 230 / 695, random "
         "255 / 835.")
#: Test accuracy targets (classification) and RMSE targets as a multiple of the last random round's (regression).
TARGETS = {"digits": ("accuracy", (0.90, 0.95)), "mnist": ("accuracy", (0.80, 0.85, 0.90))}


def cases(args) -> dict:
    """case -> (model, pool, test, acquisitions), for the cases asked for whose data are here."""
    found = {}
    if "digits" in args.cases:
        found["digits"] = ("bnn-classifier", *digits_split(), ("bald", "entropy", "random"))
    if "mnist" in args.cases:
        if Path(args.mnist).exists():
            found["mnist"] = ("bnn-classifier", *mnist_split(args.mnist), ("bald", "entropy", "random"))
        else:
            print(f"mnist: {args.mnist} not found; skipped")
    if "uci" in args.cases:
        if Path(args.uci).exists():
            found["uci"] = ("bnn-regressor", *load_uci(args.uci, 0), ("variance", "random"))
        else:
            print(f"uci: {args.uci} not found; skipped")
    return found


def reach_table(history, case: str) -> list[str]:
    """Markdown rows: per acquisition, the labels to reach each target per seed and their mean."""
    metric, targets = TARGETS.get(case, ("rmse", ()))
    if not targets:  # regression: the final random RMSE, and 1.1 times it
        final = history[(history["acquisition"] == "random") & (history["round"] == history["round"].max())]
        targets = (round(float(final["rmse"].mean()) * 1.1, 3), round(float(final["rmse"].mean()), 3))
    lines = [f"| acquisition | {' | '.join(f'labels to {metric} {t}' for t in targets)} | final {metric} |",
             "|---|" + "---|" * (len(targets) + 1)]
    for name, runs in history.groupby("acquisition", sort=False):
        cells = []
        for target in targets:
            each = [labels_to_reach(run, metric, target) for _, run in runs.groupby("seed")]
            shown = ", ".join("-" if n is None else str(n) for n in each)
            reached = [n for n in each if n is not None]
            mean = f"{np.mean(reached):.0f}" if len(reached) == len(each) else "not all reached"
            cells.append(f"{mean} ({shown})")
        last = runs[runs["round"] == runs["round"].max()][metric]
        lines.append(f"| {name} | {' | '.join(cells)} | {last.mean():.3f} +- {last.std(ddof=1) if len(last) > 1 else 0:.3f} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["digits", "mnist", "uci"], choices=["digits", "mnist", "uci"])
    parser.add_argument("--mnist", default=str(ROOT.parent / "shared" / "data" / "mnist-t10k"))
    parser.add_argument("--uci", default=str(ROOT.parent / "shared" / "data" / "uci" / "concrete"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20, help="acquisition rounds (10 labels each)")
    parser.add_argument("--mnist-rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=1000, help="mc-dropout optimisation steps per round's fit")
    parser.add_argument("--p", type=float, default=0.25, help="dropout rate (Gal et al.: 0.25 and 0.5 in their CNN)")
    parser.add_argument("--samples", type=int, default=50, help="dropout draws that score the pool")
    parser.add_argument("--batch-mode", default="top", choices=["top", "stochastic"],
                        help="top (Gal et al.'s) or stochastic batches")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = [f"# Active learning (Gal, Islam & Ghahramani 2017, in our setting)", "",
              f"Command: `python benchmarks/active_learning.py {' '.join(sys.argv[1:] if argv is None else argv)}`  ",
              f"Date: {date.today()}; machine: {platform.machine()}, {os.cpu_count()} CPU cores; "
              f"mc-dropout p={args.p}, {args.steps} steps per fit, {args.samples} dropout draws; 20 initial labels "
              f"(balanced over the classes), 10 acquired per round ({args.batch_mode} batches), every round's fit from scratch; "
              f"{args.seeds} seeds.", "", PAPER, ""]
    for case, (model, pool, test, acquisitions) in cases(args).items():
        start = time.perf_counter()
        rounds = args.mnist_rounds if case == "mnist" else args.rounds
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history = compare_acquisitions(
                model, pool, "mc-dropout", acquisitions, seeds=range(args.seeds), test=test, initial=20, batch=10,
                rounds=rounds, batch_mode=args.batch_mode, progress=False,
                checkpoint=out / f".al-{case}-{{acquisition}}-{{seed}}.json",
                steps=args.steps, p=args.p, samples=args.samples)
        seconds = time.perf_counter() - start
        history.to_csv(out / f"active_learning_{case}.csv", index=False)
        metric = "accuracy" if case in TARGETS else "rmse"
        ax = plot_learning_curves(history, metric)
        ax.set_title(f"{case}: {model} / mc-dropout, pool {len(pool)}, test {len(test)}")
        ax.figure.savefig(out / f"active_learning_{case}.png", dpi=110, bbox_inches="tight")
        plt.close(ax.figure)
        report += [f"## {case}: pool {len(pool)} rows, test {len(test)} rows, {rounds} rounds ({seconds / 60:.1f} min)",
                   "", *reach_table(history, case), "", f"![{case}](active_learning_{case}.png)", ""]
        print("\n".join(report[-6:]), flush=True)
    (out / "active_learning.md").write_text("\n".join(report) + "\n")
    print(f"wrote {out / 'active_learning.md'}")


if __name__ == "__main__":
    main()
