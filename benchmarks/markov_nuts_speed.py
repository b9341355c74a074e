r"""Per-draw time of the zoo's NUTS against Pyro's own on the enumerated and Markov programs of issue 53
(tests/support/ported_programs.py: capture-recapture with ``pyro.markov``, the HMM, Dawid-Skene, the toy mixture).

Each side runs one chain on one thread, in this process, twice: ``--short`` and ``--long`` iterations (half warm-up,
half draws); the time per iteration is the slope between the two runs, so setup, tracing and compilation cancel (the
zoo keeps a model's potential and fused steps for later fits: one untimed fit builds them first).
Pyro runs eagerly and with ``jit_compile=True``.  Leapfrog steps per iteration are reported where they can be
counted (the zoo's ``n_steps``; Pyro eager: the model's calls, one per gradient), since the two samplers adapt
their own step sizes and so build trees of their own lengths; seconds per step compares the work itself.  How the
zoo's sampler ran (``ChainInfo.slower_path``) is printed: a program whose fused step falls back runs op by op.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/markov_nuts_speed.py
    .venv/bin/python benchmarks/markov_nuts_speed.py --quick          # a smoke run (numbers mean nothing)
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.ported_programs import PORTED  # noqa: E402
from support.pyro_example_models import as_pyro_call  # noqa: E402

import pyro_bdl  # noqa: E402

PROGRAMS = ("capture_recapture", "hmm", "dawid_skene", "toy_mixture")


def zoo(example, iterations: int) -> tuple[float, float, str | None]:
    """(seconds, leapfrog steps per iteration, the slower path) of the zoo's NUTS, one chain."""
    half = iterations // 2
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pyro_bdl.fit(example.model, example.data(), inference="nuts", samples=half, warmup=half, chains=1,
                           progress=False, seed=0)
    seconds = time.perf_counter() - start
    return seconds, float(np.mean(fit.sample_stats["n_steps"])), fit.info.slower_path


def pyro_nuts(example, iterations: int, jit: bool) -> tuple[float, float]:
    """(seconds, model calls per iteration: NaN with the JIT) of Pyro's NUTS, one chain."""
    args, kwargs = as_pyro_call(example.data())
    calls = [0]

    def counted(*a, **k):
        calls[0] += 1
        return example.model(*a, **k)

    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    half = iterations // 2
    kernel = NUTS(counted, jit_compile=jit, ignore_jit_warnings=True,
                  **{k: v for k, v in example.nuts.items() if k not in ("jit_compile", "ignore_jit_warnings")})
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MCMC(kernel, num_samples=half, warmup_steps=half, disable_progbar=True).run(*args, **kwargs)
    seconds = time.perf_counter() - start
    return seconds, (np.nan if jit else calls[0] / iterations)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS))
    parser.add_argument("--short", type=int, default=100)
    parser.add_argument("--long", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.short, args.long = 10, 20
    torch.set_num_threads(1)
    print(f"| program | zoo s/iter | steps/iter | Pyro s/iter | steps/iter | Pyro JIT s/iter | zoo / Pyro | "
          f"zoo / Pyro JIT | zoo s/step / Pyro s/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    paths = {}
    for name in args.programs:
        example = PORTED[name]
        zoo(example, args.short)  # the potential and its fused steps are built once and kept: not in the slope
        z = [zoo(example, n) for n in (args.short, args.long)]
        p = [pyro_nuts(example, n, jit=False) for n in (args.short, args.long)]
        j = [pyro_nuts(example, n, jit=True) for n in (args.short, args.long)]
        span = args.long - args.short
        z_it, p_it, j_it = ((b[0] - a[0]) / span for a, b in (z, p, j))
        z_steps, p_steps = z[1][1], p[1][1]
        per_step = (z_it / z_steps) / (p_it / p_steps)
        print(f"| {name} | {z_it:.4f} | {z_steps:.1f} | {p_it:.4f} | {p_steps:.1f} | {j_it:.4f} | "
              f"{z_it / p_it:.2f} | {z_it / j_it:.2f} | {per_step:.2f} |", flush=True)
        paths[name] = z[1][2]
    for name, path in paths.items():
        print(f"{name}: the zoo's sampler ran {'its fastest form' if path is None else 'slower: ' + path}")


if __name__ == "__main__":
    main()
