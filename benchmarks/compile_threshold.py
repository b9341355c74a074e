"""Checks the zoo NUTS kernel's ``compile="auto"`` threshold (``mcmc.sampler.COMPILE_AFTER_STEPS``, chosen on the
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

``--replay`` checks the rule itself on more models than the three-way runs can afford: every member of the sets
``family``, ``heldout``, ``fresh`` (generated with other seeds, sizes and kinds of model, among them a correlated
regression and the centred eight schools) and ``workloads`` (speed_mcmc's eight schools, 1-50-1 BNN and demo) is run
once, never compiled, in this process, recording each draw's batched leapfrog steps (counts only: nothing is timed);
auto's rule (``mcmc.sampler.compile_now``) is then replayed on those steps at several thresholds, and each choice
priced with a cost model: a compile's fixed cost F (4, 10, 18, 25 s: a model compiled before, found in inductor's
on-disk cache; a later compile in a process; a first one; a first on a machine) plus the steps before it at the
traced cost and the rest at the compiled cost, per kind of model as the three-way runs measured them.  It prints,
per member, where auto compiles and its cost over the better of never and always, and per threshold the worst and
geometric-mean ratio.  ``--save FILE`` / ``--load FILE`` keep the steps.

Example: ``python benchmarks/compile_threshold.py`` (a few minutes), ``--quick`` (the smoke test),
``--replay --save steps.json`` (~10 min), ``--replay --load steps.json --thresholds 20000 30000``.
Results: benchmarks/RESULTS.md, "NUTS speed" (the threshold in force); the runs that chose it:
benchmarks/history/nuts_speed.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import NamedTuple


class Run(NamedTuple):
    """One NUTS run: wall seconds, batched leapfrog steps, whether it compiled, seconds spent building the fused
    steps (tracing, and compiling where it did), and each draw's batched leapfrog steps."""

    seconds: float
    steps: int
    compiled: bool
    building: float
    per_draw: list


class Member(NamedTuple):
    """A model of a set: its name, Pyro model, data, (warm-up, sampling) draws, chains, maximum tree depth and
    kind (which per-step costs the replay's cost model gives it)."""

    name: str
    model: object
    data: dict
    draws: tuple
    chains: int = 2
    depth: int = 10
    kind: str = "logistic"


#: Microseconds per batched leapfrog step, traced (static runtime) / compiled, per kind: rounded from the three-way
#: runs' own table (benchmarks/history/nuts_speed.md, "a draw's start", the slower host); "regression" sits between its
#: neighbours.
STEP_COST_US = {"logistic": (645, 470), "hierarchical": (515, 185), "bnn": (330, 90), "regression": (580, 330)}
#: A compile's fixed cost in seconds: a model compiled before (inductor's on-disk cache), a later compile in a
#: process, the first in a process, the first on a machine.
COMPILE_COSTS = (4.0, 10.0, 18.0, 25.0)


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


def family(quick: bool) -> list:
    """The members of the three-way runs (the ``family`` set); data drawn from a fixed seed.  The BNNs' trees are
    deep from the start, so 100 + 100 draws give them steps enough."""
    import functools

    import torch

    warmup, samples = default_draws(quick)
    g = torch.Generator().manual_seed(0)
    members = []
    for n, d in ((100, 3),) if quick else ((200, 5), (2000, 5), (500, 25)):
        X = torch.randn(n, d, generator=g)
        y = torch.bernoulli(torch.sigmoid(X @ torch.randn(d, generator=g)), generator=g)
        members.append(Member(f"logistic n={n} d={d}", logistic, {"X": X, "y": y}, (warmup, samples)))
    for groups, per in ((4, 5),) if quick else ((8, 10), (50, 4)):
        group = torch.arange(groups).repeat_interleave(per)
        y = 1.0 + 0.7 * torch.randn(groups, generator=g)[group] + torch.randn(len(group), generator=g)
        members.append(Member(f"hierarchical J={groups} n={len(group)}", functools.partial(hierarchical, groups=groups),
                              {"group": group, "y": y}, (warmup, samples), kind="hierarchical"))
    for n, hidden in () if quick else ((100, 5), (100, 20)):
        X = torch.linspace(-2, 2, n)[:, None]
        y = torch.sin(2 * X[:, 0]) + 0.2 * torch.randn(n, generator=g)
        members.append(Member(f"bnn 1-{hidden}-1 n={n} (100+100)", functools.partial(small_bnn, hidden=hidden),
                              {"X": X, "y": y}, (100, 100), kind="bnn"))
    return members


