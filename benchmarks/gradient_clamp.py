r"""Does the zoo optimiser's elementwise gradient clamp help or hurt Bayes by Backprop?  Fits with and without it.

Run on demand (the test suite smoke-tests it with ``--steps 50 --data sine``)::

    .venv/bin/python benchmarks/gradient_clamp.py --clamps inf 10 --data sine digits yacht concrete \
        --uci-root ../shared/data/uci

:func:`pyro_bdl.inference.svi.make_svi` clamps every gradient entry to ``[-grad_clamp, grad_clamp]``
(Pyro's ClippedAdam ``clip_norm``; the setting's default is ``GRADIENT_CLAMP``, 10, and the networks' SVI
path sets ``inf``, none).  A network's summed-likelihood gradients are about 1e5, so a clamp at 10 makes
Adam close to sign descent; ``benchmarks/bbb_step.py`` shows that it slows the time to a target
log-likelihood by an order of magnitude.  This script fits ``--method`` (default ``svi``) with each
value of ``--clamps`` as its ``grad_clamp`` (``inf`` = no clamp) and otherwise default settings
(``--steps`` overrides the number of steps, ``--set KEY=VALUE ...`` any other setting), seed 0, on

* ``sine``: RMSE to the true curve where the data are, and the gap sd / in-data sd ratio;
* ``digits``: test accuracy, ECE and the AUROC of entropy against noise images and rotated digits;
* ``yacht``, ``concrete`` (needs ``--uci-root``): test RMSE and log-likelihood per point, original
  units, mean and standard error over ``--splits`` (default 0 1 2).

One line per (clamp, data set).  Nothing is asserted: the numbers are for deciding the default.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings

import numpy as np
import torch

import pyro_bdl
import pyro_bdl.inference.svi as svi_module
from pyro_bdl.cli import parse_key_values
from pyro_bdl.data.embedded import digits_ood, digits_split
from pyro_bdl.data.uci import load_uci
from pyro_bdl.posterior.evaluation import classification_report, evaluate_fit
from pyro_bdl.bench.gap import gap_report


def sine_row(method: str, settings: dict) -> str:
    row = gap_report(pyro_bdl.fit("bnn-regressor", "sine", inference=method, seed=0, progress=False, **settings)).row()
    return (f"rmse in data {row['rmse where data are']:.3f}, sd in data {row['sd in data']:.3f}, "
            f"gap/data {row['gap / data']:.2f}")


def digits_row(method: str, settings: dict) -> str:
    train, test = digits_split()
    fit = pyro_bdl.fit("bnn-classifier", train, inference=method, seed=0, progress=False, **settings)
    _, row = classification_report(fit, test, {kind: digits_ood(test, kind) for kind in ("noise", "rotated")})
    return (f"accuracy {row['accuracy']:.3f}, ECE {row['ECE']:.3f}, AUROC noise {row['AUROC noise (entropy)']:.3f}, "
            f"rotated {row['AUROC rotated (entropy)']:.3f}")


def uci_row(name: str, root: str, splits, method: str, settings: dict) -> str:
    rows = []
    for split in splits:
        train, test = load_uci(f"{root}/{name}", split)
        metrics = evaluate_fit(pyro_bdl.fit("bnn-regressor", train, inference=method, seed=0, progress=False,
                                            **settings), test)
        rows.append((metrics["rmse"], metrics["test_ll"]))
    r = np.asarray(rows)
    se = r.std(0, ddof=1) / math.sqrt(len(r)) if len(r) > 1 else np.full(2, math.nan)
    return f"RMSE {r[:, 0].mean():.3f} +- {se[0]:.3f}, LL {r[:, 1].mean():.3f} +- {se[1]:.3f} ({len(r)} splits)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clamps", type=float, nargs="+", default=[math.inf, svi_module.GRADIENT_CLAMP])
    parser.add_argument("--data", nargs="+", default=["sine", "digits"],
                        choices=["sine", "digits", "yacht", "concrete"])
    parser.add_argument("--method", default="svi")
    parser.add_argument("--steps", type=int, help="optimisation steps (default: the method's default)")
    parser.add_argument("--uci-root", help="folder holding the UCI data sets (for yacht, concrete)")
    parser.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="more settings for every fit, e.g. lr_hold=0 (the networks' default is 0.5)")
    args = parser.parse_args(argv)
    if {"yacht", "concrete"} & set(args.data) and not args.uci_root:
        parser.error("yacht and concrete need --uci-root")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=pyro_bdl.ConvergenceWarning)
    extra = {} if args.steps is None else {"steps": args.steps}
    try:
        extra.update(parse_key_values(args.set, "--set"))  # text, read by pyro_bdl.fit as the CLI's --set is
    except ValueError as err:
        parser.error(str(err))
    for clamp in args.clamps:
        settings = {**extra, "grad_clamp": clamp}
        for name in args.data:
            if name == "sine":
                row = sine_row(args.method, settings)
            elif name == "digits":
                row = digits_row(args.method, settings)
            else:
                row = uci_row(name, args.uci_root, args.splits, args.method, settings)
            given = "".join(f"  {k}={v}" for k, v in extra.items())
            print(f"clamp {clamp:g}  {args.method}  {name:<9} {row}{given}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
