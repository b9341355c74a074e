"""The test models and problems the tests share: eight schools (centred and non-centred) and random conjugate problems
with fixed seeds for the statistical tests."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch

from pyro_bdl.data.table import Dataset


def blr_problem(seed: int = 1, n: int = 40, d: int = 2, noise: float = 0.5) -> tuple[Dataset, dict]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    y = X @ w + 0.5 * rng.normal() + noise * rng.normal(size=n)
    ds = Dataset(f"blr-{seed}", torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                 [f"x{j}" for j in range(d)], "y")
    return ds, {"noise": noise, "prior_scale": 1.0}


def coin_problem(seed: int = 1, n: int = 25) -> tuple[Dataset, dict]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8)
    y = (rng.random(n) < p).astype(np.float32)
    ds = Dataset(f"coin-{seed}", torch.zeros(n, 0), torch.tensor(y), [], "y")  # no feature columns
    return ds, {"alpha": 2.0, "beta": 3.0}


def last_layer_problem(seed: int = 1, n: int = 30, d: int = 2) -> tuple[Dataset, dict]:
    """A smooth nonlinear function of d inputs, noise 0.5; 4 random tanh features (posterior condition
    number 58: well conditioned, so NUTS needs short trees)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(X @ rng.normal(size=d)) + 0.5 * rng.normal(size=n)
    ds = Dataset(f"last-layer-{seed}", torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32),
                 [f"x{j}" for j in range(d)], "y")
    return ds, {"hidden": "4", "noise": 0.5}


#: One problem per zoo model with an exact posterior (tests/test_exact_posteriors.py checks there is one).
PROBLEMS = {"blr": blr_problem, "coin": coin_problem, "last-layer": last_layer_problem}


# Eight schools (Rubin 1981): the effects and their standard errors.
SCHOOLS_Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
SCHOOLS = {"sigma": SCHOOLS_SIGMA, "y": SCHOOLS_Y}


def centred_schools(sigma, y=None):
    """Eight schools, centred, as Pyro's examples write it: theta_j ~ N(mu, tau), y_j ~ N(theta_j, sigma_j)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("J", len(sigma)):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("y", dist.Normal(theta, sigma), obs=y)


def noncentred_schools(sigma, y=None):
    """Eight schools, non-centred: theta_j = mu + tau eta_j, eta_j ~ N(0, 1), theta a deterministic site."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", len(sigma)):
        theta_tilde = pyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        theta = pyro.deterministic("theta", mu + tau * theta_tilde)
        return pyro.sample("obs", dist.Normal(theta, sigma), obs=y)
