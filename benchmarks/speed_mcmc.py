"""NUTS speed: the zoo's kernel (pyro_bdl.inference.mcmc.zoo) against Pyro's NUTS and, when installed
(``pip install numpyro jax``, the ``bench`` extra), NumPyro's, on the workloads of issue 18.

Workloads (``--quick`` shrinks every run for the smoke test):

* ``blr``: d = 10, n = 1000, known noise 1, 1 chain, 500 + 1000 draws: min / median bulk ESS per second,
  compile included (first fit of the model) and excluded (a second fit: the potential is cached),
  posterior means against the exact posterior (max |error| in Monte Carlo standard errors).
* ``bnn``: bnn-regressor 1-50-1 on ``sine``: time per leapfrog step (every potential-and-gradient
  evaluation counted, warm-up included) against one bare potential+gradient evaluation (the floor).
* ``schools``: non-centred eight schools, 4 chains x (1000 + 1000): wall seconds, divergences.
* ``demo``: ``make demo``'s fit, ``pyro_bdl``'s NUTS on the embedded ``linear`` set (2 chains).
* ``fresh``: a user's first fit in a new Python process, eight schools and the demo's, against NumPyro's first
  call on eight schools in a new process (imports, tracing and compiling included; medians of alternating rounds).
* ``digits``: notebook 02's NUTS on the digits net (bnn-classifier 64-50-10), 1 chain, 200 + 200 draws,
  through ``pyro_bdl.fit``: time per leapfrog against the floors, tree depths; and the kernel's
  compiled leaf against the bare compiled potential, timed in alternating rounds.

Every line "ratio ..." is measured in this run; nothing here is asserted (tests/bench/test_benchmarks.py
checks that it runs and that posterior means agree).  Results: benchmarks/RESULTS.md.

Example: ``python benchmarks/speed_mcmc.py --threads 1`` (about 10 minutes), ``--quick`` (a minute).
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np


def _ess_summary(draws: dict) -> tuple[float, float]:
    """min and median bulk ESS over every coordinate of every site; draws site -> (chains, draws, ...)."""
    import arviz as az

    values = []
    for v in draws.values():
        v = np.asarray(v, dtype=np.float64)
        flat = v.reshape(v.shape[0], v.shape[1], -1)
        values += [float(az.ess(flat[:, :, j], method="bulk")) for j in range(flat.shape[2])]
    return float(np.min(values)), float(np.median(values))


class _Counter:
    """Counts potential-and-gradient evaluations (leapfrog steps) of a zoo potential or of Pyro's integrator."""

    def __init__(self):
        self.n = 0


def _count_pyro_leapfrogs(counter):
    import pyro.ops.integrator as integrator

    original = integrator.potential_grad

    def counting(*args, **kwargs):
        counter.n += 1
        return original(*args, **kwargs)

    integrator.potential_grad = counting
    return lambda: setattr(integrator, "potential_grad", original)


class _ZooRecorder:
    """Records the flat potentials the zoo's runner builds (model, data, potential): the leapfrog steps
    are the potential's own count of its evaluations."""

    def __enter__(self):
        import pyro_bdl.inference.mcmc.zoo as zoo_mcmc

        self.module, self.original, self.seen = zoo_mcmc, zoo_mcmc.flat_potential, []

        def recording(model, data, chains, **kwargs):
            potential = self.original(model, data, chains, **kwargs)
            self.seen.append((model, data, potential, potential.evaluations))
            return potential

        zoo_mcmc.flat_potential = recording
        return self

    def __exit__(self, *exc):
        self.module.flat_potential = self.original

    @property
    def compiled(self):
        """Whether the kernel's steps ran compiled (jit=True, or compile='auto' deciding so)."""
        from pyro_bdl.inference.mcmc.dynamics import fusion_of

        return any(compiled for _, _, p, _ in self.seen for (_, compiled) in fusion_of(p).steps)

    @property
    def steps(self):
        return sum(p.evaluations - before for _, _, p, before in self.seen)


