"""What one `nuts` fit of the UCI table costs, and why: per data set, a short run on split 0 through
``pyro_bdl.fit`` as ``pyro-bdl bench uci`` calls it (the protocol's net, 2 chains), with its wall seconds, the
sampling draws' mean tree depth and leapfrog steps, the chains' step sizes, the divergences, and the seconds a
full fit at the method's default length would take at the same cost an iteration.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/uci_nuts_cost.py --root ../shared/data/uci \\
        --datasets yacht bostonHousing concrete energy wine-quality-red --warmup 100 --samples 20

Results: benchmarks/RESULTS.md, "UCI networks: the compiled leaf had been refused".
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from pyro_bdl.data.table import DataError
from pyro_bdl.data.uci import load_uci, uci_protocol
from pyro_bdl.fit import fit
from pyro_bdl.inference.method import get_method
from pyro_bdl.bench.uci import default_root, protocol_options, uci_model


def cost(folder: Path, warmup: int, samples: int, seed: int = 0) -> dict:
    """One short `nuts` fit on split 0 of ``folder``: its seconds and the sampling draws' statistics."""
    spec = uci_model()
    train, _ = load_uci(folder, 0)
    options = protocol_options(spec, uci_protocol(folder), {})
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run's convergence warnings: this measures cost, not the answer
        result = fit(spec.name, train, inference="nuts", options=options, seed=seed, progress=False, threads=1,
                     warmup=warmup, samples=samples)
    seconds = time.perf_counter() - start
    stats = result.to_inference_data().sample_stats
    defaults = get_method("nuts").defaults
    return {"dataset": folder.name, "rows": tuple(train.X.shape), "seconds": seconds,
            "depth": float(stats["tree_depth"].mean()), "steps": float(stats["n_steps"].mean()),
            "step_size": np.round(stats["step_size"].values.mean(axis=1), 5).tolist(),
            "divergences": int(stats["diverging"].sum()),
            "full_fit_s": seconds * (defaults["warmup"] + defaults["samples"]) / (warmup + samples)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=default_root(), help="the UCI folders (default: as bench uci)")
    parser.add_argument("--datasets", nargs="+", default=["yacht", "bostonHousing", "concrete", "energy",
                                                           "wine-quality-red"])
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    if args.root is None:
        parser.error("no UCI folder: give --root (or set PYRO_BDL_UCI)")
    print("| data set | train rows x features | seconds | mean tree depth | mean leapfrog steps | step sizes | "
          "divergences | a full fit at this cost, s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        try:
            row = cost(args.root / name, args.warmup, args.samples)
        except DataError as error:
            print(f"uci_nuts_cost: {error}", file=sys.stderr)
            return 2
        print(f"| {row['dataset']} | {row['rows'][0]} x {row['rows'][1]} | {row['seconds']:.1f} | {row['depth']:.1f} | "
              f"{row['steps']:.0f} | {row['step_size']} | {row['divergences']} | {row['full_fit_s']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
