"""Checks the zoo NUTS kernel's ``compile="auto"`` threshold (``nuts_kernel.COMPILE_AFTER_STEPS``, chosen on the
issue-18 workloads of ``speed_mcmc.py``) on a generated family of other models.

Every model of the family (logistic regressions, non-centred hierarchical normal models and small BNN regressions
of several sizes, on data drawn here with a fixed seed) is sampled three ways: never compiled (the traced steps
only), compiled from the start (``jit=True``) and the default (``auto``: compiled once the run projects past the
threshold).  Each run is a fresh process with its own copy of an inductor cache, so no run reuses another's
compiled code or warmed TorchScript executor: by default that cache holds one warm-up compile of another model (a
machine that has compiled before: inductor's one-time CPU probes are paid), with ``--cold-machine`` it is empty (a
first compile on a machine).  For each model: batched leapfrog steps, seconds of each way, what auto chose, auto's
time over the faster of the other two (1.00: auto chose the faster way, as far as one run shows), the fixed cost
of building the fused steps (tracing; compiling), the cost per step of each, the break-even: the run length in
steps above which compiling pays, and what auto's rule would project at draws 20, 50 and 100 against the run's
own steps.  The last line gives the family's median break-even against the threshold.

Example: ``python benchmarks/compile_threshold.py`` (a few minutes), ``--quick`` (the smoke test).
Results: benchmarks/RESULTS.md, "NUTS speed".
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import NamedTuple


class Run(NamedTuple):
    """One NUTS run: wall seconds, batched leapfrog steps, whether it compiled, seconds spent building the fused
    steps (tracing, and compiling where it did), and the steps auto's rule projects at draws 20 / 50 / 100."""

    seconds: float
    steps: int
    compiled: bool
    building: float
    projected: list


def default_draws(quick: bool) -> tuple[int, int]:
    """(warm-up, sampling) draws of a member that sets none."""
    return (30, 30) if quick else (500, 500)


def logistic(X, y=None):
    import pyro
    import pyro.distributions as dist
    import torch

    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)


def hierarchical(group, y=None, groups=1):
    import pyro
    import pyro.distributions as dist

    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfNormal(2.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(2.0))
    with pyro.plate("groups", groups):
        eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
    with pyro.plate("data", group.shape[0]):
        pyro.sample("y", dist.Normal(mu + tau * eta[group], sigma), obs=y)