def run_zoo(model, data, *, chains, warmup, samples, seed, jit, max_tree_depth=10):
    """The zoo's NUTS through its runner; jit: True (compiled from the start) or False (the default: auto)."""
    import pyro

    from pyro_bdl.inference.mcmc.zoo import run_zoo_mcmc

    pyro.set_rng_seed(seed)
    start = time.perf_counter()
    with _ZooRecorder() as recorder:
        draws = run_zoo_mcmc("nuts", model, data, samples=samples, warmup=warmup, chains=chains, progress=False,
                             jit=jit, max_tree_depth=max_tree_depth)
    seconds = time.perf_counter() - start
    print(f"  (zoo jit={jit}: {recorder.steps} leapfrog steps, steps {'compiled' if recorder.compiled else 'traced'})")
    return {k: v.numpy() for k, v in draws.samples.items()}, draws.sample_stats, seconds, recorder.steps


def run_pyro(model, data, *, chains, warmup, samples, seed, max_tree_depth=10):
    import pyro

    from pyro_bdl.inference.mcmc.methods import run_mcmc

    counter = _Counter()
    restore = _count_pyro_leapfrogs(counter)
    pyro.set_rng_seed(seed)
    start = time.perf_counter()
    try:
        draws = run_mcmc("nuts", model, data, samples=samples, warmup=warmup, chains=chains, progress=False,
                         max_tree_depth=max_tree_depth)  # run_mcmc's own default: Pyro's kernel
    finally:
        restore()
    seconds = time.perf_counter() - start
    return {k: v.numpy() for k, v in draws.samples.items()}, draws.sample_stats, seconds, counter.n


def _numpyro():
    try:
        import jax  # noqa: F401
        import numpyro
    except ImportError:
        return None
    numpyro.set_host_device_count(1)
    return numpyro


def run_numpyro(np_model, data, *, chains, warmup, samples, seed, calls=2):
    """NumPyro NUTS, chains one after another ("sequential"): (draws, seconds first call, seconds warm); with
    ``calls=1`` the first call only (the warm seconds are then None)."""
    import jax
    from numpyro.infer import MCMC, NUTS

    times, draws = [], None
    mcmc = MCMC(NUTS(np_model), num_warmup=warmup, num_samples=samples, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    for _ in range(calls):  # the first call compiles, the second reuses the compiled kernel (MCMC's cache)
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), **data)
        jax.block_until_ready(mcmc.get_samples())
        times.append(time.perf_counter() - start)
        draws = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return draws, times[0], times[1] if calls > 1 else None


# --- workloads ---------------------------------------------------------------------------------------

