r"""Simulation-based calibration (SBC): does an inference method return the right posteriors for a model?

Talts, Betancourt, Simpson, Vehtari & Gelman (2018), "Validating Bayesian inference algorithms with simulation-based
calibration".  Draw parameters from the prior and data from the model given them,

.. math::

    \tilde\theta \sim p(\theta), \qquad \tilde y \sim p(y \mid \tilde\theta),

fit the model to :math:`\tilde y`, and take :math:`L` (near-)independent posterior draws
:math:`\theta_1, \dots, \theta_L \sim q(\theta \mid \tilde y)`.  For each scalar entry :math:`f(\theta)` of each
latent site, the rank of the prior draw among the posterior draws,

.. math::

    r = \#\{\, l : f(\theta_l) < f(\tilde\theta) \,\} \in \{0, \dots, L\},

is uniform on :math:`\{0, \dots, L\}` when :math:`q` is the exact posterior: :math:`\tilde\theta` and the
:math:`\theta_l` are then :math:`L + 1` exchangeable draws of the joint :math:`p(\theta \mid \tilde y)\,p(\tilde y)`,
so the prior draw is equally likely to sit in any of the :math:`L + 1` places (ties are broken at random).
Replicated :math:`n` times, a departure from uniformity has a shape that says what is wrong: ranks piled at both
ends, a posterior too narrow (over-confident); piled in the middle, too wide (under-confident); leaning to one side,
biased (ranks high: the prior draw sits above the posterior, which is too low).

MCMC draws are autocorrelated, which alone makes the ranks non-uniform: they are thinned to about their bulk ESS
(the least over the entries) before :math:`L` are taken, evenly spaced; a fit whose ESS cannot give :math:`L` draws is
run again, longer, once.  Independent draws (``svi``, ``laplace``, ``importance``) are taken as they are.

Uniformity is checked per entry (:mod:`pyro_bdl.posterior.rank_uniformity`) in two ways: the ECDF of the fractional
ranks against a simultaneous band (Säilynoja, Bürkner & Vehtari 2022, "Graphical test for discrete uniformity and
its applications in goodness-of-fit evaluation and multiple sample comparison"): at :math:`z_i = i / (L + 1)` the
count :math:`n F_n(z_i)` of ranks below :math:`i` is :math:`\mathrm{Binomial}(n, z_i)` under uniformity, and the
band is the set of per-point central binomial intervals at the level :math:`\gamma` at which the whole ECDF stays
inside with probability :math:`1 - \alpha` (:math:`\gamma` found by simulating uniform ranks, with a fixed seed);
and Pearson's chi-square test of the ranks in bins. The check fails where the ECDF leaves the band.

Replication :math:`i` draws everything from seed ``seed + i``, so the ranks do not depend on ``workers`` (processes
that run replications side by side) nor on a resume from ``checkpoint`` (finished replications, kept in a run log:
:mod:`pyro_bdl.storage.run_log`).

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(y=None):
...     mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
...     with pyro.plate("data", 5):
...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> result = sbc(model, {"y": None}, "nuts", n=3, draws=9, samples=150, warmup=100, progress=False)
>>> result.ranks.shape, result.max_rank
((3, 1), 9)
>>> bool(result.ranks["mu"].between(0, 9).all())
True
>>> list(result.table().columns)
['site', 'chi2_p', 'ecdf_p', 'in_band', 'shape', 'mean_rank', 'spread']
"""

from __future__ import annotations

import functools
import inspect
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyro
import torch
from pyro import poutine
from pyro.poutine.uncondition_messenger import UnconditionMessenger
from pyro.poutine.util import site_is_subsample
from tqdm.auto import tqdm

from pyro_bdl.fit import fit
from pyro_bdl.inference.base import ConvergenceWarning
from pyro_bdl.inference.pyro_internals import is_deterministic
from pyro_bdl.inference.method import pyro_names_as_ours
from pyro_bdl.inference.parallel.pool import run_jobs
from pyro_bdl.posterior.rank_uniformity import ecdf_band, rank_of, uniformity
from pyro_bdl.prepare import prepare
from pyro_bdl.registry import ModelSpec, resolve, spec_of
from pyro_bdl.storage.checkpoint import fingerprint
from pyro_bdl.storage.run_log import RunLog
from pyro_bdl.workflows.sbc_result import SBCResult

