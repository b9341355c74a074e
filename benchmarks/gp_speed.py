"""Seconds per marginal-likelihood step of the exact GP: the zoo's ``gp`` under ``map`` (one Adam step of the log
marginal likelihood and the priors, with its gradient) against GPyTorch's ``ExactGP`` trained the same way
(``ExactMarginalLogLikelihood``, Adam), on the same data, in one run (issue 51).

The zoo's time per step is the slope between two run lengths (``--short`` and ``--long`` steps of ``pyro_bdl.fit``),
so its set-up and the checks after the run cancel; GPyTorch's is the mean of ``--long`` steps after two.  GPyTorch is
timed twice: at its defaults (float32; above 800 rows conjugate gradients and Lanczos instead of Cholesky) and like
for like (float64, Cholesky at every size).  Data: ARD RBF-shaped targets on ``--dims`` inputs, generated.

    python benchmarks/gp_speed.py                         # n = 1000 and 5000
    python benchmarks/gp_speed.py --rows 200 --short 2 --long 4   # a smoke run
    python benchmarks/gp_speed.py --rows --sparse-rows 50000      # the sparse GP only

``--sparse-rows N``: seconds per epoch (N / ``--batch`` minibatch steps) of the sparse variational GP, the zoo's
``gp`` with ``approximation=svgp`` under ``svi`` (its full-covariance guide over the whitened inducing values and the
hyperparameters) against GPyTorch's ``ApproximateGP`` (whitened ``VariationalStrategy``, Cholesky variational
distribution, inducing inputs learned, ``VariationalELBO``, Adam), ``--inducing`` points each, float32 both; and
``--heldout N``: the held-out log-likelihood per row of the exact GP (map), the collapsed bound (map) and the svgp
(svi) on N training rows of the same function, 1000 held-out rows.

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


def gpytorch_exact(X, y, likelihood, mean):
    """GPyTorch's exact GP on ``X``, ``y``: ``mean``, an ARD RBF kernel times a learned scale (gpytorch importable)."""
    import gpytorch

    class Exact(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(X, y, likelihood)
            self.mean = mean
            self.kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean(x), self.kernel(x))

    return Exact()


def gpytorch_seconds(d: dict, steps: int, like_for_like: bool) -> float | None:
    try:
        import gpytorch
    except ImportError:
        return None
    dtype = torch.float64 if like_for_like else torch.float32
    X, y = d["X"].to(dtype), d["y"].to(dtype)
    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
    model = gpytorch_exact(X, y, likelihood, gpytorch.means.ConstantMean()).to(dtype)
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
        return seconds_per_step(step, steps)


def seconds_per_step(step, steps: int) -> float:
    """The mean seconds of ``steps`` calls of ``step`` after two (their one-off costs)."""
    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def zoo_sparse_seconds(d: dict, batch: int, inducing: int, short: int, long: int, jit: bool = False) -> float:
    def run(steps: int) -> float:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pyro_bdl.fit("gp", d, inference="svi", guide="mvn", options={"approximation": "svgp", "inducing": inducing},
                         batch_size=batch, steps=steps, lr=0.01, samples=10, progress=False, seed=0, jit=jit)
        return time.perf_counter() - start

    run(short)
    return (run(long) - run(short)) / (long - short)


def gpytorch_sparse_seconds(d: dict, batch: int, inducing: int, steps: int) -> float | None:
    try:
        import gpytorch
    except ImportError:
        return None
    X, y = d["X"], d["y"]

    class Sparse(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            q = gpytorch.variational.CholeskyVariationalDistribution(len(Z))
            strategy = gpytorch.variational.VariationalStrategy(self, Z, q, learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean = gpytorch.means.ConstantMean()
            self.kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=X.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean(x), self.kernel(x))

    model, likelihood = Sparse(X[:inducing].clone()), gpytorch.likelihoods.GaussianLikelihood()
    model.train(), likelihood.train()
    elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(y))
    optim = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=0.01)
    g = torch.Generator().manual_seed(0)

    def step():
        idx = torch.randint(len(y), (batch,), generator=g)
        optim.zero_grad()
        loss = -elbo(model(X[idx]), y[idx])
        loss.backward()
        optim.step()

    return seconds_per_step(step, steps)


def heldout(n: int, dims: int, inducing: int, steps: int = 1000) -> dict:
    """Held-out log-likelihood per row of the exact GP and the sparse ones on ``n`` training rows, and each fit's
    seconds."""
    from pyro_bdl.data.table import Dataset
    from pyro_bdl.posterior.evaluation import evaluate_fit

    both = data(n + 1000, dims, seed=1)
    train = {"X": both["X"][:n], "y": both["y"][:n]}
    test = Dataset("held out", both["X"][n:], both["y"][n:], [f"x{j}" for j in range(dims)], "y")
    fits = {"exact (map)": ("map", {"approximation": "exact"}, {}),
            "collapsed (map)": ("map", {"approximation": "collapsed", "inducing": inducing}, {}),
            "svgp (svi, minibatch 500)": ("svi", {"approximation": "svgp", "inducing": inducing},
                                          {"batch_size": 500, "guide": "mvn"})}
    out = {}
    for name, (method, options, extra) in fits.items():
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = pyro_bdl.fit("gp", train, inference=method, options=options, steps=steps, lr=0.05, progress=False,
                               seed=0, **extra)
        out[name] = (evaluate_fit(fit, test)["test_ll"], time.perf_counter() - start)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--dims", type=int, default=4)
    parser.add_argument("--short", type=int, default=5)
    parser.add_argument("--long", type=int, default=15)
    parser.add_argument("--sparse-rows", type=int, nargs="*", default=[])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--inducing", type=int, default=100)
    parser.add_argument("--heldout", type=int, nargs="*", default=[])
    parser.add_argument("--heldout-steps", type=int, default=1000)
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
    if args.sparse_rows:
        print(f"\n| rows | batch | inducing | zoo svgp (natural gradients) s/epoch | zoo svgp, jit=true (Adam), s/epoch "
              f"| GPyTorch SVGP (Adam) s/epoch "
              f"| zoo / GPyTorch | zoo jit / GPyTorch |")
        print("|---|---|---|---|---|---|---|---|")
    for n in args.sparse_rows:
        d = data(n, args.dims)
        epoch = n / args.batch
        ours = zoo_sparse_seconds(d, args.batch, args.inducing, 2 * args.short, 2 * args.long) * epoch
        compiled = zoo_sparse_seconds(d, args.batch, args.inducing, 2 * args.short, 2 * args.long, jit=True) * epoch
        theirs = gpytorch_sparse_seconds(d, args.batch, args.inducing, 2 * args.long)
        cell = "not installed" if theirs is None else f"{theirs * epoch:.3f}"

        def ratio(value):
            return "-" if theirs is None else f"{value / (theirs * epoch):.2f}"

        print(f"| {n} | {args.batch} | {args.inducing} | {ours:.3f} | {compiled:.3f} | {cell} | {ratio(ours)} | "
              f"{ratio(compiled)} |", flush=True)
    for n in args.heldout:
        print(f"\n| training rows {n}, inducing {args.inducing} | held-out LL per row | seconds ({args.heldout_steps} "
              f"steps) |")
        print("|---|---|---|")
        for name, (ll, seconds) in heldout(n, args.dims, args.inducing, args.heldout_steps).items():
            print(f"| {name} | {ll:.4f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