def linear_regression(X, y=None):
    import pyro
    import pyro.distributions as dist
    import torch

    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), 1.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(X @ w, sigma), obs=y)


def centred_schools(y, sigma):
    import pyro
    import pyro.distributions as dist

    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", len(y)):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def _logistic_member(g, n, d, draws, chains, tag):
    import torch

    X = torch.randn(n, d, generator=g)
    y = torch.bernoulli(torch.sigmoid(X @ torch.randn(d, generator=g)), generator=g)
    return Member(f"{tag} logistic n={n} d={d} {chains}x{draws}", logistic, {"X": X, "y": y}, draws, chains)


def _hierarchical_member(g, groups, per, scale, draws, chains, tag):
    import functools

    import torch

    group = torch.arange(groups).repeat_interleave(per)
    y = 1.0 + scale * torch.randn(groups, generator=g)[group] + torch.randn(len(group), generator=g)
    return Member(f"{tag} hierarchical J={groups} n={len(group)} {chains}x{draws}",
                  functools.partial(hierarchical, groups=groups), {"group": group, "y": y}, draws, chains,
                  kind="hierarchical")


def replay_set(name: str) -> list:
    """The members of a replay set: ``family``, ``heldout`` and ``fresh`` (other seeds, sizes, draws and kinds of
    model) or ``workloads`` (speed_mcmc.py's eight schools, 1-50-1 BNN and demo fit)."""
    import functools

    import torch

    if name == "family":
        return family(quick=False)
    if name == "workloads":
        import speed_mcmc

        from pyro_bdl.data.embedded import load
        from pyro_bdl.registry import get_model

        schools = {"y": torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]),
                   "sigma": torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])}
        sine, bnn = load("sine"), get_model("bnn-regressor")
        X, y = (sine.X - sine.X.mean(0)) / sine.X.std(0), (sine.y - sine.y.mean()) / sine.y.std()
        blr = get_model("blr")
        return [Member("W schools 4x(1000, 1000)", speed_mcmc.eight_schools, schools, (1000, 1000), 4,
                       kind="hierarchical"),
                Member("W bnn 1-50-1 sine 1x(100, 100) depth 8", bnn.bind(bnn.resolve_options({})), {"X": X, "y": y},
                       (100, 100), 1, depth=8, kind="bnn"),
                Member("W demo blr linear 2x(500, 1000)", blr.bind(blr.resolve_options({})),
                       blr.data_kwargs(load("linear")), (500, 1000), kind="regression")]
    g = torch.Generator().manual_seed({"heldout": 1, "fresh": 2}[name])
    tag = name[0].upper()
    if name == "heldout":
        members = [_logistic_member(g, n, d, draws, chains, tag)
                   for n, d, draws, chains in ((1000, 10, (1000, 1000), 2), (100, 40, (500, 500), 4),
                                               (300, 3, (300, 300), 2))]
        members += [_hierarchical_member(g, *spec, tag)
                    for spec in ((20, 5, 0.7, (500, 500), 2), (100, 3, 0.3, (500, 500), 2), (8, 2, 2.0, (1000, 1000), 4))]
        for n, hidden, draws in ((50, 10, (100, 100)), (200, 8, (200, 200))):
            X = torch.linspace(-2, 2, n)[:, None]
            y = torch.cos(3 * X[:, 0]) + 0.1 * torch.randn(n, generator=g)
            members.append(Member(f"{tag} bnn 1-{hidden}-1 n={n} 1x{draws}", functools.partial(small_bnn, hidden=hidden),
                                  {"X": X, "y": y}, draws, 1, kind="bnn"))
        d = 10
        X = torch.randn(200, d, generator=g) @ torch.linalg.cholesky(0.9 * torch.ones(d, d) + 0.1 * torch.eye(d)).T
        y = X @ torch.randn(d, generator=g) + torch.randn(200, generator=g)
        members.append(Member(f"{tag} correlated regression n=200 d=10 2x(500, 500)", linear_regression,
                              {"X": X, "y": y}, (500, 500), kind="regression"))
        return members
    if name == "fresh":
        members = [_logistic_member(g, n, d, draws, chains, tag)
                   for n, d, draws, chains in ((5000, 3, (500, 500), 2), (50, 10, (500, 1000), 4))]
        members += [_hierarchical_member(g, *spec, tag)
                    for spec in ((30, 2, 1.0, (500, 500), 2), (12, 10, 0.2, (1000, 1000), 2))]
        for n, hidden, inputs, draws in ((30, 3, 1, (100, 100)), (100, 10, 2, (150, 150))):
            X = torch.rand(n, inputs, generator=g) * 4 - 2
            y = torch.sin(X.sum(-1)) + 0.3 * torch.randn(n, generator=g)
            members.append(Member(f"{tag} bnn {inputs}-{hidden}-1 n={n} 1x{draws}",
                                  functools.partial(small_bnn, hidden=hidden), {"X": X, "y": y}, draws, 1, kind="bnn"))
        schools = {"y": torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]),
                   "sigma": torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])}
        members.append(Member(f"{tag} centred schools 4x(1000, 1000)", centred_schools, schools, (1000, 1000), 4,
                              kind="hierarchical"))
        return members
    raise ValueError(f"unknown set '{name}': family, heldout, fresh or workloads")