__all__ = ["sbc", "SBCResult", "ecdf_band", "uniformity", "rank_of", "DEFAULT_DRAWS"]

#: Posterior draws per replication when ``draws`` is not given: ranks 0..99, 100 values (equal bins of 5, 10, 20).
DEFAULT_DRAWS = 99
#: The fit's keyword arguments that ``sbc`` passes on beside the method's settings.
_FIT_KEYWORDS = ("guide", "threads", "device", "init_loc_fn")
#: How many times longer a refit runs at most, where the ESS of a first fit cannot give ``draws`` draws.
_MAX_LENGTHEN = 10


@dataclass
class _Problem:
    """What a replication needs (sent to the worker processes by fork, not pickled).

    ``model``: the program called with keywords ``kwargs``; ``observed``: its observed sites (replaced by
    simulated ones); ``latent``: the sites ranked; ``spec``: the zoo model (fitted by name, its data passed as its
    arguments, ``target`` taking the simulated observations) or None (the program fitted conditioned on them)."""

    model: Callable
    kwargs: dict
    observed: list[str]
    latent: list[str]
    spec: ModelSpec | None
    inference: str
    draws: int
    mcmc: bool
    samples: int | None
    settings: dict
    fit_kwargs: dict
    options: dict | None
    seed: int


# ------------------------------------------------------------------------------------------------ the model's sites


def _sites(trace) -> tuple[list[str], list[str]]:
    """``(observed, latent)`` sample sites of a trace: ``pyro.deterministic`` and reparameterised sites, plates'
    subsample sites left out.  A ``pyro.factor`` term is refused: its density is not a program SBC can draw from."""
    observed, latent = [], []
    for name, site in trace.nodes.items():
        if site["type"] != "sample" or site_is_subsample(site) or is_deterministic(site):
            continue
        if site["infer"].get("is_auxiliary"):
            raise ValueError(f"site '{name}' is a pyro.factor term (or another auxiliary site): its model is not a "
                             f"program that simulates its data, so SBC cannot draw from its prior")
        (observed if site["is_observed"] else latent).append(name)
    return observed, latent


class _Simulate(UnconditionMessenger):
    """``pyro.poutine.uncondition`` that leaves ``pyro.deterministic`` (and reparameterised) sites alone: their value
    is computed, and drawn from their ``Delta`` it would take the plate's shape twice over (a deterministic site in a
    plate: event shape and batch shape both the plate's)."""

    def _pyro_sample(self, msg) -> None:
        if not is_deterministic(msg):
            super()._pyro_sample(msg)


def _simulating(model: Callable) -> Callable:
    """The program drawing every observed site from the model as well: the prior predictive."""
    return _Simulate()(model)


def _trace(model: Callable, kwargs: dict):
    with torch.no_grad(), pyro.get_param_store().scope():
        return poutine.trace(model).get_trace(**kwargs)