def _blr_data(n, d, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = X @ torch.randn(d, generator=g) + 0.5 + torch.randn(n, generator=g)
    return X, y


def workload_blr(args):
    from pyro_bdl.inference.mcmc.potential import _CACHE
    from pyro_bdl.registry import get_model

    n, d = (200, 10) if args.quick else (1000, 10)
    warmup, samples = (100, 200) if args.quick else (500, 1000)
    X, y = _blr_data(n, d)
    spec = get_model("blr")
    model, data = spec.bind({"noise": 1.0, "prior_scale": 1.0}), {"X": X, "y": y}
    exact = spec.hooks.exact_posterior(X, y, noise=1.0, prior_scale=1.0)
    print(f"\n== blr: d = {d}, n = {n}, known noise, 1 chain, {warmup} + {samples} draws")
    rows = {}
    _CACHE.clear()
    for label in ("zoo, first fit (compile included)", "zoo, second fit (compile excluded)"):
        draws, stats, seconds, _ = run_zoo(model, data, chains=1, warmup=warmup, samples=samples, seed=0, jit=args.jit)
        rows[label] = (draws, seconds, stats)
    if not args.skip_pyro:
        draws, stats, seconds, _ = run_pyro(model, data, chains=1, warmup=warmup, samples=samples, seed=0)
        rows["pyro NUTS (jit=False)"] = (draws, seconds, stats)
    numpyro = None if args.skip_numpyro else _numpyro()
    if numpyro is not None:
        import jax.numpy as jnp
        import numpyro.distributions as nd

        def np_blr(X, y):
            w = numpyro.sample("w", nd.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
            b = numpyro.sample("b", nd.Normal(0.0, 1.0))
            with numpyro.plate("data", X.shape[0]):
                numpyro.sample("y", nd.Normal(X @ w + b, 1.0), obs=y)

        draws, first, warm = run_numpyro(np_blr, {"X": jnp.asarray(X.numpy()), "y": jnp.asarray(y.numpy())},
                                         chains=1, warmup=warmup, samples=samples, seed=0)
        rows["numpyro, first call (compile included)"] = (draws, first, None)
        rows["numpyro, warm"] = (draws, warm, None)
    ess_rate = {}
    for label, (draws, seconds, stats) in rows.items():
        lo, med = _ess_summary({k: draws[k] for k in ("w", "b")})
        ess_rate[label] = lo / seconds
        worst = _worst_error(draws, exact)
        depth = "" if stats is None else f", mean tree depth {np.mean(stats['tree_depth']):.2f}"
        print(f"{label:42s} {seconds:7.2f} s  min ESS/s {lo / seconds:8.1f}  median ESS/s {med / seconds:8.1f}  "
              f"max |mean - exact| = {worst:.2f} MC se{depth}")
    _means_agree(rows, exact)
    warm = "numpyro, warm"
    for label in ess_rate:
        if label.startswith("zoo") and warm in ess_rate:
            print(f"ratio zoo/numpyro-warm [blr min ESS/s, {label}] = {ess_rate[label] / ess_rate[warm]:.2f}")
        if label.startswith("zoo") and "pyro NUTS (jit=False)" in ess_rate:
            print(f"ratio zoo/pyro [blr min ESS/s, {label}] = {ess_rate[label] / ess_rate['pyro NUTS (jit=False)']:.2f}")


def _worst_error(draws, exact):
    """max over coordinates of |mean - exact mean| / (exact sd / sqrt(bulk ESS))."""
    import arviz as az

    worst = 0.0
    for site, (mean, sd) in exact.items():
        v = np.asarray(draws[site], dtype=np.float64)
        flat = v.reshape(v.shape[0], v.shape[1], -1)
        for j in range(flat.shape[2]):
            ess = float(az.ess(flat[:, :, j]))
            se = float(sd.reshape(-1)[j]) / math.sqrt(ess)
            worst = max(worst, abs(flat[:, :, j].mean() - float(mean.reshape(-1)[j])) / se)
    return worst


def _means_agree(rows, exact, k=4.5):
    bad = [label for label, (draws, _, _) in rows.items() if _worst_error(draws, exact) > k]
    print("posterior means against the exact posterior: " + ("MISMATCH " + ", ".join(bad) if bad else
                                                              f"all within {k} MC standard errors"))


def _floors(model, data, chains=1, reps=200, modes=(False, True)):
    """Seconds of one bare potential+gradient evaluation, traced and compiled: {mode: (seconds, build seconds)}."""
    import torch

    from pyro_bdl.inference.mcmc.dynamics import fuse_with
    from pyro_bdl.inference.mcmc.potential import FlatPotential

    floors = {}
    for compile_ in modes:
        potential = FlatPotential(model, data, compile=compile_)
        theta = 0.1 * torch.randn(chains, potential.dim, generator=torch.Generator().manual_seed(0))
        tensors = potential.data_tensors(data)
        start = time.perf_counter()
        potential.value_and_grad(theta, tensors)
        build = time.perf_counter() - start
        for _ in range(5):
            potential.value_and_grad(theta, tensors)
        start = time.perf_counter()
        for _ in range(reps):
            potential.value_and_grad(theta, tensors)
        floors[potential.mode] = ((time.perf_counter() - start) / reps, build)
        print(f"floor: one potential+gradient evaluation ({potential.mode}, built in {build:.1f} s): "
              f"{1e3 * floors[potential.mode][0]:.3f} ms")
    if True in modes:  # compiled as the kernel compiles its steps: inductor on the traced graph, no dynamo guards
        start = time.perf_counter()
        bare = fuse_with(potential, "floor", lambda grad_and_value, z: grad_and_value(z), (theta,), tensors,
                         compile=True)
        bare(theta)
        build = time.perf_counter() - start
        for _ in range(5):
            bare(theta)
        start = time.perf_counter()
        for _ in range(reps):
            bare(theta)
        floors["inductor"] = ((time.perf_counter() - start) / reps, build)
        print(f"floor: one potential+gradient evaluation (inductor without guards, as the kernel's steps, built in "
              f"{build:.1f} s): {1e3 * floors['inductor'][0]:.3f} ms")
    return floors


def _leaf_against_floor(model, data, reps=100, rounds=5):
    """The kernel's compiled NUTS leaf (leapfrog + tree bookkeeping) against the bare compiled potential,
    both compiled the same way and timed in alternating rounds (robust to a varying load): ms, ms."""
    import torch

    from pyro_bdl.inference.mcmc import nuts
    from pyro_bdl.inference.mcmc.dynamics import fuse_with
    from pyro_bdl.inference.mcmc.potential import FlatPotential

    potential = FlatPotential(model, data, compile=False)
    tensors = potential.data_tensors(data)
    z = 0.1 * torch.randn(1, potential.dim, generator=torch.Generator().manual_seed(0))
    u, g = potential.value_and_grad(z, tensors)
    no, depth = torch.zeros(1, dtype=torch.bool), 10
    state = (z, torch.randn_like(z), g, torch.full((1,), -math.inf), z, u, g, torch.zeros_like(z),
             torch.zeros(depth, 1, potential.dim), torch.zeros(depth, 1, potential.dim),
             torch.zeros(1, dtype=torch.long), torch.zeros(1), no, no, ~no)
    leaf_args = (*state, torch.full((1, 1), 1e-3), torch.ones_like(z), u + 1.0,
                 *nuts.checkpoint_masks(depth)[5], torch.full((1,), 0.5))
    leaf = fuse_with(potential, "leaf", nuts.leaf, leaf_args, tensors, compile=True)
    bare = fuse_with(potential, "bare", lambda grad_and_value, z: grad_and_value(z), (z,), tensors, compile=True)
    times = {"leaf": 0.0, "bare": 0.0}
    for fn, args in ((leaf, leaf_args), (bare, (z,))):
        for _ in range(5):
            fn(*args)
    for _ in range(rounds):
        for name, fn, args in (("leaf", leaf, leaf_args), ("bare", bare, (z,))):
            start = time.perf_counter()
            for _ in range(reps):
                fn(*args)
            times[name] += time.perf_counter() - start
    leaf_ms, bare_ms = (1e3 * times[k] / (reps * rounds) for k in ("leaf", "bare"))
    print(f"compiled leaf {leaf_ms:.3f} ms, bare compiled potential+gradient {bare_ms:.3f} ms (alternating rounds)")
    print(f"ratio leaf/floor(inductor, interleaved) = {leaf_ms / bare_ms:.2f}")
    return leaf_ms, bare_ms


def _per_step_rows(model, data, *, warmup, samples, depth, settings, seeds=(0, 1)):
    """The zoo's NUTS with each jit setting, a first fit (compile included) and a second (cached):
    {label: seconds per leapfrog step}."""
    per_step = {}
    for jit in settings:
        for n, seed in enumerate(seeds):
            _, stats, seconds, steps = run_zoo(model, data, chains=1, warmup=warmup, samples=samples, seed=seed,
                                               jit=jit, max_tree_depth=depth)
            label = f"zoo jit={jit}, {'first fit' if n == 0 else 'second fit'}"
            per_step[label] = seconds / steps
            depths = np.bincount(np.asarray(stats["tree_depth"]).reshape(-1), minlength=depth + 1)
            print(f"{label:32s} {seconds:7.1f} s, {steps:7d} leapfrog steps, {1e3 * per_step[label]:.3f} ms per step, "
                  f"tree depths (sampling) {dict((d, int(c)) for d, c in enumerate(depths) if c)}")
    return per_step


def _print_ratios(per_step, floors, workload):
    for mode in ("inductor", "compiled", "traced"):
        if mode in floors:
            for label, value in per_step.items():
                print(f"ratio {label}/floor({mode}) [{workload} time per leapfrog] = {value / floors[mode][0]:.2f}")


def workload_bnn(args):
    from pyro_bdl.data.embedded import load
    from pyro_bdl.registry import get_model

    spec = get_model("bnn-regressor")
    ds = load("sine")
    X = (ds.X - ds.X.mean(0)) / ds.X.std(0)
    y = (ds.y - ds.y.mean()) / ds.y.std()
    model = spec.bind(spec.resolve_options({}))
    data = {"X": X, "y": y}
    warmup, samples, depth = (10, 10, 5) if args.quick else (100, 100, 8)
    print(f"\n== bnn-regressor 1-50-1 on sine ({len(y)} points), 1 chain, {warmup} + {samples} draws, "
          f"max tree depth {depth}: time per leapfrog step")
    quick_traced = args.quick and not args.jit  # the smoke test: nothing compiled
    floors = _floors(model, data, reps=50 if args.quick else 500, modes=(False,) if quick_traced else (False, True))
    per_step = _per_step_rows(model, data, warmup=warmup, samples=samples, depth=depth,
                              settings=(True,) if args.jit else (False,) if args.quick else (False, True))
    per_step["zoo warm"] = per_step[f"zoo jit={args.jit}, second fit"]
    if not args.skip_pyro:  # per step only: a short run (Pyro takes ~10 ms per step here)
        w, n = (5, 5) if args.quick else (20, 20)
        _, stats, seconds, steps = run_pyro(model, data, chains=1, warmup=w, samples=n, seed=0, max_tree_depth=depth)
        per_step["pyro"] = seconds / steps
        print(f"pyro NUTS ({w} + {n} draws): {seconds:.1f} s, {steps} leapfrog steps, "
              f"{1e3 * per_step['pyro']:.3f} ms per step")
    _print_ratios(per_step, floors, "bnn")
    if not args.quick:
        _leaf_against_floor(model, data)


def workload_digits(args):
    """Notebook 02's NUTS on the digits net (bnn-classifier, 64-50-10), through pyro_bdl.fit as a user runs it."""
    import pyro_bdl
    from pyro_bdl.data.embedded import digits_split

    train, _ = digits_split()
    warmup, samples, depth = (5, 5, 4) if args.quick else (200, 200, 10)
    if args.quick:
        train = pyro_bdl.Dataset("digits-100", train.X[:100], train.y[:100], train.feature_names, train.target_name)
    print(f"\n== digits: bnn-classifier on {len(train.y)} rows, 1 chain, {warmup} + {samples} draws, "
          f"max tree depth {depth} (pyro_bdl.fit)")
    with _ZooRecorder() as recorder:
        start = time.perf_counter()
        fit = pyro_bdl.fit("bnn-classifier", train, inference="nuts", progress=False, seed=0, chains=1,
                           warmup=warmup, samples=samples, max_tree_depth=depth, jit=args.jit)
        seconds = time.perf_counter() - start
    steps = recorder.steps
    print(f"  (zoo jit={args.jit}: steps {'compiled' if recorder.compiled else 'traced'})")
    depths = np.bincount(np.asarray(fit.sample_stats["tree_depth"]).reshape(-1), minlength=depth + 1)
    per_step = {f"zoo jit={args.jit} (fit, compile included)": seconds / steps}
    print(f"zoo NUTS: {seconds:.1f} s, {steps} leapfrog steps, {1e3 * seconds / steps:.3f} ms per step, "
          f"tree depths (sampling) {dict((d, int(c)) for d, c in enumerate(depths) if c)}, "
          f"divergences {fit.info.divergences}")
    model, data, _, _ = recorder.seen[0]
    floors = _floors(model, data, reps=10 if args.quick else 200,
                     modes=(False,) if args.quick and not args.jit else (False, True))
    _print_ratios(per_step, floors, "digits")
    if not args.quick:
        _leaf_against_floor(model, data)
    floor = min(value for value, _ in floors.values())
    print(f"floor x steps: {floor * steps:.0f} s (the run: {seconds:.0f} s)")


def _eight_schools(ppl, dist, y, sigma):
    """Non-centred eight schools in a PPL with Pyro's API (``ppl``: pyro or numpyro; ``dist``: its distributions)."""
    mu = ppl.sample("mu", dist.Normal(0.0, 5.0))
    tau = ppl.sample("tau", dist.HalfCauchy(5.0))
    with ppl.plate("schools", len(y)):
        eta = ppl.sample("eta", dist.Normal(0.0, 1.0))
        ppl.sample("obs", dist.Normal(mu + tau * eta, sigma), obs=y)


def eight_schools(y, sigma):
    import pyro
    import pyro.distributions as dist

    _eight_schools(pyro, dist, y, sigma)


def np_eight_schools(y, sigma):
    """:func:`eight_schools` in NumPyro."""
    import numpyro
    import numpyro.distributions as nd

    _eight_schools(numpyro, nd, y, sigma)


SCHOOLS_Y = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]
SCHOOLS_SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]


