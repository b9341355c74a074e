"""Natural gradients for the sparse variational GP's q(v) (issue 51): held-out log predictive density after a fixed
budget of svi steps, natural-gradient steps gamma against Adam on the same guide (``natural_gradient=off``), on a
generated family of regressions (other functions, sizes, input dimensions, noise levels); the collapsed bound under
map (every row at every step, the optimum the svgp approaches) is the reference column.

    python benchmarks/gp_natural_gradient.py                          # the family
    python benchmarks/gp_natural_gradient.py --problems 1 --rows 300 --steps 40 --steps-list 0.1   # a smoke run
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import torch

import pyro_bdl
from gp_marginal_likelihood import FUNCTIONS  # the same generated functions as the marginal-likelihood benchmark


def family(count: int, rows: int | None = None):
    """``count`` problems (name, X, y, X_test, y_test): functions x sizes x dimensions x noise levels, fixed seeds."""
    rng = np.random.default_rng(1)
    out = []
    for k in range(count):
        name = list(FUNCTIONS)[k % len(FUNCTIONS)]
        n = rows or [2000, 5000][k % 2]
        d = [1, 2, 4][(k // 2) % 3]
        noise = [0.05, 0.2, 0.5][k % 3]
        X = rng.uniform(-2, 2, (n + 1000, d))
        y = FUNCTIONS[name](X) + noise * rng.normal(size=n + 1000)
        t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
        out.append((f"{name} n={n} d={d} noise={noise}", t(X[:n]), t(y[:n]), t(X[n:]), t(y[n:])))
    return out


def heldout(fit, X, y) -> float:
    """The mean held-out log predictive density, Gaussian with the predictive mean and sd."""
    table = fit.predict(X)
    mean, sd = np.asarray(table["mean"]), np.asarray(table["sd"])
    return float(np.mean(-0.5 * np.log(2 * math.pi * sd ** 2) - 0.5 * ((y.numpy() - mean) / sd) ** 2))


def run(X, y, inference: str, options: dict, **settings):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        fit = pyro_bdl.fit("gp", {"X": X, "y": y}, inference=inference, options=options, progress=False, seed=0,
                           **settings)
        return fit, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=6)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--inducing", type=int, default=50)
    parser.add_argument("--steps-list", default="off,0.03,0.1,0.3,1.0", help="natural_gradient values to compare")
    args = parser.parse_args(argv)
    values = args.steps_list.split(",")
    options = {"approximation": "svgp", "inducing": args.inducing}
    print(f"# gp_natural_gradient: svgp under svi, {args.steps} steps, batch {args.batch_size}, {args.inducing} "
          f"inducing points; held-out mean log density (seconds); reference: collapsed under map, 500 steps")
    print("| problem | collapsed map | " + " | ".join(f"natural_gradient={v}" for v in values) + " |")
    print("|---|---|" + "---|" * len(values))
    for name, X, y, Xt, yt in family(args.problems, args.rows):
        ref, s = run(X, y, "map", {**options, "approximation": "collapsed"}, steps=500, lr=0.05)
        cells = [f"{heldout(ref, Xt, yt):.4f} ({s:.0f} s)"]
        for v in values:
            fit, s = run(X, y, "svi", options, steps=args.steps, batch_size=args.batch_size, samples=200,
                         natural_gradient=v)
            cells.append(f"{heldout(fit, Xt, yt):.4f} ({s:.0f} s)")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