def run(member: Member, mode: str) -> Run:
    """One NUTS run of ``member`` on a fresh potential, mode never / always / auto."""
    import pyro

    from pyro_bdl.inference.mcmc import dynamics, nuts, potential, sampler
    from pyro_bdl.inference.mcmc.zoo import run_zoo_mcmc

    potential._CACHE.clear()
    threshold = sampler.COMPILE_AFTER_STEPS
    if mode == "never":
        sampler.COMPILE_AFTER_STEPS = float("inf")
    pyro.set_rng_seed(0)
    seen, building = [], [0.0]
    original = dynamics.fuse_with

    def timed(flat_potential, *args, **kwargs):
        if flat_potential not in seen:
            seen.append(flat_potential)
        begin = time.perf_counter()
        try:
            return original(flat_potential, *args, **kwargs)
        finally:
            building[0] += time.perf_counter() - begin

    dynamics.fuse_with = timed
    per_draw, transition = [], nuts.transition

    def counted(dyn, *args, **kwargs):
        before = dyn.potential.evaluations
        out = transition(dyn, *args, **kwargs)
        per_draw.append(dyn.potential.evaluations - before)
        return out

    nuts.transition = counted
    warmup, samples = member.draws
    try:
        start = time.perf_counter()
        run_zoo_mcmc("nuts", member.model, member.data, samples=samples, warmup=warmup, chains=member.chains,
                     progress=False, max_tree_depth=member.depth, jit=mode == "always")
        seconds = time.perf_counter() - start
    finally:
        dynamics.fuse_with = original
        nuts.transition = transition
        sampler.COMPILE_AFTER_STEPS = threshold
    steps = sum(p.evaluations for p in seen)
    compiled = any(compiled for p in seen for (_, compiled) in dynamics.fusion_of(p).steps)
    return Run(seconds, steps, compiled, building[0], per_draw)


