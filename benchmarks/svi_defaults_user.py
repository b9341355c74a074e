r"""SVI, MAP and MLE defaults on the models users write (issue 35), and the drift check's false alarms and hits.

Run on demand (the test suite smoke-tests ``--quick``); the runs of benchmarks/RESULTS.md, "SVI defaults on user
models (issue 35)"::

    .venv/bin/python benchmarks/svi_defaults_user.py --family tune --candidates old hold50 hold75 lr05-hold50 ...
    .venv/bin/python benchmarks/svi_defaults_user.py --family check --seeds 0 1 2
    .venv/bin/python benchmarks/svi_defaults_user.py --short
    .venv/bin/python benchmarks/svi_defaults_user.py --rugged 5
    .venv/bin/python benchmarks/svi_defaults_user.py --write-fixture tests/support/fixtures/rugged_nuts.json

Two generated families of user-style models (plain Pyro functions fitted with ``pyro_bdl.fit(model, data)``, data in
their own units): ``tune``, the one the defaults were chosen on (the ruggedness regression of Pyro's
Bayesian-regression tutorial on a generated stand-in, a regression with an intercept far from 0, one with a tight
posterior, a centred hierarchical varying-intercept model, a logistic and a Poisson GLM, a regression whose prior is
centred away from 0), and ``check``, the one they were checked on (other functions, sizes, noise levels and scales: a
quadratic, Rethinking's heights model, a Student-t regression with an intercept at 40, non-centred varying intercepts
and slopes, eight schools, a binomial GLM, a gamma GLM).  References: NUTS (``pyro_bdl.fit(..., "nuts")``, 2 chains
of 1000) for the posterior, L-BFGS on the log joint (MAP) or the log likelihood (MLE) for the modes, and for the svi
methods a run of 10000 steps at the user defaults (the optimum the guide family reaches).  Each fit is scored by

* ``err``: the largest distance, over every scalar of every site, of its posterior mean (a point fit: its point) from
  the NUTS mean (a point fit: the mode), in NUTS posterior sds: the guide family's bias plus the optimiser's shortfall;
* ``conv``: the same from the optimum (the long run; the mode): the shortfall alone; a fit is *off* at 1 or more;
* ``sd / NUTS sd``: the range of its posterior sds over NUTS's (svi methods);
* what the drift check (:mod:`pyro_bdl.inference.drift`) recorded: ``drift`` (the answer's whole move between the
  late windows, in its own sds), ``running`` and ``drifting`` (the parts the entries at full pace, and those beyond
  their jitter, make), the largest ``t`` and ``pace`` of an optimised entry, the loss check's ``settled``, and
  ``warned`` (``moving``: the drift check, ``+loss``: the loss check).

``--short`` runs the deliberately too-short fits the check must catch: the old schedule (rate decaying from the first
step at lr 0.02) at 300, 1000 and 2000 steps and the user defaults at 300 steps, for svi and map.  ``--rugged N``
prints the ruggedness stand-in's svi fits next to the NUTS fixture over N seeds.  ``--replay LOG...`` tallies printed
tables with other thresholds.  ``--quick``: one small model, svi and map, 300 steps, a small NUTS reference (a smoke
run: it checks that the script works, not the numbers).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch.distributions import biject_to

import pyro_bdl
from pyro_bdl.inference import latent_sites, observed_sites
from pyro_bdl.inference.drift import DRIFT_FULL_PACE, DRIFT_MIN, DRIFT_VISIBLE


# ---------------------------------------------------------------------------------------------------------------------
# the models: plain Pyro functions, as a user writes them (tutorial style: priors at 0 or wide, data in its own units)


def rugged_model(africa, rugged, log_gdp=None):
    """Pyro's Bayesian-regression tutorial: log GDP ~ N(a + bA africa + bR rugged + bAR africa rugged, sigma)."""
    a = pyro.sample("a", dist.Normal(0.0, 10.0))
    b_a = pyro.sample("bA", dist.Normal(0.0, 1.0))
    b_r = pyro.sample("bR", dist.Normal(0.0, 1.0))
    b_ar = pyro.sample("bAR", dist.Normal(0.0, 1.0))
    sigma = pyro.sample("sigma", dist.Uniform(0.0, 10.0))
    mean = a + b_a * africa + b_r * rugged + b_ar * africa * rugged
    with pyro.plate("data", len(africa)):
        pyro.sample("obs", dist.Normal(mean, sigma), obs=log_gdp)


