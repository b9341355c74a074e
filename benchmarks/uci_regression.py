r"""UCI regression with the zoo's defaults, next to the published numbers.

Run on demand (needs the UCI folders, e.g. ``../shared/data/uci``; the test suite only runs it on a
tiny folder made in the test)::

    .venv/bin/python benchmarks/uci_regression.py --root ../shared/data/uci \
        --datasets yacht concrete --splits 0 1 2 --methods svi mc-dropout ensemble

Every fit is ``pyro_bdl.fit("bnn-regressor", train, inference=METHOD, seed=0)`` with no options and
no settings but those a ``--methods`` entry names (``mc-dropout:mask=weight``: :func:`method_spec`; else the
defaults of ``pyro-bdl describe bnn-regressor``), the protocol of
:func:`pyro_bdl.data.uci.load_uci` (standardised on the training split) and
:func:`pyro_bdl.posterior.evaluation.evaluate_fit` (RMSE and mean test log-likelihood per point, original units).
One line per fit, then per data set and method the mean +- standard error over the splits, next to
Gal & Ghahramani's MC dropout (Table 1) and Lakshminarayanan et al.'s deep ensembles (from
``shared/REFERENCE.md``; those are over 20 splits, ours over the splits asked for).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

import pyro_bdl
from pyro_bdl.data.uci import load_uci
from pyro_bdl.posterior.evaluation import evaluate_fit

#: Published (RMSE, LL): MC dropout (Gal & Ghahramani 2016, Table 1), deep ensembles (Lakshminarayanan et al. 2017).
PUBLISHED = {
    "yacht": {"mc-dropout": (1.11, -1.55), "ensemble": (1.58, -1.18), "vi (Graves)": (6.89, -3.43)},
    "concrete": {"mc-dropout": (5.23, -3.04), "ensemble": (6.03, -3.06), "vi (Graves)": (7.19, -3.39)},
    "bostonHousing": {"mc-dropout": (2.97, -2.46), "ensemble": (3.28, -2.41), "vi (Graves)": (4.32, -2.90)},
    "energy": {"mc-dropout": (1.66, -1.99), "ensemble": (2.09, -1.38), "vi (Graves)": (2.65, -2.39)},
    "wine-quality-red": {"mc-dropout": (0.62, -0.93), "ensemble": (0.64, -0.94), "vi (Graves)": (0.65, -0.98)},
}


def method_spec(spec: str) -> tuple[str, dict]:
    """A ``--methods`` entry: ``"mc-dropout:mask=weight"`` -> ``("mc-dropout", {"mask": "weight"})``, the settings
    as text (read by :func:`pyro_bdl.fit` as the CLI's ``--set`` is); a bare name has none."""
    name, _, rest = spec.partition(":")
    pairs = [kv.split("=", 1) for kv in rest.split(",") if kv]
    if any(len(kv) != 2 for kv in pairs):
        raise ValueError(f"method spec {spec!r}: settings are KEY=VALUE pairs after ':', separated by ','")
    return name, dict(pairs)


def run(root: str, datasets, splits, methods, progress: bool = False) -> dict:
    """``{(dataset, method): [(rmse, test_ll, seconds), ...]}`` over the splits."""
    results = {}
    for name in datasets:
        for method in methods:
            rows = []
            for split in splits:
                train, test = load_uci(f"{root}/{name}", split)
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    inference, settings = method_spec(method)
                    fit = pyro_bdl.fit("bnn-regressor", train, inference=inference, seed=0, progress=progress,
                                       **settings)
                metrics = evaluate_fit(fit, test)
                seconds = time.perf_counter() - start
                rows.append((metrics["rmse"], metrics["test_ll"], seconds))
                print(f"{name:>10} split {split:2d} {method:>10}: RMSE {metrics['rmse']:.3f}  "
                      f"LL {metrics['test_ll']:.3f}  ({seconds:.0f} s)", flush=True)
                if isinstance(fit.info.get("dropout_p"), dict):  # rates learned per layer
                    print(f"{name:>10} split={split} {method}: learned dropout p "
                          + ", ".join(f"{k} {v:.4f}" for k, v in fit.info["dropout_p"].items()), flush=True)
            results[(name, method)] = rows
    return results


def report(results: dict) -> str:
    lines = ["", f"{'data set':>10} {'method':>11} {'RMSE (ours)':>16} {'LL (ours)':>16}   published RMSE / LL"]
    for (name, method), rows in results.items():
        arr = np.asarray(rows)
        se = arr.std(0, ddof=1) / np.sqrt(len(arr)) if len(arr) > 1 else np.zeros(arr.shape[1])
        pub = PUBLISHED.get(name, {})
        ref = pub.get(method) or (pub.get("vi (Graves)") if method.startswith("svi") else None)
        label = "vi (Graves)" if method.startswith("svi") else method
        ref_text = f"{label}: {ref[0]:.2f} / {ref[1]:.2f}" if ref else "-"
        lines.append(f"{name:>10} {method:>11} {arr[:, 0].mean():9.3f} +- {se[0]:.3f} "
                     f"{arr[:, 1].mean():9.3f} +- {se[1]:.3f}   {ref_text}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="../shared/data/uci", help="folder holding the UCI data set folders")
    parser.add_argument("--datasets", nargs="+", default=["yacht", "concrete"])
    parser.add_argument("--splits", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["svi", "mc-dropout", "ensemble"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: small nets)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(report(run(args.root, args.datasets, args.splits, args.methods)))


if __name__ == "__main__":
    main()
