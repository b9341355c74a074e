"""``mc-dropout`` and ``concrete-dropout`` (``--method``) on the zoo's networks: the compiled ELBO (``jit=True``, the
networks' default) against the eager one, whole fits at the method's other defaults, on a family of problems.

The compiled training loss equals the eager one at the same draws (``tests/inference/test_bbb_path.py``,
``test_compiled_elbo_equals_the_eager_one_under_dropout``); here, what that buys per fit and whether the fits are as
good.  Problems (``--problems``, all by default; a 75/25 split, seed 0):

* ``friedman-300`` (300 rows, 5 features; noise 1), ``friedman-1000`` (1000, 10; noise 0.5), ``sine-wide``
  (200 rows of the embedded ``sine``, hidden 100): regression, ``bnn-regressor``;
* ``classes3-600`` (600, 10, 3 classes): ``bnn-classifier``;
* ``yacht``, ``concrete`` (UCI split 0, hidden 50, the noise sd 1 / sqrt(tau) at the folder's middle tau) when
  ``--uci`` gives the UCI folder.

Per problem and seed (``--seeds``), the two fits run back to back in one process, alternating which goes first; the
table gives each one's wall seconds, the ratio jit / eager (the median over seeds), and the held-out log
likelihood of each (mean over seeds; the difference is training noise: the two draw different masks).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mc_dropout_jit.py --seeds 0 1 --uci ../shared/data/uci
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mc_dropout_jit.py --method concrete-dropout --uci ../shared/data/uci
    .venv/bin/python benchmarks/mc_dropout_jit.py --quick     # the smoke test: one problem, 60 steps

Results: benchmarks/RESULTS.md, "MC dropout: the compiled ELBO".
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch
from sklearn import datasets

import pyro_bdl
from pyro_bdl.data.embedded import split_dataset
from pyro_bdl.data.table import Dataset
from pyro_bdl.posterior.evaluation import evaluate_fit

PROBLEMS = ("friedman-300", "friedman-1000", "sine-wide", "classes3-600", "yacht", "concrete")


def _table(name: str, X, y) -> Dataset:
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.float32 if np.asarray(y).dtype.kind == "f" else torch.long)
    return Dataset(name, X, y, [f"x{j}" for j in range(X.shape[1])], "y")


def problem(name: str, uci: str | None):
    """(model, train, test, options) of a problem, or None where it needs the UCI folder and none was given."""
    if name.startswith("friedman"):
        n, d, noise = (300, 5, 1.0) if name == "friedman-300" else (1000, 10, 0.5)
        X, y = datasets.make_friedman1(n, d, noise=noise, random_state=0)
        return ("bnn-regressor", *split_dataset(_table(name, X, y), 0.25, seed=0), {"hidden": "50"})
    if name == "sine-wide":
        return ("bnn-regressor", *split_dataset(pyro_bdl.load("sine"), 0.25, seed=0), {"hidden": "100"})
    if name == "classes3-600":
        X, y = datasets.make_classification(600, 10, n_informative=5, n_classes=3, random_state=0)
        return ("bnn-classifier", *split_dataset(_table(name, X, y), 0.25, seed=0, stratify=True), {"hidden": "50"})
    if uci is None:
        return None
    from pyro_bdl.data.uci import load_uci, uci_protocol

    folder = f"{uci}/{name}"
    protocol = uci_protocol(folder)
    train, test = load_uci(folder, 0)
    tau = protocol.tau_values[len(protocol.tau_values) // 2]
    noise = 1 / (math.sqrt(tau) * float(train.y.double().std(unbiased=False)))
    return ("bnn-regressor", train, test, {"hidden": str(protocol.hidden), "noise": str(noise)})


def one_fit(method: str, model: str, train, test, options: dict, jit: bool, seed: int, quick: bool
            ) -> tuple[float, float]:
    settings = {"steps": 60, "samples": 20} if quick else {}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = pyro_bdl.fit(model, train, inference=method, options=options, seed=seed, progress=False,
                              threads=1, jit=jit, **settings)
    seconds = time.perf_counter() - start
    return seconds, float(evaluate_fit(result, test)["test_ll"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", choices=PROBLEMS, default=list(PROBLEMS))
    parser.add_argument("--method", choices=["mc-dropout", "concrete-dropout"], default="mc-dropout")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--uci", help="the UCI folder (yacht, concrete); without it those problems are skipped")
    parser.add_argument("--quick", action="store_true", help="one problem, one seed, 60 steps: the smoke test")
    args = parser.parse_args(argv)
    problems, seeds = (["friedman-300"], [0]) if args.quick else (args.problems, args.seeds)
    print(f"# {args.method}, jit against eager; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch "
          f"{torch.__version__}; load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print("| problem | eager s | jit s | jit / eager (median) | eager test LL | jit test LL |")
    print("|---|---|---|---|---|---|")
    for name in problems:
        made = problem(name, args.uci)
        if made is None:
            print(f"| {name} | (needs --uci) | | | | |")
            continue
        model, train, test, options = made
        runs = {False: [], True: []}
        for k, seed in enumerate(seeds):
            for jit in ((False, True) if k % 2 == 0 else (True, False)):  # alternate which runs first
                runs[jit].append(one_fit(args.method, model, train, test, options, jit, seed, args.quick))
        eager, fast = np.array(runs[False]), np.array(runs[True])
        ratio = statistics.median(fast[:, 0] / eager[:, 0])
        print(f"| {name} | {eager[:, 0].mean():.1f} | {fast[:, 0].mean():.1f} | {ratio:.2f} | "
              f"{eager[:, 1].mean():.3f} | {fast[:, 1].mean():.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