def rugged_data(seed: int = 35, n: int = 170) -> dict:
    """A stand-in for the tutorial's data (which cannot be downloaded here): 170 countries, ~30% in Africa,
    ruggedness in [0, 6] skewed to the right, log GDP from the tutorial's fitted coefficients
    (a 9.2, bA -1.9, bR -0.2, bAR 0.4, sigma 0.95)."""
    g = torch.Generator().manual_seed(seed)
    africa = (torch.rand(n, generator=g) < 0.3).float()
    rugged = torch.clamp(-torch.log(torch.rand(n, generator=g)) * 1.2, max=6.0)
    mean = 9.2 - 1.9 * africa - 0.2 * rugged + 0.4 * africa * rugged
    return {"africa": africa, "rugged": rugged, "log_gdp": mean + 0.95 * torch.randn(n, generator=g)}


def linear_model(X, y=None, a_scale=50.0, b_scale=10.0, sigma_scale=10.0):
    """y ~ N(a + X b, sigma): a ~ N(0, a_scale), b_j ~ N(0, b_scale), sigma ~ HalfNormal(sigma_scale)."""
    a = pyro.sample("a", dist.Normal(0.0, a_scale))
    b = pyro.sample("b", dist.Normal(0.0, b_scale).expand([X.shape[1]]).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(sigma_scale))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Normal(a + X @ b, sigma), obs=y)


def _linear_data(seed, n, a, b, sigma, columns):
    g = torch.Generator().manual_seed(seed)
    X = torch.stack([low + (high - low) * torch.rand(n, generator=g) if kind == "u" else low + high * torch.randn(n, generator=g)
                     for kind, low, high in columns], dim=1)
    return {"X": X, "y": a + X @ torch.tensor(b) + sigma * torch.randn(n, generator=g)}


def hier_model(group, x, y=None, groups=12):
    """Varying intercepts (radon style, centred): alpha_j ~ N(mu, tau), y ~ N(alpha[group] + beta x, sigma)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = pyro.sample("tau", dist.HalfNormal(5.0))
    beta = pyro.sample("beta", dist.Normal(0.0, 5.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(5.0))
    with pyro.plate("groups", groups):
        alpha = pyro.sample("alpha", dist.Normal(mu, tau))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Normal(alpha[group] + beta * x, sigma), obs=y)


def _hier_data(seed, n=240, groups=12):
    g = torch.Generator().manual_seed(seed)
    group = torch.arange(n) % groups
    alpha = 6.0 + 1.2 * torch.randn(groups, generator=g)
    x = (torch.rand(n, generator=g) < 0.4).float()
    return {"group": group, "x": x, "y": alpha[group] - 0.6 * x + 0.8 * torch.randn(n, generator=g), "groups": groups}


def logistic_model(X, y=None, scale=5.0):
    """Bernoulli(logit = a + X b): a, b_j ~ N(0, scale)."""
    a = pyro.sample("a", dist.Normal(0.0, scale))
    b = pyro.sample("b", dist.Normal(0.0, scale).expand([X.shape[1]]).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=a + X @ b), obs=y)


def _logistic_data(seed, n=400, a=-2.5, b=(1.5, -0.8, 0.3)):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, len(b), generator=g)
    p = torch.sigmoid(a + X @ torch.tensor(b))
    return {"X": X, "y": (torch.rand(n, generator=g) < p).float()}


def poisson_model(X, y=None, scale=5.0):
    """Poisson(log rate = a + X b): a, b_j ~ N(0, scale)."""
    a = pyro.sample("a", dist.Normal(0.0, scale))
    b = pyro.sample("b", dist.Normal(0.0, scale).expand([X.shape[1]]).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Poisson((a + X @ b).exp()), obs=y)


def _poisson_data(seed, n=200, a=3.0, b=(0.4, -0.6)):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, len(b), generator=g)
    return {"X": X, "y": torch.poisson((a + X @ torch.tensor(b)).exp(), generator=g)}


def centred_model(x, y=None):
    """A prior centred away from 0 (a user's guess of the intercept): a ~ N(50, 10), b ~ N(0, 5), sigma ~ Exp(0.2)."""
    a = pyro.sample("a", dist.Normal(50.0, 10.0))
    b = pyro.sample("b", dist.Normal(0.0, 5.0))
    sigma = pyro.sample("sigma", dist.Exponential(0.2))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Normal(a + b * x, sigma), obs=y)