def compile_draw(per_draw: list, warmup: int, depth: int = 10, threshold: float | None = None) -> int | None:
    """The draw before which auto's rule compiles, replayed on a run's per-draw steps (None: it stays traced);
    ``threshold``: in place of ``COMPILE_AFTER_STEPS``."""
    from pyro_bdl.inference.mcmc import sampler

    saved = sampler.COMPILE_AFTER_STEPS
    if threshold is not None:
        sampler.COMPILE_AFTER_STEPS = threshold
    try:
        counted, total = {0: 0}, len(per_draw)
        for i in range(total):
            counted[i] = counted.get(i - 1, 0) + (per_draw[i - 1] if i > 0 else 0)
            if sampler.compile_now(i, counted, warmup, total, 2 ** depth - 1):
                return i
        return None
    finally:
        sampler.COMPILE_AFTER_STEPS = saved


def priced(per_draw: list, at: int | None, kind: str, fixed: float) -> float:
    """Seconds the cost model gives a run that compiles before draw ``at`` (None: never; 0: from the start)."""
    traced, compiled = (us * 1e-6 for us in STEP_COST_US[kind])
    before = sum(per_draw) if at is None else sum(per_draw[:at])
    return before * traced + (0.0 if at is None else fixed + (sum(per_draw) - before) * compiled)


def replay(args) -> None:
    """The --replay mode: record the sets' per-draw steps (or load them), replay auto's rule, price its choices."""
    import json
    import math

    import torch

    from pyro_bdl.inference.mcmc import sampler

    torch.set_num_threads(args.threads)
    if args.load:
        with open(args.load) as f:
            recorded = json.load(f)
    else:
        recorded = {}
        for set_name in ["quick"] if args.quick else args.sets:
            for member in family(quick=True) if args.quick else replay_set(set_name):
                if args.only is not None and args.only not in member.name:
                    continue
                got = run(member, "never")
                recorded[member.name] = {"set": set_name, "warmup": member.draws[0], "depth": member.depth,
                                         "kind": member.kind, "per_draw": got.per_draw}
                print(f"recorded {member.name}: {got.steps} steps", flush=True)
        if args.save:
            with open(args.save, "w") as f:
                json.dump(recorded, f)
    thresholds = args.thresholds or [sampler.COMPILE_AFTER_STEPS]
    for threshold in thresholds:
        ratios = {fixed: [] for fixed in COMPILE_COSTS}
        print(f"\n--- threshold {threshold}: auto's compile draw and its modelled seconds over the better of never "
              f"and always, at a compile cost F of {' / '.join(f'{f:.0f}' for f in COMPILE_COSTS)} s")
        for name, r in recorded.items():
            per_draw, at = r["per_draw"], compile_draw(r["per_draw"], r["warmup"], r["depth"], threshold)
            line = f"  {name:48s} {sum(per_draw):8d} steps  compiles at {'never' if at is None else at:>5}  "
            for fixed in COMPILE_COSTS:
                best = min(priced(per_draw, None, r["kind"], fixed), priced(per_draw, 0, r["kind"], fixed))
                ratios[fixed].append(priced(per_draw, at, r["kind"], fixed) / best)
                line += f" {ratios[fixed][-1]:5.2f}"
            print(line)
        for fixed, values in ratios.items():
            print(f"ratio auto/best [threshold {threshold}, F {fixed:.0f} s] worst {max(values):.2f}, "
                  f"geometric mean {math.exp(sum(map(math.log, values)) / len(values)):.3f}")


def _one(args):
    """Child process: one (member, mode) run; prints one machine-readable line."""
    import torch

    torch.set_num_threads(args.threads)
    if args.member < 0:  # the cache warm-up: a tiny model compiled (inductor's CPU probes, worker pool)
        run(family(quick=True)[0]._replace(draws=(10, 10)), "always")
        return
    got = run(family(args.quick)[args.member], args.mode)
    print(f"RESULT {got.seconds} {got.steps} {int(got.compiled)} {got.building} " + " ".join(map(str, got.per_draw)))


