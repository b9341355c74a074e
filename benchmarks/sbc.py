"""Simulation-based calibration of the must-show cases: calibrated methods pass, and the check sees the failures it
exists to see.

Cases (``--cases``, all by default):

* ``blr``: the zoo's Bayesian linear regression, known noise 0.5, 20 rows of 2 standard normal inputs, under ``nuts``.
* ``coin``: the zoo's Beta(1, 1)-Bernoulli coin, 10 tosses, under ``nuts``.
* ``eight_schools``: eight schools, non-centred, written here as a user writes a Pyro program (the schools' standard
  errors as data, ``theta`` a ``pyro.deterministic`` site, not ranked), under ``nuts``.
* ``svi_correlated``: the zoo's blr on two nearly collinear inputs (correlation about 0.995: the posterior of
  ``w`` is a narrow ridge, correlation near -1) under the mean-field ``svi-meanfield``: its marginals are far too
  narrow (about 1 / sqrt(1 - rho^2) times too narrow along w), so the ranks pile at both ends.
* ``laplace_skewed``: a Poisson rate with a Gamma(0.5, 1) prior and one count, under ``laplace``: for a count of 0
  (about 7 in 10 prior draws) the posterior Gamma(0.5, 2) is so skewed in log-space (Pyro's unconstrained
  coordinates) that the Gaussian at its mode sits too high and is too narrow: ranks low and at the ends.

``python benchmarks/sbc.py --n 200 --workers 1`` writes benchmarks/results/sbc.md (the command, date, machine, wall
time and a row per case and site entry: chi-square p-value, simultaneous ECDF test p-value, in the band, shape) and a
figure per case, benchmarks/results/sbc_<case>.png (ECDF differences with their 95% simultaneous bands).
``--n-per-case CASE=N ...`` sets some cases' replications apart from ``--n`` (the results were run with
``--n 200 --n-per-case eight_schools=100 svi_correlated=100 laplace_skewed=100``: eight schools' fits are about
four times longer, and the two failures show at 100 with power 1).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyro_bdl  # noqa: E402

SCHOOLS_SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]


def eight_schools(sigma, y=None):
    """Eight schools, non-centred: mu ~ N(0, 5), tau ~ HalfCauchy(5), eta_j ~ N(0, 1), theta_j = mu + tau eta_j,
    y_j ~ N(theta_j, sigma_j)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", len(sigma)):
        eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
        theta = pyro.deterministic("theta", mu + tau * eta)
        pyro.sample("y", dist.Normal(theta, sigma), obs=y)


def poisson_rate(y=None):
    """A Poisson rate from one count: rate ~ Gamma(0.5, 1), y ~ Poisson(rate)."""
    rate = pyro.sample("rate", dist.Gamma(0.5, 1.0))
    with pyro.plate("counts", 1):
        pyro.sample("y", dist.Poisson(rate), obs=y)


def _inputs(correlated: bool) -> torch.Tensor:
    """20 rows of 2 inputs (fixed seed): standard normal, or the second the first plus 0.1 noise."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(20, 2, generator=generator)
    if correlated:
        x[:, 1] = x[:, 0] + 0.1 * x[:, 1]
    return x


def cases(quick: bool) -> dict:
    """case -> (model, data, method, sbc keyword arguments): the fits' settings (shorter with ``quick``)."""
    mcmc = dict(samples=100, warmup=100) if quick else dict(samples=250, warmup=150)
    schools = dict(samples=100, warmup=100) if quick else dict(samples=250, warmup=250)
    steps = 100 if quick else 400
    return {
        "blr": ("blr", {"X": _inputs(False), "y": None}, "nuts", dict(options={"noise": 0.5}, **mcmc)),
        "coin": ("coin", {"y": torch.zeros(10)}, "nuts", dict(mcmc)),
        "eight_schools": (eight_schools, {"sigma": torch.tensor(SCHOOLS_SIGMA), "y": None}, "nuts", dict(schools)),
        "svi_correlated": ("blr", {"X": _inputs(True), "y": None}, "svi-meanfield",
                           dict(options={"noise": 0.5}, steps=steps, lr=0.05, jit=True)),
        "laplace_skewed": (poisson_rate, {"y": None}, "laplace", dict(steps=steps, lr=0.05)),
    }