def workload_schools(args):
    import torch

    y, sigma = SCHOOLS_Y, SCHOOLS_SIGMA
    data = {"y": torch.tensor(y), "sigma": torch.tensor(sigma)}
    warmup, samples = (100, 100) if args.quick else (1000, 1000)
    print(f"\n== eight schools, non-centred, 4 chains x ({warmup} + {samples})")
    results = {}
    draws, stats, seconds, steps = run_zoo(eight_schools, data, chains=4, warmup=warmup, samples=samples, seed=0,
                                       jit=args.jit)
    results["zoo (4 chains together)"] = (draws, seconds, int(stats["diverging"].sum()))
    # vectorised chains: what 4 chains cost against one, same settings (steps: batched leapfrog steps)
    _, _, one_seconds, one_steps = run_zoo(eight_schools, data, chains=1, warmup=warmup, samples=samples, seed=0,
                                           jit=args.jit)
    print(f"zoo, 1 chain: {one_seconds:.2f} s, {one_steps} steps; 4 chains: {seconds:.2f} s, {steps} batched steps")
    print(f"ratio zoo 4 chains/1 chain [schools wall seconds] = {seconds / one_seconds:.2f}")
    if not args.skip_pyro:
        draws, stats, seconds, _ = run_pyro(eight_schools, data, chains=4, warmup=warmup, samples=samples, seed=0)
        results["pyro NUTS (one after another)"] = (draws, seconds, int(stats["diverging"].sum()))
    numpyro = None if args.skip_numpyro else _numpyro()
    if numpyro is not None:
        import jax.numpy as jnp

        draws, first, warm = run_numpyro(np_eight_schools, {"y": jnp.asarray(y), "sigma": jnp.asarray(sigma)}, chains=4,
                                         warmup=warmup, samples=samples, seed=0)
        results["numpyro, first call (sequential chains)"] = (draws, first, None)
        results["numpyro, warm"] = (draws, warm, None)
    for label, (draws, seconds, divergences) in results.items():
        lo, _ = _ess_summary({k: draws[k] for k in ("mu", "tau")})
        print(f"{label:42s} {seconds:7.2f} s  min ESS/s (mu, tau) {lo / seconds:8.1f}  mu mean "
              f"{np.mean(draws['mu']):6.2f}  tau mean {np.mean(draws['tau']):5.2f}  divergences {divergences}")
    first = next(iter(results))
    for label in list(results)[1:]:
        print(f"ratio zoo/{label.split(',')[0].split(' (')[0]} [schools wall seconds] = "
              f"{results[first][1] / results[label][1]:.2f}")


