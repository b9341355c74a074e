"""Every inference method against the exact posterior of every conjugate zoo model.

The matrix comes from the registry: each model with an ``exact_posterior`` (``blr`` with known noise, the
``coin``, ``last-layer``) crossed with each method that suits it (``spec.methods``).  What a method promises
on such a model is declared once, in :data:`PROMISES`; a method that suits a conjugate model but declares
nothing fails :func:`test_every_method_declares_its_promise`, and so does a conjugate model without a
problem in tests/problems.py.

Tolerances are Monte Carlo standard errors, never tuned numbers (K = 4.5 standard errors of the measured
ESS: tests/posterior_checks.py); the optimisers' own allowances are stated where they are used.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from support.posterior_checks import K, check_means, check_sds, exact_posterior_of
from support.problems import PROBLEMS
from pyro import poutine
from pyro.distributions import constraints

import pyro_bdl
from pyro_bdl.inference import METHODS, latent_sites
from pyro_bdl.registry import get_model, list_models

#: The zoo models with an exact posterior.
MODELS = [spec.name for spec in list_models() if spec.hooks.exact_posterior is not None]

#: What each method promises on a conjugate model:
#: "moments": posterior means and sds within Monte Carlo error;
#: "means": means only (mean-field VI: on a Gaussian posterior its means are exact, its sds too small);
#: "gaussian": means and sds exactly where the posterior is Gaussian (every latent unconstrained, as in these
#: linear-Gaussian models); the coin's logit-space Laplace is checked in tests/inference/test_laplace.py;
#: "mode": the posterior mode, here where it is the mean (Gaussian posteriors); the coin's mode and the
#: ridge form in tests/inference/test_point_estimates.py;
#: None: not a posterior (MLE: tests/inference/test_point_estimates.py).
PROMISES = {
    "nuts": "moments", "hmc": "moments", "metropolis": "moments", "importance": "moments",
    "svi": "moments",  # with a guide whose family holds the exact posterior: EXACT_FAMILY_GUIDE
    "svi-meanfield": "means",
    "bbvi": "means",  # score-function gradients need the default (long) run: slow
    "laplace": "gaussian",
    "map": "mode",
    "mle": None,
}
#: A guide whose family contains the exact posterior: full-rank Gaussian for blr, Beta for the coin, the
#: model's default (the principal-axes Gaussian) for last-layer.
EXACT_FAMILY_GUIDE = {"blr": "mvn", "coin": "beta", "last-layer": None}

#: Small but real run lengths (the defaults are longer).
RUNS = {
    "nuts": {"samples": 500, "warmup": 300, "chains": 2},
    "hmc": {"samples": 500, "warmup": 300, "chains": 2},
    "metropolis": {"samples": 3000, "warmup": 1500, "chains": 2},
    "importance": {"samples": 3000},
    "svi": {"steps": 2500, "samples": 4000},
    "svi-meanfield": {"steps": 2500, "samples": 4000},
    "bbvi": {"samples": 4000},
    "laplace": {"samples": 4000},
    "map": {},
}
#: The coin's Beta guide needs a larger step and a few particles (as its method_defaults say); the particles in one
#: vectorised pass (the same estimator: 27 -> 10 s a run, and the check holds).
COIN_BETA = {"steps": 3000, "lr": 0.1, "particles": 4, "samples": 4000, "vectorize": True}
#: Long enough that the optimiser's own error (about 0.1 sd of w after 2,500 steps, 0.015 sd after
#: 5,000, measured on this problem) is below the Monte Carlo error of the 4,000 draws checked.
BLR_SVI = {"steps": 5000, "samples": 4000}
RUNS_FOR = {("coin", "svi"): COIN_BETA, ("coin", "svi-meanfield"): COIN_BETA, ("blr", "svi"): BLR_SVI,
            ("blr", "svi-meanfield"): BLR_SVI, ("last-layer", "svi"): {"samples": 4000},
            # random-walk steps in 5 correlated dimensions: 2 x 3000 draws gave bulk ESS 28, 2 x 12000 gave 133 (70 s)
            ("last-layer", "metropolis"): {"samples": 12000, "warmup": 3000, "chains": 2},
            # the fast tier's instances, shorter (the tolerances follow the ESS; the blr mode is reached well
            # within 500 steps): benchmarks/RESULTS.md, "The test suite"
            ("coin", "metropolis"): {"samples": 1000, "warmup": 500, "chains": 2},
            ("blr", "laplace"): {"samples": 4000, "steps": 500}, ("blr", "map"): {"steps": 500}}
#: Samplers whose short runs may warn: R-hat's 1.01 is crossed by chance with 2 chains (benchmarks/RESULTS.md,
#: "Thresholds after the draws changed"); allowed, not required: the checks use the measured ESS.
MAY_WARN = {"nuts", "hmc", "metropolis"}
#: Pairs whose check is known to fail, and why (strict: a pass is reported, so the entry is removed then).
#: (last-layer, bbvi) was one until 2026-11-29, when it passed (XPASS, strict) with the same draws as before: the
#: environment's packages moved.
KNOWN_SHORT = {}
#: Slow methods and pairs (run with ``-m slow``).
SLOW = {"bbvi", ("last-layer", "metropolis")}
#: The fast tier checks each method on one model, the one where its check is cheapest (measured by
#: ``pytest --durations=0 -m ""``: 1-10 s each); the others run with ``-m slow``.
FAST_ON = {"nuts": "coin", "hmc": "coin", "metropolis": "coin", "importance": "coin", "svi": "coin",
           "svi-meanfield": "last-layer", "laplace": "blr", "map": "blr"}
#: The mode of a deterministic optimiser: float32 optimisation error, measured below 0.008 posterior sd.
MODE_ALLOWANCE = 0.01


@functools.cache
def gaussian_posterior(model: str) -> bool:
    """Whether the conjugate model's posterior is Gaussian: every latent site unconstrained (Normal prior,
    Normal likelihood, linear mean in these models)."""
    spec = get_model(model)
    data, options = PROBLEMS[model]()
    model, data = spec.bind(options), spec.data_kwargs(data)
    trace = poutine.trace(model).get_trace(**data)
    supports = [trace.nodes[name]["fn"].support for name in latent_sites(model, data)]
    return all(constraints.is_dependent(s) is False and getattr(s, "base_constraint", s) is constraints.real
               for s in supports)


def pairs(*promises):
    """(model, method) pairs of the registry whose method promises one of ``promises`` on that model."""
    out = []
    for model in MODELS:
        for method in get_model(model).methods:
            promise = PROMISES.get(method, "undeclared")
            if promise in ("gaussian", "mode") and not gaussian_posterior(model):
                continue
            if promise in promises:
                # slow, not yet run with the warning as an error: shown, not hidden
                marks = ([pytest.mark.slow, pytest.mark.filterwarnings("default::pyro_bdl.ConvergenceWarning")]
                         if method in SLOW or (model, method) in SLOW else
                         [] if FAST_ON.get(method) == model else [pytest.mark.slow])
                if (model, method) in KNOWN_SHORT:
                    marks.append(pytest.mark.xfail(strict=True, raises=AssertionError,
                                                   reason=KNOWN_SHORT[(model, method)]))
                out.append(pytest.param(model, method, marks=marks, id=f"{model}-{method}"))
    return out


def _fit(model, method):
    data, options = PROBLEMS[model]()
    guide = EXACT_FAMILY_GUIDE[model] if method == "svi" else None
    with warnings.catch_warnings():
        if method in MAY_WARN:
            warnings.filterwarnings("ignore", "MCMC diagnostics: r_hat", pyro_bdl.ConvergenceWarning)
        result = pyro_bdl.fit(model, data, inference=method, guide=guide, options=options, seed=0, progress=False,
                              **RUNS_FOR.get((model, method), RUNS[method]))
    return result, exact_posterior_of(result)


def test_every_method_declares_its_promise():
    """The matrix is complete: each method that suits a conjugate model says what it promises there, and
    each conjugate model has a problem and an exact-family guide."""
    assert MODELS, "no zoo model declares an exact posterior"
    for model in MODELS:
        assert model in PROBLEMS and model in EXACT_FAMILY_GUIDE, f"{model}: add a problem and an exact-family guide"
        undeclared = [m for m in get_model(model).methods if m not in PROMISES]
        assert not undeclared, f"{model}: declare in PROMISES what {undeclared} promise on an exact posterior"
    assert {"blr", "coin", "last-layer"} <= set(MODELS)
    assert gaussian_posterior("blr") and gaussian_posterior("last-layer") and not gaussian_posterior("coin")
    fast = {p.values[1]: p.values[0] for p in pairs("moments", "gaussian", "means", "mode")
            if not any(mark.name == "slow" for mark in p.marks)}
    assert fast == {m: FAST_ON[m] for m, promise in PROMISES.items() if promise and m not in SLOW}, \
        "each method with a promise is checked on one model in the fast tier: name it in FAST_ON"


@pytest.mark.parametrize("model,method", pairs("moments", "gaussian"))
def test_recovers_exact_mean_and_sd(model, method):
    result, exact = _fit(model, method)
    check_means(result, exact)
    check_sds(result, exact)


@pytest.mark.parametrize("model,method", pairs("means"))
def test_recovers_exact_mean(model, method):
    """Mean-field VI on a Gaussian posterior has the exact mean (its sd is too small: not checked)."""
    result, exact = _fit(model, method)
    check_means(result, exact)


@pytest.mark.parametrize("model,method", pairs("mode"))
def test_point_estimate_is_the_mode(model, method):
    result, exact = _fit(model, method)
    assert METHODS[method].point_estimate
    for site, (mean, sd) in exact.items():
        err = (result.posterior_mean(site).double() - mean).abs() / sd
        assert bool((err < MODE_ALLOWANCE).all()), (site, err)


@pytest.mark.slow
def test_meanfield_underestimates_correlated_sd():
    """The known failure of mean-field VI, shown rather than hidden: with correlated features the
    mean-field sd of w is below the exact sd (by more than the Monte Carlo error)."""
    data, options = PROBLEMS["blr"]()
    X = data.X.clone()
    X[:, 1] = 0.9 * X[:, 0] + 0.3 * X[:, 1]
    data.X = X
    result = pyro_bdl.fit("blr", data, inference="svi-meanfield", options=options, progress=False,
                          **RUNS["svi-meanfield"])
    est = result.posterior_sd("w").numpy()
    sd = exact_posterior_of(result)["w"][1].numpy()
    assert np.all(est < sd * (1 - K / np.sqrt(2 * 4000)))


@pytest.mark.slow
@pytest.mark.filterwarnings("default::pyro_bdl.ConvergenceWarning")  # slow, not yet run with the warning as an error: shown, not hidden
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("method", ["nuts", "metropolis", "importance"])
def test_long_runs_recover_exact_moments(model, method):
    """The default (longer) run lengths, on a second random problem."""
    data, options = PROBLEMS[model](seed=2)
    result = pyro_bdl.fit(model, data, inference=method, options=options, progress=False)
    check_means(result, exact_posterior_of(result))
    check_sds(result, exact_posterior_of(result))