def _centred_data(seed, n=80):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    return {"x": x, "y": 46.0 + 2.0 * x + 4.0 * torch.randn(n, generator=g)}


# the check family: other functions, sizes, noise levels and scales


def height_model(weight, height=None):
    """Statistical Rethinking's m4.3 (heights on weights, centred): a ~ N(178, 20), b ~ LogNormal(0, 1),
    sigma ~ Uniform(0, 50)."""
    a = pyro.sample("a", dist.Normal(178.0, 20.0))
    b = pyro.sample("b", dist.LogNormal(0.0, 1.0))
    sigma = pyro.sample("sigma", dist.Uniform(0.0, 50.0))
    with pyro.plate("data", len(weight)):
        pyro.sample("height", dist.Normal(a + b * (weight - weight.mean()), sigma), obs=height)


def _height_data(seed, n=352):
    g = torch.Generator().manual_seed(seed)
    weight = 45.0 + 6.5 * torch.randn(n, generator=g)
    return {"weight": weight, "height": 154.6 + 0.9 * (weight - weight.mean()) + 5.1 * torch.randn(n, generator=g)}


def quadratic_model(t, y=None):
    """y ~ N(a + b1 t + b2 t^2, sigma): a ~ N(0, 20), b ~ N(0, 5), sigma ~ Exponential(0.5)."""
    a = pyro.sample("a", dist.Normal(0.0, 20.0))
    b1 = pyro.sample("b1", dist.Normal(0.0, 5.0))
    b2 = pyro.sample("b2", dist.Normal(0.0, 5.0))
    sigma = pyro.sample("sigma", dist.Exponential(0.5))
    with pyro.plate("data", len(t)):
        pyro.sample("y", dist.Normal(a + b1 * t + b2 * t ** 2, sigma), obs=y)


def _quadratic_data(seed, n=60):
    g = torch.Generator().manual_seed(seed)
    t = -3.0 + 8.0 * torch.rand(n, generator=g)
    return {"t": t, "y": -12.0 + 2.0 * t - 0.4 * t ** 2 + 3.0 * torch.randn(n, generator=g)}


def robust_model(x, y=None):
    """Student-t (4 dof) regression: a ~ N(0, 100), b ~ N(0, 10), scale ~ HalfCauchy(10)."""
    a = pyro.sample("a", dist.Normal(0.0, 100.0))
    b = pyro.sample("b", dist.Normal(0.0, 10.0))
    scale = pyro.sample("scale", dist.HalfCauchy(10.0))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.StudentT(4.0, a + b * x, scale), obs=y)


def _robust_data(seed, n=300):
    g = torch.Generator().manual_seed(seed)
    x = 10.0 * torch.randn(n, generator=g)
    return {"x": x, "y": 40.0 + 0.8 * x + 5.0 * _student(g, n, 4.0)}


def _student(g, n, df):
    z = torch.randn(n, generator=g)
    chi2 = torch.stack([torch.randn(n, generator=g) ** 2 for _ in range(int(df))]).sum(0)
    return z / torch.sqrt(chi2 / df)


def slopes_model(group, x, y=None, groups=8):
    """Varying intercepts and slopes, non-centred: (a_j, b_j) = (mu_a + tau_a z_aj, mu_b + tau_b z_bj)."""
    mu_a = pyro.sample("mu_a", dist.Normal(0.0, 10.0))
    mu_b = pyro.sample("mu_b", dist.Normal(0.0, 5.0))
    tau_a = pyro.sample("tau_a", dist.HalfNormal(2.0))
    tau_b = pyro.sample("tau_b", dist.HalfNormal(2.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(2.0))
    with pyro.plate("groups", groups):
        z_a = pyro.sample("z_a", dist.Normal(0.0, 1.0))
        z_b = pyro.sample("z_b", dist.Normal(0.0, 1.0))
    a, b = mu_a + tau_a * z_a, mu_b + tau_b * z_b
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Normal(a[group] + b[group] * x, sigma), obs=y)