def workload_demo(args):
    import pyro_bdl

    print("\n== make demo's fit: blr on the embedded linear set, NUTS defaults (2 chains, 500 + 1000)")
    settings = {"samples": 100, "warmup": 100} if args.quick else {}
    seconds = {}
    for kernel in ("zoo", "pyro") if not args.skip_pyro else ("zoo",):
        start = time.perf_counter()
        with _ZooRecorder() as recorder:
            result = pyro_bdl.fit("blr", "linear", inference="nuts", progress=False, seed=0, kernel=kernel, **settings)
        seconds[kernel] = time.perf_counter() - start
        if kernel == "zoo":
            print(f"  (zoo: {recorder.steps} leapfrog steps, steps {'compiled' if recorder.compiled else 'traced'})")
        print(f"kernel={kernel}: {seconds[kernel]:.1f} s, divergences {result.info.divergences}, "
              f"min bulk ESS {getattr(result.diagnostics, 'min_ess_bulk', float('nan')):.0f}")
    if "pyro" in seconds:
        print(f"ratio zoo/pyro [demo fit seconds] = {seconds['zoo'] / seconds['pyro']:.2f}")


_FRESH = ("zoo schools", "zoo demo", "numpyro schools")


def workload_fresh(args):
    """A user's first fit in a new Python process (what a script or the CLI pays: imports, tracing, compiling),
    eight schools and the demo's fit, against NumPyro's first call on eight schools, each in its own process with
    an empty inductor cache (unless --warm-cache), in alternating rounds."""
    import json
    import statistics
    import subprocess
    import sys
    import tempfile

    names = [n for n in _FRESH if not n.startswith("numpyro") or (not args.skip_numpyro and _numpyro() is not None)]
    rounds = 1 if args.quick else args.fresh_rounds
    print(f"\n== first fits in fresh processes ({rounds} rounds; seconds: the fit, and the imports before it)")
    seen = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            env = dict(os.environ)
            if not args.warm_cache:
                env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="speed_mcmc_fresh_")
            command = [sys.executable, os.path.abspath(__file__), "--child", name, "--threads", str(args.threads)]
            out = subprocess.run(command + (["--quick"] if args.quick else []), env=env, capture_output=True,
                                 text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            seen[name].append(row)
            print(f"  round {r + 1}: {name:16s} fit {row['fit']:6.2f} s, imports {row['imports']:5.2f} s"
                  + ("" if name.startswith("numpyro") else f", torch._dynamo imported: {row['dynamo']}"))
    median = {n: statistics.median(row["fit"] for row in rows) for n, rows in seen.items()}
    for name, seconds in median.items():
        print(f"{name:16s} median fit {seconds:6.2f} s")
    if "numpyro schools" in median:
        print(f"ratio zoo/numpyro first call, fresh process [schools fit seconds] = "
              f"{median['zoo schools'] / median['numpyro schools']:.2f}")


def _child(name: str, args) -> None:
    """One of :func:`workload_fresh`'s fits, in this new process: prints a JSON line."""
    import contextlib
    import io
    import json
    import sys

    start = time.perf_counter()  # numpy and this module are imported: what follows is what a user's script imports
    warmup, samples = (100, 100) if args.quick else (1000, 1000)
    if name == "numpyro schools":
        _numpyro()
        import jax.numpy as jnp

        imported = time.perf_counter()
        data = {"y": jnp.asarray(SCHOOLS_Y), "sigma": jnp.asarray(SCHOOLS_SIGMA)}
        _, seconds, _ = run_numpyro(np_eight_schools, data, chains=4, warmup=warmup, samples=samples, seed=0,
                                    calls=1)
    else:
        import torch

        import pyro_bdl

        torch.set_num_threads(args.threads)
        imported = time.perf_counter()
        if name == "zoo schools":
            data = {"y": torch.tensor(SCHOOLS_Y), "sigma": torch.tensor(SCHOOLS_SIGMA)}
            with contextlib.redirect_stdout(io.StringIO()):
                _, _, seconds, _ = run_zoo(eight_schools, data, chains=4, warmup=warmup, samples=samples, seed=0,
                                           jit=args.jit)
        else:
            settings = {"samples": 100, "warmup": 100} if args.quick else {}
            fit_start = time.perf_counter()
            pyro_bdl.fit("blr", "linear", inference="nuts", progress=False, seed=0, **settings)
            seconds = time.perf_counter() - fit_start
    print(json.dumps({"imports": imported - start, "fit": seconds, "dynamo": "torch._dynamo" in sys.modules}))


WORKLOADS = {"blr": workload_blr, "bnn": workload_bnn, "schools": workload_schools, "demo": workload_demo,
             "digits": workload_digits, "fresh": workload_fresh}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs (the smoke test)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jit", action="store_true", help="the zoo's jit=True: compile from the start (else: auto)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep torch's on-disk compile cache (else a fresh one: compile times as on a first run)")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--skip-pyro", action="store_true")
    parser.add_argument("--skip-numpyro", action="store_true")
    parser.add_argument("--fresh-rounds", type=int, default=5, help="rounds of fresh processes (workload fresh)")
    parser.add_argument("--child", choices=_FRESH, help=argparse.SUPPRESS)  # one fit of workload fresh
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if not args.warm_cache:
        import tempfile

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="speed_mcmc_inductor_")
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {args.threads}, zoo jit={args.jit}, "
          f"numpyro {'installed' if _numpyro() is not None else 'not installed'}")
    for name in args.workloads:
        WORKLOADS[name](args)


if __name__ == "__main__":
    main()
