"""Why one split of the UCI table scores as it does: the method refitted on that split as ``pyro-bdl bench uci``
fits it (the same seed and settings, so the table's test LL again), whether its chains agree (R-hat and bulk ESS of
the scalar sites, each chain's mean, the largest R-hat of any coordinate) where it has several, and the test points
that cost the most log-likelihood.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/uci_split_diagnosis.py --root ../shared/data/uci yacht 12

Results: benchmarks/RESULTS.md, "UCI regression: `nuts` on the five small sets".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import arviz as az
import numpy as np

from pyro_bdl.data.table import DataError
from pyro_bdl.data.uci import load_uci, uci_protocol
from pyro_bdl.posterior.evaluation import gaussian_predictive_draws
from pyro_bdl.posterior.uncertainty import gaussian_tlpd
from pyro_bdl.bench.uci import TUNED, default_root, uci_model, entry_options, protocol_options, split_fit


def diagnose(folder: Path, split: int, entry: str = "nuts", seed: int = 0, worst: int = 5) -> dict:
    """Refit ``entry`` (a method entry of ``bench uci``, not a tuned one) on split ``split`` of ``folder``: -> its test
    LL (the table's), per-point LL (n,), predictive mean and sd (n,), the test rows' targets and inputs, the ``worst``
    points' indices (lowest LL first), and, where the fit has chains, ``sites`` (az.summary of its scalar sites with
    each chain's mean) and ``max_rhat`` over every coordinate."""
    spec = uci_model()
    method, named, settings = entry_options(spec, entry)
    if method in TUNED:
        raise ValueError(f"{method} is chosen among candidates on each split by the table (its rows' `chosen` "
                         f"column); this refits a method at fixed settings: {', '.join(TUNED)} are not")
    train, test = load_uci(folder, split)
    result = split_fit(spec, train, method, protocol_options(spec, uci_protocol(folder), named), settings, seed)
    mu, sd, y = gaussian_predictive_draws(result, test)
    ll = gaussian_tlpd(mu, sd, y)
    out = {"test_ll": float(ll.mean()), "ll": ll, "mean": mu.mean(0), "sd": np.sqrt((sd ** 2).mean(0) + mu.var(0)),
           "y": y, "X": test.X.double().numpy(), "worst": np.argsort(ll)[:worst]}
    posterior = result.to_inference_data().posterior
    if posterior.sizes.get("chain", 1) > 1:
        scalars = [name for name, v in posterior.data_vars.items() if v.ndim == 2]
        sites = az.summary(posterior, var_names=scalars, kind="all") if scalars else None
        if sites is not None:
            means = posterior[scalars].mean("draw")
            sites["chain means"] = [", ".join(f"{m:.4g}" for m in means[name].values) for name in scalars]
        out.update(sites=sites, max_rhat=max(float(v.max()) for v in az.rhat(posterior).data_vars.values()))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a UCI folder's name under --root, e.g. yacht")
    parser.add_argument("split", type=int)
    parser.add_argument("--root", type=Path, default=default_root(), help="the UCI folders (default: as bench uci)")
    parser.add_argument("--method", default="nuts", help="a method entry of bench uci (default nuts)")
    parser.add_argument("--seed", type=int, default=0, help="the table's seed (default 0)")
    parser.add_argument("--worst", type=int, default=5, help="how many of the costliest test points to show")
    args = parser.parse_args(argv)
    if args.root is None:
        parser.error("no UCI folder: give --root (or set PYRO_BDL_UCI)")
    try:
        d = diagnose(args.root / args.dataset, args.split, args.method, args.seed, args.worst)
    except (DataError, ValueError) as error:
        print(f"uci_split_diagnosis: {error}", file=sys.stderr)
        return 2
    n = len(d["y"])
    print(f"{args.dataset} split {args.split}, {args.method}: test LL {d['test_ll']:.3f} on {n} points")
    if d.get("sites") is not None:
        print(d["sites"].to_string())
    if "max_rhat" in d:
        print(f"largest R-hat of any coordinate: {d['max_rhat']:.2f}")
    print("\nthe costliest test points (data units; sd: predictive, noise and spread of the mean):")
    print("| test row | y | predictive mean | sd | LL | share of the split's LL | inputs |")
    print("|---|---|---|---|---|---|---|")
    for i in d["worst"]:
        inputs = " ".join(f"{v:.3g}" for v in d["X"][i])
        print(f"| {i} | {d['y'][i]:.3f} | {d['mean'][i]:.3f} | {d['sd'][i]:.3f} | {d['ll'][i]:.2f} | "
              f"{d['ll'][i] / n:.3f} | {inputs} |")
    rest = np.delete(d["ll"], d["worst"][:2])
    print(f"\ntest LL without the two costliest points: {rest.mean():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
