"""Threads per fit: one thread against torch's default (one per core), on a small and a large model, alone and
beside a busy process; and what ``threads="auto"`` chose.  Seconds per optimisation step, as ratios measured in the
same run (benchmarks/RESULTS.md, "Threads").

    python benchmarks/threads.py            # ~2 minutes on 2 cores
    python benchmarks/threads.py --quick    # a smoke run

Small: ``bnn-regressor`` (1-50-1, 200 rows, full batch).  Large: ``vae`` on the MNIST 8k split (784-400-50,
batches of 128) where ``../shared/data/mnist-t10k`` exists, else on the digits with 400 hidden units.  The busy
process is another Python process spinning on one core (as a second fit, or a notebook's kernel, would).  A first
untimed fit of each model pays the compiles (the BBB path compiles its ELBO), so the timed fits compare steps.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
import warnings
from pathlib import Path

import torch

import pyro_bdl
from pyro_bdl.inference.parallel.threads import available_cores

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def _spin(stop):
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _cases(quick: bool) -> dict:
    if MNIST.exists() and not quick:
        from pyro_bdl.data.images import mnist_split

        vae_data, vae_name = mnist_split(MNIST)[0], "vae, MNIST 8k, 784-400-50, batch 128"
    else:
        vae_data, vae_name = "digits-01", "vae, digits (pixels in [0, 1]), 64-400-50, batch 128"
    steps = 20 if quick else 150
    return {
        "bnn-regressor, 1-50-1, 200 rows": ("bnn-regressor", None, "svi", {"steps": steps, "samples": 10}, {}),
        vae_name: ("vae", vae_data, "svi-amortised", {"epochs": 1 if quick else 3, "is_samples": 5},
                   {"hidden": 400, "latent_dim": 50}),
    }


def _seconds_per_step(model, data, method, settings, options, threads) -> tuple[float, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = pyro_bdl.fit(model, data, inference=method, options=options, progress=False, threads=threads, **settings)
    return r.record.wall_seconds / max(len(r.losses), 1), r.record.runs_on["threads"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    cores = available_cores()
    print(f"machine: {cores} cores; torch {torch.__version__}\n")
    print("| model | machine | 1 thread, ms/step | " + f"{cores} threads (torch's default), ms/step | ratio | "
          "auto chose |")
    print("|---|---|---:|---:|---:|---:|")
    for label, (model, data, method, settings, options) in _cases(args.quick).items():
        _seconds_per_step(model, data, method, settings, options, 1)  # untimed: compiles and caches what it can
        for busy in (False, True):
            stop = multiprocessing.Event()
            spinner = multiprocessing.Process(target=_spin, args=(stop,)) if busy else None
            if spinner is not None:
                spinner.start()
                time.sleep(1.0)
            try:
                one, _ = _seconds_per_step(model, data, method, settings, options, 1)
                many, _ = _seconds_per_step(model, data, method, settings, options, cores)
                _, chosen = _seconds_per_step(model, data, method, settings, options, "auto")
            finally:
                if spinner is not None:
                    stop.set()
                    spinner.join()
            print(f"| {label} | {'beside a busy process' if busy else 'alone'} | {1e3 * one:.2f} | {1e3 * many:.2f} "
                  f"| {many / one:.2f} | {chosen} |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