def per_case(pairs: list[str]) -> dict:
    """``["case=N", ...]`` as ``{case: N}``."""
    out = {}
    for pair in pairs:
        case, _, count = pair.partition("=")
        if not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--n-per-case takes CASE=N with N a whole number >= 1, got {pair!r}")
        out[case] = int(count)
    return out


def run(names, n: int, counts: dict, workers: int, draws: int | None, quick: bool, seed: int,
        checkpoints: Path | None = None):
    """Run each case: ``{case: (SBCResult, seconds)}``; with ``checkpoints``, each keeps its finished replications in
    ``checkpoints/sbc_<case>.jsonl`` (a rerun, e.g. for the figures, resumes from them)."""
    table = cases(quick)
    unknown = [name for name in list(names) + list(counts) if name not in table]
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(table)}")
    out = {}
    for name in names:
        model, data, method, kwargs = table[name]
        start = time.perf_counter()
        result = pyro_bdl.sbc(model, data, method, counts.get(name, n), draws=draws, seed=seed,
                              workers=workers, progress=False,
                              checkpoint=None if checkpoints is None else checkpoints / f"sbc_{name}.jsonl", **kwargs)
        out[name] = (result, time.perf_counter() - start)
        print(f"{name}: {len(result.ranks)} replications, L = {result.max_rank}, {out[name][1]:.0f} s, "
              f"{'calibrated' if result.calibrated() else 'NOT calibrated'}", flush=True)
    return out


def report(results: dict, argv: list[str], wall: float) -> str:
    """The markdown report: what ran, where, and a row per case and site entry."""
    lines = ["# Simulation-based calibration", "",
             f"Command: `python benchmarks/sbc.py {' '.join(argv)}`  ",
             f"Date: {datetime.date.today().isoformat()}; machine: {os.cpu_count()} CPU cores ({platform.machine()}, "
             f"torch {torch.__version__}, one torch thread per process); total wall time {wall:.0f} s.", "",
             "Each row: one scalar entry of a latent site; `chi2 p`: Pearson's chi-square of the binned ranks; `ECDF p`: "
             "the simultaneous ECDF test (Säilynoja et al. 2022); `in band`: the ECDF of the fractional ranks stays in "
             "its 95% simultaneous band; a case is calibrated when every entry stays in its band at 0.05 / entries "
             "(Bonferroni).", "",
             "| case | model | method | n | L | wall s | verdict | entry | chi2 p | ECDF p | in band | shape | mean rank | spread |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, (result, seconds) in results.items():
        verdict = "calibrated" if result.calibrated() else "NOT calibrated"
        for entry, row in result.table().iterrows():
            lines.append(f"| {name} | {result.model} | {result.method} | {len(result.ranks)} | {result.max_rank} | "
                         f"{seconds:.0f} | {verdict} | {entry} | {row['chi2_p']:.3g} | {row['ecdf_p']:.3g} | "
                         f"{'yes' if row['in_band'] else 'no'} | {row['shape']} | {row['mean_rank']:.3f} | "
                         f"{row['spread']:.2f} |")
    lines += ["", "Fits per case (divergences, refits for ESS, warnings):", ""]
    for name, (result, _) in results.items():
        lines.append(f"- {name}: " + result.summary().splitlines()[-1])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="replications per case")
    parser.add_argument("--n-per-case", nargs="*", default=[], metavar="CASE=N", help="replications of some cases")
    parser.add_argument("--workers", type=int, default=1, help="processes running replications side by side")
    parser.add_argument("--draws", type=int, default=None, help="posterior draws per replication, L (default 99)")
    parser.add_argument("--cases", nargs="+", default=list(cases(True)), help="which cases")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="folder for sbc.md and figures")
    parser.add_argument("--quick", action="store_true", help="short fits (a smoke run)")
    parser.add_argument("--checkpoints", type=Path, default=None, help="folder keeping each case's replications")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    if args.checkpoints is not None:
        args.checkpoints.mkdir(parents=True, exist_ok=True)
    results = run(args.cases, args.n, per_case(args.n_per_case), args.workers, args.draws, args.quick, args.seed,
                  args.checkpoints)
    wall = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(results, sys.argv[1:] if argv is None else list(argv), wall)
    (args.out / "sbc.md").write_text(text)
    for name, (result, _) in results.items():
        figure = result.plot()
        figure.savefig(args.out / f"sbc_{name}.png", dpi=110)
        matplotlib.pyplot.close(figure)
    print(text)
    print(f"wrote {args.out / 'sbc.md'} and {len(results)} figures")


if __name__ == "__main__":
    main()
