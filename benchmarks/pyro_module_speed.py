"""NUTS on a user's ``PyroModule`` models: ``pyro_bdl.fit(..., inference="nuts")`` against Pyro's own
``MCMC(NUTS(model))`` for the same draws, alone and beside a busy process (benchmarks/RESULTS.md, "PyroModule
models under NUTS").

    python benchmarks/pyro_module_speed.py            # ~5 minutes on 2 cores
    python benchmarks/pyro_module_speed.py --quick    # a smoke run
    python benchmarks/pyro_module_speed.py --draws 200 --hidden 5   # shorter
    python benchmarks/pyro_module_speed.py --models bnn --draws 50 --hidden 5 [--loads busy]   # the network only

Two idioms of Pyro's tutorials: the Bayesian regression tutorial's ``BayesianRegression`` (a ``PyroModule[nn.Linear]``
with ``PyroSample`` priors, 170 rows, 3 features) and a Bayesian network in the same idiom (1-10-1, tanh, 100
rows, 141 weights).  Both samplers run 2 chains one after the other on the same data with the same warmup and
draws; Pyro's runs with torch's default threads, as a user's session would; ours with its own choice
(``threads="auto"``).  The busy process spins on one core (a second fit or a notebook's kernel).  Ours is timed
after one untimed fit (its potential is traced once per model and data shapes).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import warnings
from pathlib import Path

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS
from pyro.nn import PyroModule, PyroSample
from torch import nn

import pyro_bdl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.pyro_example_models import BayesianRegression  # noqa: E402  (the tutorial's model, as the tests run it)


class BNN(PyroModule):
    """A one-hidden-layer network in the same idiom: ``PyroModule[nn.Linear]`` layers, ``PyroSample`` weights."""

    def __init__(self, hidden: int = 10):
        super().__init__()
        self.fc1 = PyroModule[nn.Linear](1, hidden)
        self.fc1.weight = PyroSample(dist.Normal(0.0, 1.0).expand([hidden, 1]).to_event(2))
        self.fc1.bias = PyroSample(dist.Normal(0.0, 1.0).expand([hidden]).to_event(1))
        self.fc2 = PyroModule[nn.Linear](hidden, 1)
        self.fc2.weight = PyroSample(dist.Normal(0.0, 1.0).expand([1, hidden]).to_event(2))
        self.fc2.bias = PyroSample(dist.Normal(0.0, 1.0).expand([1]).to_event(1))

    def forward(self, x, y=None):
        mean = self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(mean, 0.1), obs=y)
        return mean


def _data(kind: str):
    g = torch.Generator().manual_seed(0)
    if kind == "regression":
        africa = (torch.rand(170, generator=g) < 0.3).float()
        rugged = torch.distributions.Gamma(1.5, 1.0).sample((170,)).clamp(max=6.0)
        x = torch.stack([africa, rugged, africa * rugged], 1)
        y = 9.2 - 1.9 * africa - 0.2 * rugged + 0.4 * africa * rugged + 0.95 * torch.randn(170, generator=g)
        return x, y
    x = torch.linspace(-2.0, 2.0, 100).unsqueeze(-1)
    return x, torch.sin(2.0 * x[:, 0]) + 0.1 * torch.randn(100, generator=g)


def _spin(stop):
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _pyro_seconds(module, x, y, samples: int, warmup: int, chains: int) -> float:
    start = time.perf_counter()
    for c in range(chains):
        pyro.set_rng_seed(c)
        MCMC(NUTS(module), num_samples=samples, warmup_steps=warmup, disable_progbar=True).run(x, y)
    return time.perf_counter() - start


def _ours_seconds(module, x, y, samples: int, warmup: int, chains: int) -> tuple[float, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pyro_bdl.fit(module, (x, y), inference="nuts", samples=samples, warmup=warmup, chains=chains,
                           progress=False)
    return fit.record.wall_seconds, fit.record.runs_on["threads"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--draws", type=int, default=500, help="warmup and draws per chain (default 500 each)")
    parser.add_argument("--hidden", type=int, default=10, help="hidden units of the network (default 10)")
    parser.add_argument("--models", nargs="+", choices=["regression", "bnn"], default=["regression", "bnn"],
                        help="which models to time (default both)")
    parser.add_argument("--loads", nargs="+", choices=["alone", "busy"], default=["alone", "busy"],
                        help="alone, beside a busy process, or both (default)")
    args = parser.parse_args()
    samples, warmup, chains = (5, 5, 2) if args.quick else (args.draws, args.draws, 2)
    hidden = 2 if args.quick else args.hidden  # a smoke run: Pyro's NUTS on the 1-10-1 net takes minutes for 10 draws
    cases = {"BayesianRegression (tutorial), 170 x 3": (BayesianRegression(3, 1), "regression"),
             f"BNN 1-{hidden}-1 (PyroModule idiom), 100 rows": (BNN(hidden), "bnn")}
    print(f"torch {torch.__version__}, pyro {pyro.__version__}; {chains} chains x ({warmup} warmup + {samples} draws)")
    print("| model | load | Pyro's NUTS (s) | pyro_bdl nuts (s) | ratio | our threads |")
    print("|---|---|---|---|---|---|")
    for name, (module, kind) in cases.items():
        if kind not in args.models:
            continue
        x, y = _data(kind)
        _ours_seconds(module, x, y, 5, 5, chains)  # the potential is traced once per model and data shapes
        for load in [{"alone": "alone", "busy": "beside a busy process"}[k] for k in args.loads]:
            stop = multiprocessing.Event()
            busy = multiprocessing.Process(target=_spin, args=(stop,)) if load != "alone" else None
            if busy is not None:
                busy.start()
            try:
                theirs = _pyro_seconds(module, x, y, samples, warmup, chains)
                ours, threads = _ours_seconds(module, x, y, samples, warmup, chains)
            finally:
                if busy is not None:
                    stop.set()
                    busy.join()
            print(f"| {name} | {load} | {theirs:.1f} | {ours:.1f} | {theirs / ours:.1f}x faster | {threads} |")


if __name__ == "__main__":
    main()