def _slopes_data(seed, n=160, groups=8):
    g = torch.Generator().manual_seed(seed)
    group = torch.arange(n) % groups
    a = -3.0 + 1.0 * torch.randn(groups, generator=g)
    b = 1.5 + 0.5 * torch.randn(groups, generator=g)
    x = torch.randn(n, generator=g)
    return {"group": group, "x": x, "y": a[group] + b[group] * x + 0.5 * torch.randn(n, generator=g), "groups": groups}


def schools_model(sigma, y=None):
    """Eight schools, non-centred: theta_j = mu + tau eta_j, mu ~ N(0, 5), tau ~ HalfCauchy(5)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("schools", len(sigma)):
        eta = pyro.sample("eta", dist.Normal(0.0, 1.0))
        pyro.sample("y", dist.Normal(mu + tau * eta, sigma), obs=y)


def _schools_data(seed):
    return {"sigma": torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]),
            "y": torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])}


def binomial_model(x, trials, y=None):
    """Binomial(trials, logit = a + b x): a, b ~ N(0, 3)."""
    a = pyro.sample("a", dist.Normal(0.0, 3.0))
    b = pyro.sample("b", dist.Normal(0.0, 3.0))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Binomial(trials, logits=a + b * x), obs=y)


def _binomial_data(seed, n=40, trials=200):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    p = torch.sigmoid(1.2 - 0.9 * x)
    return {"x": x, "trials": torch.full((n,), float(trials)),
            "y": torch.binomial(torch.full((n,), float(trials)), p, generator=g)}


def gamma_model(x, y=None):
    """Gamma regression: y ~ Gamma(k, k / mu), log mu = a + b x; a, b ~ N(0, 10), k ~ Gamma(2, 0.5)."""
    a = pyro.sample("a", dist.Normal(0.0, 10.0))
    b = pyro.sample("b", dist.Normal(0.0, 10.0))
    k = pyro.sample("k", dist.Gamma(2.0, 0.5))
    mu = (a + b * x).exp()
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Gamma(k, k / mu), obs=y)


def _gamma_data(seed, n=500, k=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) * 2.0 - 1.0
    mu = (4.0 + 0.5 * x).exp()
    return {"x": x, "y": _gamma(g, k, mu)}


def _gamma(g, k, mu):
    # Gamma(k) for whole k as a sum of exponentials (a seeded generator; torch's gamma sampler takes none)
    draws = -torch.log(torch.rand((int(k),) + mu.shape, generator=g)).sum(0)
    return draws * mu / k


@dataclass(frozen=True)
class Problem:
    """A user-style model and its generated data; ``point``: whether MAP and MLE have a finite mode on it (not on a
    hierarchical model: the joint density grows without bound as the group sd goes to 0); ``plated``: whether it has
    latent sites in a plate, which ``svi-meanfield``'s guide (:class:`~pyro_bdl.inference.guides.MeanFieldGuide`)
    does not declare (Pyro refuses the guide's site shape), so that method is left out there."""

    name: str
    family: str
    model: Callable
    data: Callable[[int], dict]
    point: bool = True
    plated: bool = False


PROBLEMS = [
    Problem("rugged", "tune", rugged_model, rugged_data),
    Problem("linear-far", "tune", linear_model,
            lambda s: _linear_data(s, 100, 25.0, [3.0, -0.5], 2.0, [("n", 0.0, 1.0), ("u", 0.0, 10.0)])),
    Problem("linear-tight", "tune", linear_model,
            lambda s: _linear_data(s, 500, -4.0, [0.7, 1.3, -2.0], 0.1, [("n", 0.0, 1.0)] * 3)),
    Problem("hier-intercepts", "tune", hier_model, _hier_data, point=False, plated=True),
    Problem("logistic", "tune", logistic_model, _logistic_data),
    Problem("poisson", "tune", poisson_model, _poisson_data),
    Problem("centred-prior", "tune", centred_model, _centred_data),
    Problem("quadratic", "check", quadratic_model, _quadratic_data),
    Problem("heights", "check", height_model, _height_data),
    Problem("robust-t", "check", robust_model, _robust_data),
    Problem("slopes-noncentred", "check", slopes_model, _slopes_data, point=False, plated=True),
    Problem("eight-schools", "check", schools_model, _schools_data, point=False, plated=True),
    Problem("binomial", "check", binomial_model, _binomial_data),
    Problem("gamma", "check", gamma_model, _gamma_data),
]


# ---------------------------------------------------------------------------------------------------------------------
# references


def flat_summary(samples: dict) -> dict:
    """site -> (mean, sd), each a flat float64 array over the site's scalars, from draws (chains, draws, *shape)."""
    out = {}
    for name, value in samples.items():
        flat = value.reshape(value.shape[0] * value.shape[1], -1).double()
        out[name] = (flat.mean(0).numpy(), flat.std(0).numpy() if flat.shape[0] > 1 else np.zeros(flat.shape[1]))
    return out


def nuts_reference(problem: Problem, seed: int = 0, quick: bool = False) -> dict:
    size = {"samples": 200, "warmup": 200, "chains": 1} if quick else {"samples": 1000, "warmup": 500, "chains": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pyro_bdl.fit(problem.model, problem.data(seed), inference="nuts", progress=False, seed=seed, **size)
    return {**flat_summary(fit.samples), "_info": fit.diagnostics.headline()}


def mode(problem: Problem, start: dict, likelihood_only: bool = False, seed: int = 0) -> dict:
    """The MAP (or, ``likelihood_only``, the MLE) by L-BFGS in the unconstrained space, from ``start``
    (site -> constrained value): site -> flat float64 array."""
    data = problem.data(seed)
    trace = poutine.trace(problem.model).get_trace(**data)
    names = latent_sites(problem.model, data)
    observed = set(observed_sites(problem.model, data))
    transforms = {n: biject_to(trace.nodes[n]["fn"].support) for n in names}
    u = {n: transforms[n].inv(torch.as_tensor(start[n], dtype=torch.float64).reshape(trace.nodes[n]["value"].shape))
         .detach().clone().requires_grad_(True) for n in names}
    data64 = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in data.items()}

    def loss():
        values = {n: transforms[n](u[n]) for n in names}
        tr = poutine.trace(poutine.condition(problem.model, values)).get_trace(**data64)
        tr.compute_log_prob()
        return -sum(site["log_prob_sum"] for name, site in tr.nodes.items()
                    if site["type"] == "sample" and (name in observed or not likelihood_only))

    opt = torch.optim.LBFGS(list(u.values()), lr=1.0, max_iter=500, tolerance_grad=1e-10, tolerance_change=1e-14,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        value = loss()
        value.backward()
        return value

    for _ in range(5):
        opt.step(closure)
    return {n: transforms[n](u[n]).detach().reshape(-1).numpy() for n in names}


# ---------------------------------------------------------------------------------------------------------------------
# the fits


def score(result, ref: dict, target: dict | None = None, optimum: dict | None = None) -> dict:
    """``err``: max over scalars of |mean - target mean| / NUTS sd (``target``: site -> flat array, default the NUTS
    means); ``conv``: the same against ``optimum`` (site -> flat array: the method's long run, the optimum its guide
    family reaches; NaN without one); ``sd_lo``, ``sd_hi``: the range of the fit's sd over the NUTS sd."""
    got = flat_summary(result.samples)
    errs, convs, ratios = [], [], []
    for name, (mean, sd) in got.items():
        ref_mean, ref_sd = ref[name]
        goal = ref_mean if target is None else target[name]
        errs.append(np.abs(mean - goal) / ref_sd)
        convs.append(np.abs(mean - optimum[name]) / ref_sd if optimum is not None else np.full_like(mean, np.nan))
        ratios.append(sd / ref_sd)
    errs, convs, ratios = np.concatenate(errs), np.concatenate(convs), np.concatenate(ratios)
    return {"err": float(errs.max()), "conv": float(convs.max()), "sd_lo": float(ratios.min()),
            "sd_hi": float(ratios.max())}


def run_fit(problem: Problem, method: str, settings: dict, seed: int = 0, data_seed: int = 0) -> tuple:
    data = problem.data(data_seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        result = pyro_bdl.fit(problem.model, data, inference=method, progress=False, seed=seed, **settings)
        seconds = time.perf_counter() - start
    messages = [str(w.message) for w in caught if issubclass(w.category, pyro_bdl.ConvergenceWarning)]
    return result, messages, seconds


#: Settings to fit with ("default": the methods' defaults for a user's program, ``Method.user_defaults``; "old": the
#: zoo's schedule, which user programs had before issue 35); the ``-300`` / ``-1000`` ones are the too-short runs.
CANDIDATES = {
    "default": {},
    "old": {"steps": 2000, "lr": 0.02, "lr_hold": 0.0},
    "hold50": {"steps": 2000, "lr": 0.02, "lr_hold": 0.5},
    "hold75": {"steps": 2000, "lr": 0.02, "lr_hold": 0.75},
    "lr05-hold50": {"steps": 2000, "lr": 0.05, "lr_hold": 0.5},
    "lr05-hold75": {"steps": 2000, "lr": 0.05, "lr_hold": 0.75},
    "lr1-hold50": {"steps": 2000, "lr": 0.1, "lr_hold": 0.5},
    "old-300": {"steps": 300, "lr": 0.02, "lr_hold": 0.0},
    "old-1000": {"steps": 1000, "lr": 0.02, "lr_hold": 0.0},
    "default-300": {"steps": 300},
    "long": {"steps": 10000},
}
SHORT = ["old-300", "old-1000", "old", "default-300"]
#: A fit has converged when its answer is within ``NEAR`` posterior sds (NUTS) of where its method converges (conv),
#: and is off at ``OFF`` or more.
NEAR, OFF = 0.5, 1.0


class Tally:
    """Fits counted by how far they are from where they converge (converged, in between, off) and whether they
    warned (and, for the off ones, whether the drift check did)."""

    def __init__(self):
        self.counts = {k: [0, 0, 0] for k in ("converged", "in between", "off")}  # fits, warned, warned by drift
        self.unmeasured = 0  # fits without an optimum to measure conv from (--quick, --no-optimum)

    def add(self, conv: float, warned: bool, moving: bool) -> None:
        if math.isnan(conv):
            self.unmeasured += 1
            return
        key = "off" if conv >= OFF else "in between" if conv >= NEAR else "converged"
        self.counts[key][0] += 1
        self.counts[key][1] += bool(warned)
        self.counts[key][2] += bool(moving)

    def line(self) -> str:
        line = "; ".join(f"{key} ({label}): {n}, warned: {w} (drift check: {m})" for (key, (n, w, m)), label in
                         zip(self.counts.items(), (f"conv < {NEAR}", f"{NEAR} to {OFF}", f"conv >= {OFF}")))
        return line + (f"; not counted (no optimum to measure conv from): {self.unmeasured}" if self.unmeasured else "")

HEADER = ("| family | model | method | settings | seed | err | conv | sd / NUTS sd | drift | running | drifting | t | "
          "pace | loss settled | warned | s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def table_row(problem: Problem, method: str, cand: str, seed: int, row: dict, result, messages, seconds) -> str:
    """One row of the table: ``result``'s drift record (``info``) and loss check (``diagnostics``) beside ``row``."""
    drift, checks = result.info, result.diagnostics
    kinds = ("moving" if checks.moving else "") + ("+loss" if checks.settled is False else "")
    sd = "" if method in ("map", "mle") else f"{row['sd_lo']:.2f}-{row['sd_hi']:.2f}"

    def part(value, at):
        return f"{value:.2f}" + (f" ({at})" if value > 0 else "")

    return (f"| {problem.family} | {problem.name} | {method} | {cand} | {seed} | {row['err']:.2f} | "
            f"{row['conv']:.2f} | {sd} | {drift.drift:.2f} ({drift.drift_at}) | "
            f"{part(drift.drift_running, drift.drift_running_at)} | "
            f"{part(drift.drift_travelling, drift.drift_travelling_at)} | {drift.drift_t:.1f} | "
            f"{drift.drift_pace:.2f} | {checks.settled} | "
            f"{kinds if messages else '-'} | "
            f"{seconds:.0f} |")


def optimum(problem: Problem, method: str, cache: dict) -> dict:
    """The answer ``method`` converges to on ``problem`` with its default guide: a run of ``LONG`` steps (5x the
    default; the rate held for half, then decaying) at the user defaults, seed 0; site -> flat means.  What a fit's
    ``conv`` is measured against: the distance from NUTS (``err``) is the guide family's own bias plus the
    optimiser's shortfall, this the shortfall alone."""
    entry = cache[problem.name].setdefault("long", {})
    if method not in entry:
        result, _, _ = run_fit(problem, method, {**CANDIDATES["long"], "samples": 4000}, 0)
        entry[method] = {n: v[0].tolist() for n, v in flat_summary(result.samples).items()}
    return {n: np.asarray(v) for n, v in entry[method].items()}


def references(problem: Problem, cache: dict, quick: bool) -> dict:
    """NUTS's mean and sd per site (flat), and the MAP and MLE by L-BFGS where they exist; kept in ``cache``."""
    if problem.name not in cache:
        ref = nuts_reference(problem, quick=quick)
        means = {n: v[0] for n, v in ref.items() if not n.startswith("_")}
        entry = {"nuts": {n: [v[0].tolist(), v[1].tolist()] for n, v in ref.items() if not n.startswith("_")},
                 "nuts_info": ref["_info"]}
        if problem.point:
            entry["map"] = {n: v.tolist() for n, v in mode(problem, means).items()}
            entry["mle"] = {n: v.tolist() for n, v in mode(problem, means, True).items()}
        cache[problem.name] = entry
    return cache[problem.name]


def rugged_table(seeds: int, fixture: str) -> int:
    """The ruggedness stand-in fitted with ``svi`` (guides normal and mvn) at the user defaults and at the old
    schedule, ``seeds`` seeds each: per site the mean over seeds of the posterior mean, its sd over seeds, the mean
    posterior sd, and the distance from NUTS (``fixture``: tests/support/fixtures/rugged_nuts.json) in NUTS sds."""
    with open(fixture) as f:
        nuts = json.load(f)["sites"]
    problem = Problem("rugged", "tune", rugged_model, lambda seed: rugged_data())  # the fixture's data (seed 35)
    print("| settings | guide | site | NUTS mean (sd) | svi mean, over seeds (sd over seeds) | svi sd | "
          "(svi - NUTS) / NUTS sd |\n|---|---|---|---|---|---|---|")
    for label, settings in (("default", {}), ("old", CANDIDATES["old"])):
        for guide in ("normal", "mvn"):
            means, sds = [], []
            for seed in range(seeds):
                result, _, _ = run_fit(problem, "svi", {**settings, "guide": guide}, seed)
                summary = flat_summary(result.samples)
                means.append({n: float(v[0][0]) for n, v in summary.items()})
                sds.append({n: float(v[1][0]) for n, v in summary.items()})
            for name, ref in nuts.items():
                m = np.array([row[name] for row in means])
                sd = float(np.mean([row[name] for row in sds]))
                print(f"| {label} | {guide} | {name} | {ref['mean']:.3f} ({ref['sd']:.3f}) | {m.mean():.3f} "
                      f"({m.std(ddof=1) if len(m) > 1 else math.nan:.3f}) | {sd:.3f} | "
                      f"{(m.mean() - ref['mean']) / ref['sd']:+.2f} |", flush=True)
    return 0


def replay(paths, visible: float, material: float, full_pace: float = DRIFT_FULL_PACE) -> int:
    """The tally of tables this script printed, as if ``DRIFT_VISIBLE``, ``DRIFT_MIN`` and ``DRIFT_FULL_PACE`` were
    ``visible``, ``material`` and ``full_pace``: a fit warns when its loss did not settle, its running move is at
    least ``visible``, its drifting move at least ``material`` or its pace at least ``full_pace`` (the drift check's
    rule, from the table's columns)."""
    tally = Tally()
    for path in paths:
        with open(path) as f:
            for line in f:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) != 16 or cells[0] in ("family", "---"):
                    continue
                conv, running, drifting = float(cells[6]), float(cells[9].split(" ")[0]), float(cells[10].split(" ")[0])
                moving = running >= visible or drifting >= material or float(cells[12]) >= full_pace
                tally.add(conv, moving or cells[13] != "True", moving)
    print(f"DRIFT_VISIBLE {visible}, DRIFT_MIN {material}, DRIFT_FULL_PACE {full_pace}: {tally.line()}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", nargs="+", default=["tune", "check"])
    parser.add_argument("--problems", nargs="+", help="only these problems (by name)")
    parser.add_argument("--methods", nargs="+", default=["svi", "svi-meanfield", "map", "mle"])
    parser.add_argument("--candidates", nargs="+", default=["default"], choices=list(CANDIDATES),
                        help="settings to fit with (default: the methods' defaults for a user's program)")
    parser.add_argument("--short", action="store_true", help=f"the too-short runs: {SHORT}, svi and map")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cache", help="a JSON file to keep the references in between runs")
    parser.add_argument("--no-optimum", action="store_true",
                        help="score against NUTS alone, without the long run (conv left empty): for a slow method")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more settings for every fit")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one small model, svi and map, 300 steps")
    parser.add_argument("--write-fixture", metavar="PATH",
                        help="write the NUTS reference of the ruggedness stand-in (tests/inference/test_svi_convergence.py's) and stop")
    parser.add_argument("--rugged", type=int, metavar="SEEDS",
                        help="the ruggedness stand-in's svi fits next to NUTS (tests/support/fixtures/rugged_nuts.json), over SEEDS "
                             "seeds, and stop")
    parser.add_argument("--replay", nargs="+", metavar="LOG", help="tally tables this script printed (see replay) and stop")
    parser.add_argument("--visible", type=float, default=DRIFT_VISIBLE, help="the DRIFT_VISIBLE to replay them with")
    parser.add_argument("--material", type=float, default=DRIFT_MIN, help="the DRIFT_MIN to replay them with")
    parser.add_argument("--full-pace", type=float, default=DRIFT_FULL_PACE, help="the DRIFT_FULL_PACE to replay them with")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay, args.visible, args.material, args.full_pace)
    if args.write_fixture:
        return write_fixture(args.write_fixture)
    if args.rugged:
        return rugged_table(args.rugged, str(Path(__file__).resolve().parents[1] / "tests" / "support" / "fixtures" / "rugged_nuts.json"))
    extra = {k: v for k, _, v in (p.partition("=") for p in args.set)}
    if args.short:
        args.candidates, args.methods = SHORT, ["svi", "map"]
    if args.quick:
        args.family, args.problems, args.methods, args.candidates = ["tune"], ["poisson"], ["svi", "map"], ["default-300"]
        extra.setdefault("samples", "100")
    problems = [p for p in PROBLEMS if p.family in args.family and (not args.problems or p.name in args.problems)]
    cache = _load_cache(args.cache)
    print(HEADER, flush=True)
    tally = Tally()
    for problem in problems:
        refs = references(problem, cache, args.quick)
        _save_cache(args.cache, cache)
        ref = {n: (np.asarray(m), np.asarray(s)) for n, (m, s) in refs["nuts"].items()}
        for method in args.methods:
            if method in ("map", "mle") and not problem.point or method == "svi-meanfield" and problem.plated:
                continue
            target = None if method not in ("map", "mle") else {n: np.asarray(v) for n, v in refs[method].items()}
            best = optimum(problem, method, cache) if target is None and not (args.quick or args.no_optimum) \
                else target
            _save_cache(args.cache, cache)
            for cand in args.candidates:
                settings = {**CANDIDATES[cand], **extra}
                if not method.startswith("svi"):
                    settings.pop("samples", None)
                for seed in args.seeds:
                    result, messages, seconds = run_fit(problem, method, settings, seed)
                    row = score(result, ref, target, best)
                    print(table_row(problem, method, cand, seed, row, result, messages, seconds), flush=True)
                    tally.add(row["conv"], bool(messages), bool(result.diagnostics.moving))
    print(f"\n{tally.line()}")
    return 0


def _load_cache(path):
    if path is None:
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _save_cache(path, cache):
    if path is not None:
        with open(path, "w") as f:
            json.dump(cache, f)


if __name__ == "__main__":
    sys.exit(main())