def _child(args, member, mode, cache):
    """Run ``_one`` in a fresh process whose inductor cache is a copy of ``cache``; its RESULT numbers."""
    import shutil
    import subprocess
    import sys

    own = tempfile.mkdtemp(prefix="compile_threshold_run_")
    shutil.copytree(cache, own, dirs_exist_ok=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=own, OMP_NUM_THREADS=str(args.threads))
    command = [sys.executable, __file__, "--one", str(member), "--mode", mode, "--threads", str(args.threads)]
    proc = subprocess.run(command + (["--quick"] if args.quick else []), env=env, capture_output=True, text=True)
    shutil.rmtree(own, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"member {member} mode {mode} failed:\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if member < 0:
        return None
    seconds, steps, compiled, building, *per_draw = lines[-1].split()[1:]
    return Run(float(seconds), int(steps), bool(int(compiled)), float(building), [int(p) for p in per_draw])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (the smoke test)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cold-machine", action="store_true",
                        help="no warm-up compile: every run also pays inductor's one-time start on a machine")
    parser.add_argument("--only", default=None, help="run only the members whose name contains this")
    parser.add_argument("--replay", action="store_true", help="replay auto's rule on recorded steps (see above)")
    parser.add_argument("--sets", nargs="+", default=["family", "heldout", "fresh", "workloads"],
                        choices=["family", "heldout", "fresh", "workloads"], help="--replay: the sets to record")
    parser.add_argument("--thresholds", nargs="+", type=int, default=None,
                        help="--replay: thresholds to replay (default: COMPILE_AFTER_STEPS)")
    parser.add_argument("--save", default=None, help="--replay: write the recorded steps to this JSON file")
    parser.add_argument("--load", default=None, help="--replay: read the steps from this JSON file instead")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        args.member = args.one
        return _one(args)
    if args.replay:
        return replay(args)
    import statistics

    import torch

    from pyro_bdl.inference.mcmc import sampler

    warmup, samples = default_draws(args.quick)
    modes = ("never", "auto") if args.quick else ("never", "always", "auto")
    threshold = sampler.COMPILE_AFTER_STEPS
    print(f"torch {torch.__version__}, threads {args.threads}, 2 chains x ({warmup} + {samples}), "
          f"COMPILE_AFTER_STEPS = {threshold}; each run in its own process with its own copy of an inductor cache "
          + ("left empty (a first run on a machine)" if args.cold_machine or args.quick else
             "holding only a warm-up compile of another model (a machine that has compiled before)"))
    cache = tempfile.mkdtemp(prefix="compile_threshold_cache_")
    if not args.cold_machine and not args.quick:
        _child(args, -1, "always", cache)
    print(f"{'model':32s} {'steps':>8s} " + " ".join(f"{m + ' s':>9s}" for m in modes)
          + "  auto chose  auto/best  build traced/compiled s  us/step traced/compiled  break-even steps")
    evens = []
    for index, member in enumerate(family(args.quick)):
        if args.only is not None and args.only not in member.name:
            continue
        got = {mode: _child(args, index, mode, cache) for mode in modes}
        seconds = {mode: got[mode].seconds for mode in modes}
        best = min(v for k, v in seconds.items() if k != "auto")
        line = (f"{member.name:32s} {got['never'].steps:8d} " + " ".join(f"{seconds[m]:9.2f}" for m in modes)
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
        at = compile_draw(got["never"].per_draw, member.draws[0], member.depth)
        print(f"    auto's rule on the never-compiled run's steps: "
              + ("stays traced" if at is None else f"compiles before draw {at} of {sum(member.draws)}"))
        print(f"ratio auto/best [{member.name}] = {seconds['auto'] / best:.2f}")
    if evens:
        print(f"break-even steps over the family: median {statistics.median(evens):.0f}, "
              f"min {min(evens):.0f}, max {max(evens):.0f} (COMPILE_AFTER_STEPS = {threshold})")


if __name__ == "__main__":
    main()