def _missing_observations(model: Callable, kwargs: dict) -> list[str]:
    """The arguments that carry no value (given as None, or left at a None default): where a program's
    observations go when it is asked to simulate them."""
    try:
        parameters = inspect.signature(model).parameters.values()
    except (TypeError, ValueError):
        parameters = []
    names = [name for name, value in kwargs.items() if value is None]
    return names + [p.name for p in parameters if p.name not in kwargs and p.default is None
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _observed_by_arguments(model: Callable, kwargs: dict, trace, latent: list[str]) -> dict[str, str]:
    """For observations passed as None: ``{argument: site}``, the site each None argument observes, found by passing
    each candidate site's simulated value as the argument and seeing that site become observed at that value."""
    found = {}
    for argument in _missing_observations(model, kwargs):
        for name in latent:
            if name in found.values():
                continue
            value = trace.nodes[name]["value"]
            try:
                site = _trace(model, {**kwargs, argument: value}).nodes.get(name)
            except Exception:  # noqa: BLE001 (a value the argument cannot take: not this site)
                continue
            if site is not None and site["is_observed"] and torch.equal(site["value"], value):
                found[argument] = name
                break
    return found


def _zoo_arguments(spec: ModelSpec, data, options) -> tuple[Callable, dict]:
    """A zoo model bound to its options and its data arguments; models whose fit does not see the data as the
    model's program does are refused (their ranks would be wrong)."""
    if spec.data.standardize:
        raise ValueError(f"model '{spec.name}' is fitted to standardised data (its inputs and targets rescaled by the "
                         f"data's statistics), so its posterior is not over the parameters its prior draws: SBC of it "
                         f"is not supported; write it as a Pyro program of the data's units to check it")
    if spec.data.local_latents or spec.hooks.posterior is not None:
        raise ValueError(f"model '{spec.name}' keeps other draws than its latent sites' posterior (local latents "
                         f"summarised, or draws pruned after the fit): SBC of it is not supported")
    prepared = prepare(spec, data, options=options)
    return prepared.model, prepared.kwargs


def _problem(model, data, inference: str, draws: int, options, settings: dict, seed: int) -> _Problem:
    """Everything a replication needs, checked before anything runs: the method and its settings, the model's
    observed and latent sites, and a prior that can be drawn from."""
    spec = spec_of(model)
    fit_kwargs = {k: settings.pop(k) for k in _FIT_KEYWORDS if k in settings}
    fit_kwargs.setdefault("threads", 1)  # a replication's fit is small; one thread keeps the ranks reproducible
    plan = resolve(spec, inference, fit_kwargs.get("guide"), settings)
    if plan.method.family.independent_draws and "samples" in plan.settings and settings.get("samples") is None:
        settings["samples"] = draws  # a guide's draws are independent: L of them are all the ranks need
    if plan.method.point_estimate:
        raise ValueError(f"inference '{inference}' gives a point estimate, not posterior draws: SBC has nothing to "
                         f"rank")
    if spec is not None:
        bound, kwargs = _zoo_arguments(spec, data, options)
    else:
        prepared = prepare(model, data, options=options)
        bound, kwargs = prepared.model, prepared.kwargs
    try:
        trace = _trace(_simulating(bound), kwargs)
    except NotImplementedError as error:
        raise ValueError(f"the model's prior cannot be sampled ({error}): SBC draws its parameters from the "
                         f"prior") from None
    observed, latent = _sites(_trace(bound, kwargs))
    latent = [name for name in latent if name not in observed]
    by_argument = _observed_by_arguments(bound, kwargs, trace, latent)
    observed += list(by_argument.values())
    latent = [name for name in latent if name not in observed]
    if not latent:
        raise ValueError("the model has no latent sample site: SBC has no parameter to rank")
    if not observed:
        raise ValueError("the model has no observed sample site with these data: pass its observations in data (any "
                         "values of the right shape: SBC replaces them by simulated ones), or give the argument that "
                         "takes them as None")
    if spec is not None:
        _check_zoo_target(spec, observed, by_argument, kwargs)
    samples = plan.settings.get("samples")
    return _Problem(bound, kwargs, observed, latent, spec, inference, draws, plan.method.family.correlated_draws,
                    samples, settings, fit_kwargs, options, seed)


def _check_zoo_target(spec: ModelSpec, observed: list[str], by_argument: dict, kwargs: dict) -> None:
    """A zoo model is fitted with the simulated observations as its target argument: it must observe one site,
    the one its target argument feeds."""
    if spec.data.target is None or len(observed) != 1:
        raise ValueError(f"model '{spec.name}' observes {len(observed)} sites ({', '.join(observed)}); SBC of a zoo "
                         f"model needs one, its target argument")
    if kwargs.get(spec.data.target) is None and by_argument.get(spec.data.target) != observed[0]:
        raise ValueError(f"model '{spec.name}': its target argument '{spec.data.target}' feeds no observed site")


# ------------------------------------------------------------------------------------------------- a replication


def _seeds(seed: int) -> tuple[int, int, int]:
    """The simulation's, the fit's and the tie-breaking's seeds of the replication with seed ``seed``: three
    independent streams (a fit that started from the prior draw's own random numbers would start at the truth)."""
    sim, fit_seed, ties = np.random.SeedSequence(seed).generate_state(3)
    return int(sim), int(fit_seed), int(ties)


def _simulate(problem: _Problem, seed: int) -> tuple[dict, dict]:
    """``(truth, observations)``: the latent sites' prior draw and the observed sites' simulated values."""
    pyro.set_rng_seed(seed)
    trace = _trace(_simulating(problem.model), problem.kwargs)
    truth = {name: trace.nodes[name]["value"].detach() for name in problem.latent}
    return truth, {name: trace.nodes[name]["value"].detach() for name in problem.observed}


def _fit(problem: _Problem, observations: dict, seed: int, samples: int | None):
    """The fit of the model to the simulated observations (warnings recorded, not shown): a zoo model by name, its
    target argument the observations; a program conditioned on them."""
    settings = dict(problem.settings) if samples is None else {**problem.settings, "samples": samples}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if problem.spec is not None:
            data = {k: v for k, v in problem.kwargs.items() if k == problem.spec.data.features}
            data[problem.spec.data.target] = next(iter(observations.values()))
            result = fit(problem.spec.name, data, problem.inference, options=problem.options, seed=seed,
                         progress=False, **problem.fit_kwargs, **settings)
        else:
            conditioned = pyro.condition(problem.model, data=observations)
            result = fit(conditioned, problem.kwargs, problem.inference, seed=seed, progress=False,
                         **problem.fit_kwargs, **settings)
    return result, [(w.category.__name__, str(w.message).splitlines()[0][:200]) for w in caught]


def _entries(truth: dict) -> list[str]:
    """The names of the scalar entries of the latent sites: ``site``, ``site[i]``, ``site[i,j]``."""
    names = []
    for site, value in truth.items():
        names += [site] if value.dim() == 0 else [f"{site}[{','.join(map(str, i))}]" for i in np.ndindex(*value.shape)]
    return names


def _draws(result, problem: _Problem, truth: dict) -> np.ndarray:
    """The fit's draws of the ranked sites, (chains, draws, entries) float64, checked against the prior draw."""
    columns = []
    for site, value in truth.items():
        if site not in result.samples:
            raise ValueError(f"the fit of '{problem.inference}' keeps no draws of latent site '{site}': SBC cannot "
                             f"rank it")
        draws = result.samples[site]
        if tuple(draws.shape[2:]) != tuple(value.shape):
            raise ValueError(f"site '{site}': the fit's draws have shape {tuple(draws.shape[2:])}, its prior draw "
                             f"{tuple(value.shape)}")
        columns.append(draws.detach().reshape(draws.shape[0], draws.shape[1], -1).cpu().double().numpy())
    return np.concatenate(columns, axis=2)


def _thinned(draws: np.ndarray, mcmc: bool) -> tuple[np.ndarray, float, int]:
    """``(draws (M, entries), least bulk ESS, stride)``: MCMC chains thinned to about their least bulk ESS over the
    entries (stride ceil(draws / ESS) in each chain); independent draws as they are (ESS nan, stride 1)."""
    if not mcmc:
        return draws.reshape(-1, draws.shape[2]), float("nan"), 1
    import arviz as az

    ess = np.asarray(az.ess(az.convert_to_dataset({"x": draws}), method="bulk")["x"])
    least = float(np.nanmin(ess)) if np.isfinite(ess).any() else 1.0
    stride = max(1, math.ceil(draws.shape[0] * draws.shape[1] / max(least, 1.0)))
    return draws[:, ::stride].reshape(-1, draws.shape[2]), least, stride


def _replicate(problem: _Problem, i: int) -> dict:
    """Replication ``i``: draw from the prior (seed ``seed + i``), fit, thin, rank.  A JSON-safe record: the ranks
    by entry and what the fit reported."""
    sim, fit_seed, ties = _seeds(problem.seed + i)
    truth, observations = _simulate(problem, sim)
    result, caught = _fit(problem, observations, fit_seed, None)
    draws = _draws(result, problem, truth)
    kept, ess, stride = _thinned(draws, problem.mcmc)
    refit = short = False
    if len(kept) < problem.draws and problem.mcmc and problem.samples:  # once more, long enough for the ESS seen
        longer = min(_MAX_LENGTHEN * problem.samples,
                     math.ceil(1.5 * problem.samples * problem.draws / max(len(kept), 1)))
        result, caught = _fit(problem, observations, fit_seed, longer)
        draws = _draws(result, problem, truth)
        kept, ess, stride = _thinned(draws, problem.mcmc)
        refit = True
    if len(kept) < problem.draws:  # not enough even so: every draw, spread evenly below (flagged short)
        if not problem.mcmc or draws.shape[0] * draws.shape[1] < problem.draws:
            raise ValueError(f"the fit of '{problem.inference}' gives {draws.shape[0] * draws.shape[1]} draws, fewer "
                             f"than draws={problem.draws}: raise its samples setting, or lower draws")
        kept, short = draws.reshape(-1, draws.shape[2]), True
    pick = np.linspace(0, len(kept) - 1, problem.draws).round().astype(int)
    flat = np.concatenate([v.reshape(-1).cpu().double().numpy() for v in truth.values()])
    ranks = rank_of(flat, kept[pick], np.random.default_rng(ties))
    return {"replication": i, "ranks": dict(zip(_entries(truth), map(int, ranks))),
            "fit": {"seed": problem.seed + i, "fit_draws": int(draws.shape[0] * draws.shape[1]),
                    "ess_bulk": None if math.isnan(ess) else round(ess, 1), "stride": stride,
                    "divergences": int(getattr(result.diagnostics, "divergences", 0) or 0), "refit": refit, "short": short,
                    "warnings": "; ".join(dict.fromkeys(f"{c}: {m}" for c, m in caught))}}


# --------------------------------------------------------------------------------- running, keeping, resuming

def _run(problem: _Problem, todo: list[int], workers: int, progress: bool, log: RunLog) -> None:
    """Run the replications ``todo``, here or in ``workers`` processes
    (:func:`~pyro_bdl.inference.parallel.pool.run_jobs`: forked, so a notebook's model needs no pickling), keeping
    each record in ``log`` as it finishes."""
    with tqdm(total=len(todo), desc="sbc", disable=not progress) as bar:
        for record in run_jobs(functools.partial(_replicate, problem), todo, workers):
            log.keep(record)
            bar.update()


def _label(value) -> object:
    """A JSON-safe stand-in for a setting (a guide class or function by its name: no address)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return getattr(value, "__qualname__", type(value).__name__)


def _fingerprint(problem: _Problem, name: str) -> str:
    """What identifies a run's replications: model, data, method, settings, options, seed and draws (not ``n``:
    a run resumed with a larger ``n`` keeps the replications it shares with the first)."""
    data = {f"data.{k}": v if isinstance(v, torch.Tensor) else _label(v) for k, v in problem.kwargs.items()}
    return fingerprint(model=name, method=problem.inference, seed=problem.seed, draws=problem.draws,
                       settings={k: _label(v) for k, v in problem.settings.items()},
                       fit={k: _label(v) for k, v in problem.fit_kwargs.items()}, options=problem.options, **data)


def _warn_fits(fits: pd.DataFrame, draws: int) -> None:
    """A warning where fits' ESS could not give ``draws`` near-independent draws even run longer: autocorrelated
    draws alone make ranks non-uniform, whatever the method.  The fits' own warnings (a short run's ESS or R-hat,
    divergences, an optimisation not settled) are not repeated: SBC's verdict is on what they did; they are listed
    in ``result.fits`` and counted in ``result.summary()``."""
    if fits["short"].any():
        warnings.warn(f"SBC: {int(fits['short'].sum())} of {len(fits)} fits had a bulk ESS below draws={draws} even "
                      f"run longer: their draws are autocorrelated, which alone makes ranks non-uniform; lower draws "
                      f"or raise samples (see result.fits)", ConvergenceWarning, stacklevel=3)


# ---------------------------------------------------------------------------------------------------- the face


def sbc(model, data=None, inference: str = "nuts", n: int = 100, *, draws: int | None = None,
        options: dict | None = None, seed: int = 0, workers: int = 1, progress: bool = True,
        checkpoint: str | Path | None = None, **settings) -> SBCResult:
    """Simulation-based calibration of ``inference`` on ``model`` (the module's docstring has the math).

    For each of ``n`` replications: draw the latent sites from the prior and the observations from the model
    (``pyro.poutine.uncondition``), fit the model to the simulated observations, thin the draws to near-independent
    ones and record the rank of each scalar entry of each latent site's prior draw among ``draws`` posterior draws.
    ``pyro.deterministic`` sites are not ranked (they are functions of the ranked ones).

    Parameters
    ----------
    model : a zoo model name (``pyro-bdl list``; those fitted to standardised data, or keeping other draws than
        their latents' posterior, are refused) or any Pyro program whose prior can be sampled.
    data : the model's arguments, as :func:`~pyro_bdl.fit.fit` takes them (covariates such as ``X``, sizes); its
        observations may be given (their values are replaced by simulated ones) or None; a zoo model's default:
        its embedded data set.
    inference : a method of :data:`pyro_bdl.METHODS` that gives posterior draws (not ``map``/``mle``).
    n : replications.
    draws : L, posterior draws per replication (ranks 0..L); default :data:`DEFAULT_DRAWS` (99).  MCMC draws are
        thinned to about their bulk ESS first; a fit whose ESS falls short is run again, longer, once.  A guide's
        draws (``svi``, ``laplace``, ...) are independent: their ``samples`` setting defaults to ``draws``.
    options : zoo model options.
    seed : replication ``i`` draws everything from ``seed + i``: the ranks do not depend on ``workers``.
    workers : processes that run replications side by side (forked: a notebook's model needs no pickling; one
        torch thread each).
    progress : a progress bar over the replications.
    checkpoint : a run log (:mod:`pyro_bdl.storage.run_log`) that keeps each finished replication; a run given the same file resumes
        without recomputing them (a file of another run is refused; it is kept when the run ends).
    **settings : the method's settings (``samples``, ``warmup``, ``chains``, ``steps``, ...), and ``guide``,
        ``threads``, ``device``, ``init_loc_fn`` as :func:`~pyro_bdl.fit.fit` takes them.

    Returns
    -------
    SBCResult with ``.ranks`` ((n, entries) ints), ``.max_rank`` (L), ``.table()`` (per entry: p-values, in the
    band or not, the shape of a failure), ``.summary()``, ``.plot()`` (ECDF differences with their bands) and
    ``.fits`` (per replication: ESS, thinning, divergences, warnings).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (replications) must be a whole number >= 1, got {n!r}")
    draws = DEFAULT_DRAWS if draws is None else draws
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws (posterior draws per replication) must be a whole number >= 1, got {draws!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    problem = _problem(model, data, inference, draws, options, pyro_names_as_ours(settings), seed)
    name = problem.spec.name if problem.spec is not None else getattr(model, "__qualname__", type(model).__name__)
    key = _fingerprint(problem, name)
    log = RunLog(checkpoint, "sbc", key)
    kept = {int(r["replication"]) for r in log.records}
    start = time.perf_counter()
    _run(problem, [i for i in range(n) if i not in kept], workers, progress, log)
    seconds = time.perf_counter() - start
    done = {int(r["replication"]): r for r in log.records}
    records = [done[i] for i in range(n)]
    index = pd.Index(range(n), name="replication")
    ranks = pd.DataFrame([r["ranks"] for r in records], index=index)
    fits = pd.DataFrame([r["fit"] for r in records], index=index)
    _warn_fits(fits, draws)
    return SBCResult(ranks, draws, name, inference, fits, seconds)
