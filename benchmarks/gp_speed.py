"""Seconds per marginal-likelihood step of the exact GP: the zoo's ``gp`` under ``map`` (one Adam step of the log
marginal likelihood and the priors, with its gradient) against GPyTorch's ``ExactGP`` trained the same way
(``ExactMarginalLogLikelihood``, Adam), on the same data, in one run (issue 51).

The zoo's time per step is the slope between two run lengths (``--short`` and ``--long`` steps of ``pyro_bdl.fit``),
so its set-up and the checks after the run cancel; GPyTorch's is the mean of ``--long`` steps after two.  GPyTorch is
timed twice: at its defaults (float32; above 800 rows conjugate gradients and Lanczos instead of Cholesky) and like
for like (float64, Cholesky at every size).  Data: ARD RBF-shaped targets on ``--dims`` inputs, generated.

    python benchmarks/gp_speed.py                         # n = 1000 and 5000
    python benchmarks/gp_speed.py --rows 200 --short 2 --long 4   # a smoke run

Without GPyTorch installed (it is not a dependency: ``pip install gpytorch``) its columns say so.
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import torch

import pyro_bdl


def data(n: int, dims: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, dims, generator=g) * 4.0 - 2.0
    y = torch.sin(2.0 * X[:, 0]) + 0.3 * X[:, 1:].sum(-1) + 0.1 * torch.randn(n, generator=g)
    return {"X": X, "y": y}


def zoo_seconds(d: dict, short: int, long: int) -> float:
    def run(steps: int) -> float:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pyro_bdl.fit("gp", d, inference="map", steps=steps, lr=0.05, progress=False, seed=0)
        return time.perf_counter() - start

    run(short)  # the first fit pays one-off costs (imports, compiled kernels)
    return (run(long) - run(short)) / (long - short)


def gpytorch_seconds(d: dict, steps: int, like_for_like: bool) -> float | None:
    try:
        import gpytorch
    except ImportError:
        return None
    dtype = torch.float64 if like_for_like else torch.float32
    X, y = d["X"].to(dtype), d["y"].to(dtype)

    class Exact(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(X, y, likelihood)
            self.mean = gpytorch.means.ConstantMean()
            self.kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean(x), self.kernel(x))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
    model = Exact(likelihood).to(dtype)
    model.train(), likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    optim = torch.optim.Adam(model.parameters(), lr=0.05)
    settings = gpytorch.settings.max_cholesky_size(10 ** 9) if like_for_like else gpytorch.settings.max_cholesky_size(800)

    def step():
        optim.zero_grad()
        loss = -mll(model(X), y)
        loss.backward()
        optim.step()

    with settings:
        for _ in range(2):
            step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
    return (time.perf_counter() - start) / steps


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--dims", type=int, default=4)
    parser.add_argument("--short", type=int, default=5)
    parser.add_argument("--long", type=int, default=15)
    args = parser.parse_args(argv)
    print(f"# gp_speed: torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print("| rows | zoo s/step (float64 Cholesky) | GPyTorch defaults s/step | GPyTorch float64 Cholesky s/step "
          "| zoo / GPyTorch defaults | zoo / GPyTorch float64 |")
    print("|---|---|---|---|---|---|")
    for n in args.rows:
        d = data(n, args.dims)
        ours = zoo_seconds(d, args.short, args.long)
        default = gpytorch_seconds(d, args.long, like_for_like=False)
        exact = gpytorch_seconds(d, args.long, like_for_like=True)

        def cell(value):
            return "not installed" if value is None else f"{value:.4f}"

        def ratio(value):
            return "-" if value is None else f"{ours / value:.2f}"

        print(f"| {n} | {ours:.4f} | {cell(default)} | {cell(exact)} | {ratio(default)} | {ratio(exact)} |", flush=True)


if __name__ == "__main__":
    main()