def small_bnn(X, y=None, hidden=10):
    import pyro
    import pyro.distributions as dist
    import torch

    w1 = pyro.sample("w1", dist.Normal(torch.zeros(X.shape[1], hidden), 1.0).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(torch.zeros(hidden), 1.0).to_event(1))
    w2 = pyro.sample("w2", dist.Normal(torch.zeros(hidden), 1.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(torch.tanh(X @ w1 + b1) @ w2, sigma), obs=y)


def family(quick: bool):
    """(name, model, data, (warm-up, sampling) draws or None for the run's) of every member; data drawn from a
    fixed seed.  The BNNs' trees are deep from the start, so 100 + 100 draws give them steps enough."""
    import functools

    import torch

    g = torch.Generator().manual_seed(0)
    members = []
    for n, d in ((100, 3),) if quick else ((200, 5), (2000, 5), (500, 25)):
        X = torch.randn(n, d, generator=g)
        y = torch.bernoulli(torch.sigmoid(X @ torch.randn(d, generator=g)), generator=g)
        members.append((f"logistic n={n} d={d}", logistic, {"X": X, "y": y}, None))
    for groups, per in ((4, 5),) if quick else ((8, 10), (50, 4)):
        group = torch.arange(groups).repeat_interleave(per)
        y = 1.0 + 0.7 * torch.randn(groups, generator=g)[group] + torch.randn(len(group), generator=g)
        members.append((f"hierarchical J={groups} n={len(group)}", functools.partial(hierarchical, groups=groups),
                        {"group": group, "y": y}, None))
    for n, hidden in () if quick else ((100, 5), (100, 20)):
        X = torch.linspace(-2, 2, n)[:, None]
        y = torch.sin(2 * X[:, 0]) + 0.2 * torch.randn(n, generator=g)
        draws = (100, 100)
        members.append((f"bnn 1-{hidden}-1 n={n} ({draws[0]}+{draws[1]})", functools.partial(small_bnn, hidden=hidden),
                        {"X": X, "y": y}, draws))
    return members


def run(model, data, mode, warmup, samples, chains) -> Run:
    """One NUTS run on a fresh potential, mode never / always / auto."""
    import pyro

    from pyro_bdl.inference import nuts_kernel, potential
    from pyro_bdl.inference.zoo_mcmc import run_zoo_mcmc

    potential._CACHE.clear()
    threshold = nuts_kernel.COMPILE_AFTER_STEPS
    if mode == "never":
        nuts_kernel.COMPILE_AFTER_STEPS = float("inf")
    pyro.set_rng_seed(0)
    seen, building = [], [0.0]
    original = potential.FlatPotential._fuse

    def timed(self, *args, **kwargs):
        if self not in seen:
            seen.append(self)
        begin = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            building[0] += time.perf_counter() - begin

    potential.FlatPotential._fuse = timed
    per_draw, transition = [], nuts_kernel._nuts_transition

    def counted(dyn, *args, **kwargs):
        before = dyn.potential.evaluations
        out = transition(dyn, *args, **kwargs)
        per_draw.append(dyn.potential.evaluations - before)
        return out

    nuts_kernel._nuts_transition = counted
    try:
        start = time.perf_counter()
        run_zoo_mcmc("nuts", model, data, samples=samples, warmup=warmup, chains=chains, progress=False,
                     jit=mode == "always")
        seconds = time.perf_counter() - start
    finally:
        potential.FlatPotential._fuse = original
        nuts_kernel._nuts_transition = transition
        nuts_kernel.COMPILE_AFTER_STEPS = threshold
    steps = sum(p.evaluations for p in seen)
    compiled = any(compiled for p in seen for (_, compiled) in p._fused)
    return Run(seconds, steps, compiled, building[0], _projections(per_draw))


def _projections(per_draw):
    """The steps auto's rule would project at draws 20 and 50 (steps per draw since half-way there, times the
    draws left), and at draw 100 from draws 75-100, for comparison with the run's own total."""
    left = len(per_draw)
    return [int(sum(per_draw[since:at]) / (at - since) * (left - at)) if left > at else 0
            for at, since in ((20, 10), (50, 25), (100, 75))]


def _one(args):
    """Child process: one (member, mode) run; prints one machine-readable line."""
    import torch

    torch.set_num_threads(args.threads)
    if args.member < 0:  # the cache warm-up: a tiny model compiled (inductor's CPU probes, worker pool)
        name, model, data, _ = family(quick=True)[0]
        run(model, data, "always", 10, 10, args.chains)
        return
    name, model, data, draws = family(args.quick)[args.member]
    warmup, samples = draws or default_draws(args.quick)
    got = run(model, data, args.mode, warmup, samples, args.chains)
    print(f"RESULT {got.seconds} {got.steps} {int(got.compiled)} {got.building} " + " ".join(map(str, got.projected)))


def _child(args, member, mode, cache):
    """Run ``_one`` in a fresh process whose inductor cache is a copy of ``cache``; its RESULT numbers."""
    import shutil
    import subprocess
    import sys

    own = tempfile.mkdtemp(prefix="compile_threshold_run_")
    shutil.copytree(cache, own, dirs_exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=own, OMP_NUM_THREADS=str(args.threads))
    command = [sys.executable, __file__, "--one", str(member), "--mode", mode, "--threads", str(args.threads),
               "--chains", str(args.chains)] + (["--quick"] if args.quick else [])
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    shutil.rmtree(own, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"member {member} mode {mode} failed:\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if member < 0:
        return None
    seconds, steps, compiled, building, *projected = lines[-1].split()[1:]
    return Run(float(seconds), int(steps), bool(int(compiled)), float(building), [int(p) for p in projected])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (the smoke test)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--cold-machine", action="store_true",
                        help="no warm-up compile: every run also pays inductor's one-time start on a machine")
    parser.add_argument("--only", default=None, help="run only the members whose name contains this")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        args.member = args.one
        return _one(args)
    import statistics

    import torch

    from pyro_bdl.inference import nuts_kernel

    warmup, samples = default_draws(args.quick)
    modes = ("never", "auto") if args.quick else ("never", "always", "auto")
    threshold = nuts_kernel.COMPILE_AFTER_STEPS
    print(f"torch {torch.__version__}, threads {args.threads}, {args.chains} chains x ({warmup} + {samples}), "
          f"COMPILE_AFTER_STEPS = {threshold}; each run in its own process with its own copy of an inductor cache "
          + ("left empty (a first run on a machine)" if args.cold_machine or args.quick else
             "holding only a warm-up compile of another model (a machine that has compiled before)"))
    cache = tempfile.mkdtemp(prefix="compile_threshold_cache_")
    if not args.cold_machine and not args.quick:
        _child(args, -1, "always", cache)
    print(f"{'model':32s} {'steps':>8s} " + " ".join(f"{m + ' s':>9s}" for m in modes)
          + "  auto chose  auto/best  build traced/compiled s  us/step traced/compiled  break-even steps")
    evens = []
    for member, (name, _, _, _) in enumerate(family(args.quick)):
        if args.only is not None and args.only not in name:
            continue
        got = {mode: _child(args, member, mode, cache) for mode in modes}
        seconds = {mode: got[mode].seconds for mode in modes}
        best = min(v for k, v in seconds.items() if k != "auto")
        line = (f"{name:32s} {got['never'].steps:8d} " + " ".join(f"{seconds[m]:9.2f}" for m in modes)
                + f"  {'compiled' if got['auto'].compiled else 'traced':>10s}  {seconds['auto'] / best:9.2f}")
        if "always" in got:
            # fixed cost = building the fused steps (tracing; compiling), the rest is per step
            per_step = {m: (got[m].seconds - got[m].building) / got[m].steps for m in ("never", "always")}
            saved = per_step["never"] - per_step["always"]
            even = (got["always"].building - got["never"].building) / saved if saved > 0 else float("inf")
            evens.append(even)
            line += (f"  {got['never'].building:6.2f} / {got['always'].building:6.2f}"
                     f"  {1e6 * per_step['never']:8.1f} / {1e6 * per_step['always']:8.1f}  {even:12.0f}")
        print(line)
        print(f"    never-compiled run: {got['never'].steps} steps; projected at draw 20 / 50 / 100: "
              + " / ".join(str(p) for p in got["never"].projected))
        print(f"ratio auto/best [{name}] = {seconds['auto'] / best:.2f}")
    if evens:
        print(f"break-even steps over the family: median {statistics.median(evens):.0f}, "
              f"min {min(evens):.0f}, max {max(evens):.0f} (COMPILE_AFTER_STEPS = {threshold})")


if __name__ == "__main__":
    main()
