"""Random conjugate problems with fixed seeds, shared by the statistical tests."""

from __future__ import annotations

import numpy as np
import torch

from pyro_bdl.data import Dataset


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


PROBLEMS = {"blr": blr_problem, "coin": coin_problem}
