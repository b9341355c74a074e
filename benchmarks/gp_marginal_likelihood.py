"""The optimised log marginal likelihood of the exact GP (type-II maximum likelihood): the zoo's ``gp`` under ``mle``
with restarts against scikit-learn's ``GaussianProcessRegressor`` (L-BFGS-B with restarts) and GPyTorch's
``ExactGP`` (Adam), on the same data and kernel (ARD RBF times a constant, plus white noise, constant mean), each
problem of a generated family: other functions, sizes, input dimensions and noise levels (issue 51).

Every optimum is scored by one function, the exact log marginal likelihood at that optimum's hyperparameters
(scikit-learn's, with the mean subtracted as ours does), so the three columns differ only by where their optimisers
ended.

    python benchmarks/gp_marginal_likelihood.py                  # the family, 5 restarts each
    python benchmarks/gp_marginal_likelihood.py --problems 1 --restarts 1 --steps 50 --rows 30   # a smoke run

Without GPyTorch installed (it is not a dependency) its column says so.
"""

from __future__ import annotations

import argparse
import math
import warnings

import numpy as np
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process import kernels as sk

import pyro_bdl
from gp_speed import gpytorch_exact  # the same GPyTorch model as the speed benchmark's (this script's folder)

FUNCTIONS = {
    "sine": lambda X: np.sin(2.0 * X[:, 0]) + 0.5 * X[:, -1],
    "bumps": lambda X: np.exp(-2.0 * (X ** 2).sum(1)) - np.exp(-2.0 * ((X - 1.0) ** 2).sum(1)),
    "ridge": lambda X: np.tanh(3.0 * X.sum(1) / math.sqrt(X.shape[1])),
}


def family(count: int, rows: int | None = None):
    """``count`` problems (name, X (n, d), y (n,)): functions x sizes x dimensions x noise levels, fixed seeds."""
    rng = np.random.default_rng(0)
    out = []
    for k in range(count):
        name = list(FUNCTIONS)[k % len(FUNCTIONS)]
        n = rows or [40, 80, 150][k % 3]
        d = [1, 2, 4][(k // 3) % 3]
        noise = [0.05, 0.2, 0.5][(k // 2) % 3]
        X = rng.uniform(-2, 2, (n, d))
        y = FUNCTIONS[name](X) + noise * rng.normal(size=n)
        out.append((f"{name} n={n} d={d} noise={noise}", X, y))
    return out


def sklearn_kernel(lengthscale, variance, noise):
    return sk.ConstantKernel(variance) * sk.RBF(lengthscale) + sk.WhiteKernel(noise ** 2)


def exact_lml(X, y, lengthscale, variance, noise) -> float:
    reg = GaussianProcessRegressor(sklearn_kernel(np.atleast_1d(lengthscale), variance, noise), optimizer=None)
    reg.fit(X, y - y.mean())
    return float(reg.log_marginal_likelihood_value_)


def ours(X, y, restarts: int, steps: int) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pyro_bdl.fit("gp", {"X": torch.tensor(X, dtype=torch.float64), "y": torch.tensor(y, dtype=torch.float64)},
                           inference="mle", steps=steps, lr=0.05, restarts=restarts, progress=False, seed=0)
    value = {k: fit.posterior_mean(k).numpy() for k in ("lengthscale", "variance", "noise")}
    return exact_lml(X, y, value["lengthscale"], float(value["variance"]), float(value["noise"]))


def theirs(X, y, restarts: int) -> float:
    d = X.shape[1]
    kernel = sk.ConstantKernel(1.0, (1e-3, 1e3)) * sk.RBF(np.ones(d), (1e-2, 1e2)) + sk.WhiteKernel(0.1, (1e-6, 1e1))
    reg = GaussianProcessRegressor(kernel, n_restarts_optimizer=restarts - 1, random_state=0).fit(X, y - y.mean())
    p = reg.kernel_.get_params()
    return exact_lml(X, y, p["k1__k2__length_scale"], p["k1__k1__constant_value"], math.sqrt(p["k2__noise_level"]))


def gpytorch_lml(X, y, steps: int) -> float | None:
    try:
        import gpytorch
    except ImportError:
        return None
    Xt, yt = torch.tensor(X), torch.tensor(y - y.mean())
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    model = gpytorch_exact(Xt, yt, likelihood, gpytorch.means.ZeroMean()).double()
    model.train(), likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    optim = torch.optim.Adam(model.parameters(), lr=0.05)
    with gpytorch.settings.max_cholesky_size(10 ** 9):
        for _ in range(steps):
            optim.zero_grad()
            (-mll(model(Xt), yt)).backward()
            optim.step()
    lengthscale = model.kernel.base_kernel.lengthscale.detach().numpy().ravel()
    return exact_lml(X, y, lengthscale, float(model.kernel.outputscale.detach()), math.sqrt(float(likelihood.noise.detach())))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=9)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args(argv)
    print(f"# gp_marginal_likelihood: {args.restarts} restarts (zoo mle and scikit-learn), {args.steps} Adam steps "
          f"(zoo per start, GPyTorch one start)")
    print("| problem | zoo mle | scikit-learn | GPyTorch | zoo - scikit-learn | zoo - GPyTorch |")
    print("|---|---|---|---|---|---|")
    for name, X, y in family(args.problems, args.rows):
        a, b, c = ours(X, y, args.restarts, args.steps), theirs(X, y, args.restarts), gpytorch_lml(X, y, args.steps)
        cc = "not installed" if c is None else f"{c:.4f}"
        dc = "-" if c is None else f"{a - c:+.4f}"
        print(f"| {name} | {a:.4f} | {b:.4f} | {cc} | {a - b:+.4f} | {dc} |", flush=True)


if __name__ == "__main__":
    main()
