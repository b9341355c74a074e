"""The one fit entry point, for zoo models and for any Pyro model.

A user's own Pyro program takes its data as its arguments, in any form a user has them
(:mod:`pyro_bdl.data.arguments`); batch dimensions it leaves outside every plate are summed as Pyro's NUTS sums
them (:mod:`pyro_bdl.inference.site_shapes`); its ``pyro.param`` sites are optimised by the optimisation-based
methods (:attr:`~pyro_bdl.inference.method.Method.learns_params`: svi, map, mle, ...), while a sampler holds them at
their initial values and says so; its discrete latents marked for enumeration are summed out by the methods that
can (:mod:`pyro_bdl.inference.enumeration`), refused by the others before anything runs.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Callable

import pyro
import torch

from pyro_bdl.data.checks import DataWarning, outside_stacklevel
from pyro_bdl.data.table import DataError, nan_check_kwargs
from pyro_bdl.data.task import Task
from pyro_bdl.inference import model_params
from pyro_bdl.inference.base import RunContext, with_deterministic
from pyro_bdl.inference.method import DEFAULT_METHOD, METHODS, processes_methods
from pyro_bdl.inference.parallel.devices import resolve_device
from pyro_bdl.inference.parallel.processes import current_group, join
from pyro_bdl.inference.parallel.threads import largest_op, resolve_threads, using_threads
from pyro_bdl.inference.prototype import Prototype, sharing
from pyro_bdl.posterior.prior_check import prior_posterior_conflict
from pyro_bdl.inference.program_errors import named_failures
from pyro_bdl.prepare import PreparedModel, prepare
from pyro_bdl.registry import ModelSpec, resolve, spec_of, takes_minibatches
from pyro_bdl.result import FitRecord, FitResult
from pyro_bdl.storage.checkpoint import Checkpoint, fingerprint

__all__ = ["fit"]


def fit(
    model: str | Callable,
    data=None,
    inference: str | None = None,
    guide=None,
    *,
    target: str | None = None,
    options: dict | None = None,
    seed: int = 0,
    progress: bool = True,
    checkpoint: str | Path | None = None,
    device: str | torch.device | None = None,
    threads: int | str = "auto",
    standardize_on=None,
    **settings,
) -> FitResult:
    """Fit a model with one inference method.

    Parameters
    ----------
    model : a zoo model name (``pyro-bdl list``) or any Pyro model callable.
    data : for a zoo model, an embedded data set name, a CSV path (with ``target``), a
        :class:`~pyro_bdl.data.table.Dataset` or a dict of its data arguments (``{"X": X, "y": y}``) (default: the
        model's embedded data set); for your own model, its arguments by name (dict, DataFrame) or position
        (tuple), NumPy, pandas or torch (:mod:`pyro_bdl.data.arguments`).
    inference : a method of :data:`pyro_bdl.METHODS` (``pyro-bdl list``: ``nuts``, ``svi``, ``map``, ...); default
        ``nuts``, or for a zoo model that NUTS does not suit, the first method that does
        (:attr:`~pyro_bdl.registry.ModelSpec.default_method`).
    guide : for SVI methods: ``"normal"``, ``"mvn"``, ``"meanfield"``, a zoo model's own guide
        (e.g. ``"beta"`` for the coin), an AutoGuide class, or a guide callable; default is the
        model's or the method's own choice.
    target : the target column when ``data`` is a CSV path.
    options : zoo model options, e.g. ``{"prior_scale": 2.0}``.
    seed : random seed (torch, numpy, random).
    progress : show a progress bar.
    checkpoint : a file to save progress in (SVI, MAP, MLE: every 500 steps and on Ctrl-C; MCMC: after every
        chain).  If it holds a checkpoint of the same run, the fit resumes from it; it is deleted when the fit ends.
    device : ``"cpu"`` (default), ``"cuda"``, ``"cuda:1"``, ``"mps"``: where the data, the parameters and the
        sampler's state live (under ``torchrun``, ``"cuda"`` is each process's own GPU).
    threads : torch's threads for the fit: ``"auto"`` (one unless the model's operations are large and cores are
        free, :mod:`pyro_bdl.inference.parallel.threads`) or a number; the count before is put back after.
    standardize_on : inputs (n', d) whose column moments standardise a zoo model's (default: the training rows').
    Under ``torchrun``, the processes share the work (:mod:`pyro_bdl.inference.parallel.processes`).
    **settings : run-length settings of the method (``steps``, ``lr``, ``particles``,
        ``samples``, ``warmup``, ``chains``, ...; see :data:`pyro_bdl.inference.METHODS`; Pyro's names too,
        ``num_samples``, ...: :data:`~pyro_bdl.inference.method.PYRO_NAMES`); ``init_loc_fn``: where optimisation starts.

    Returns
    -------
    FitResult with ``.to_inference_data()``, ``.predict(new_data)`` and ``.summary()``.

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist, pyro_bdl
    >>> def model(y=None):
    ...     mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    ...     with pyro.plate("data", 20):
    ...         pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)
    >>> y = torch.randn(20) + 3.0
    >>> result = pyro_bdl.fit(model, {"y": y}, inference="map", steps=1000, lr=0.1, progress=False)
    >>> abs(float(result.posterior_mean("mu")) - float(y.mean())) < 0.05
    True
    """
    spec = spec_of(model)
    inference = inference or (spec.default_method if spec is not None else DEFAULT_METHOD)
    init_loc_fn, plan = settings.pop("init_loc_fn", None), resolve(spec, inference, guide, settings)
    resolved = dict(plan.settings)
    device, group = _placement(plan.method, device, threads)
    pyro.clear_param_store()  # before the model's prototype trace: another fit's parameters are not this model's
    with named_failures():  # a linear-algebra failure of the program: named by site and value
        prepared = prepare(model, data, target=target, options=options, device=device, standardize_on=standardize_on)
    observed = _check_data(spec, plan.method, prepared, resolved)
    join(device)
    pyro.set_rng_seed(seed)
    record = _record(model, spec, seed, resolved, prepared)
    count = _thread_count(threads, prepared, resolved, group)
    record.runs_on = {"device": str(device), "threads": count, "processes": group.world}
    saver = _checkpoint(checkpoint, plan, record, prepared.kwargs, guide, spec or model)
    start = time.perf_counter()
    context = RunContext(prepared.run or prepared.model, prepared.kwargs, progress and group.main, saver,
                         _runner_extra(plan, spec, prepared.model, init_loc_fn))
    with using_threads(count), sharing(prepared.sites, {prepared.model, context.model}, prepared.kwargs), \
            named_failures():
        draws = plan.method.execute(context, resolved)
        record.wall_seconds = time.perf_counter() - start
        result = _result(prepared, draws, observed, plan.method.name, record)
        _diagnose(result, plan.method)
    if saver is not None and group.main:
        saver.clear()
    return result


def _record(model, spec, seed: int, resolved: dict, prepared: PreparedModel) -> FitRecord:
    name = spec.name if spec is not None else getattr(model, "__name__", "model")
    return FitRecord.of(name, seed, resolved, prepared.options, prepared.dataset,
                        has_features=spec is None or bool(spec.data.features))


def _check_data(spec, method, prepared: PreparedModel, resolved: dict) -> list[str]:
    """The data and the model checked for the method before anything runs: a supervised model's target, minibatches
    only for a model that takes them, no NaN, a model the method suits (a user's model: its traits read from its
    prototype trace) and one with observations and something to infer.  Returns the observed sites."""
    if spec is not None and spec.data.target is not None and prepared.dataset is not None and prepared.dataset.y is None:
        raise DataError(f"{prepared.dataset.name}: no target to fit on (model '{spec.name}' is supervised)")
    _check_minibatch(resolved, prepared.model, prepared.dataset, spec.name if spec is not None else None)
    if spec is not None and spec.data.check_method is not None and prepared.dataset is not None:
        spec.data.check_method(prepared.dataset, prepared.options, method, resolved)
    nan_check_kwargs(prepared.kwargs)
    _check_traits(spec, method, prepared.sites)
    return _checked_sites(prepared.sites, method)


def _runner_extra(plan, spec, bound, init_loc_fn) -> dict:
    """What the runner takes besides the data and settings (:meth:`~pyro_bdl.registry.Plan.runner_kwargs`), with the
    user's ``init_loc_fn`` (Pyro's init strategy) over the model's, for a method that starts from a point."""
    extra = plan.runner_kwargs(spec, bound)
    if init_loc_fn is None:
        return extra
    if not plan.method.takes_init:
        raise ValueError(f"init_loc_fn (where optimisation starts) is not a setting of inference '{plan.method.name}'; "
                         f"the methods that take it: {', '.join(n for n, m in METHODS.items() if m.takes_init)}")
    return {**extra, "init_loc_fn": init_loc_fn}


def _placement(method, device, threads):
    """Where the fit runs: the device (under ``torchrun``, ``cuda`` is each process's own GPU) and the launch's
    :class:`~pyro_bdl.inference.parallel.processes.ProcessGroup`; a device, thread count or launch that cannot be
    fails here, before any work."""
    device = resolve_device(device)
    group = current_group()
    _check_processes(method, group)
    if group.distributed and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", group.local_rank % torch.cuda.device_count())
    resolve_threads(threads, 0.0)
    return device, group


def _thread_count(threads, prepared: PreparedModel, resolved: dict, group) -> int:
    """``threads`` as a count: for ``"auto"``, chosen from the model's largest operation (read from its prototype
    trace) and the cores this process shares."""
    with sharing(prepared.sites, [prepared.model], prepared.kwargs):
        work = largest_op(prepared.model, prepared.kwargs, resolved.get("batch_size"))
    return resolve_threads(threads, work, processes=group.local_world)


def _check_traits(spec: ModelSpec | None, method, sites: Prototype) -> None:
    """A user's model's traits, read from its prototype trace (:attr:`~pyro_bdl.inference.prototype.Prototype.traits`:
    a discrete latent site must be marked for enumeration), checked against the method before anything runs: a
    method that refuses them (``enumerated``: it cannot sum the sites out) is an error naming the methods that can.
    A zoo model's declared traits were checked by :func:`~pyro_bdl.registry.resolve`."""
    if spec is not None:
        return
    traits = sites.traits
    refused = method.refuses & traits
    if refused:
        names = ", ".join(f"'{s}'" for s in sites.enumerated)
        suits = [name for name, m in METHODS.items() if not m.refuses & traits]
        raise ValueError(f"inference '{method.name}' cannot fit this model: it is {', '.join(sorted(refused))} "
                         f"(its discrete latent sites {names} are summed out by enumeration, which "
                         f"'{method.name}' does not do); the methods that suit it: {', '.join(suits)}")


def _check_processes(method, group) -> None:
    """A launch of several processes only for a method that shares its work among them."""
    if group.distributed and method.processes is None:
        raise ValueError(f"inference '{method.name}' does not run on several processes; those that do: "
                         f"{', '.join(processes_methods())} (the others run on one: drop --nproc / torchrun)")


def _checked_sites(sites: Prototype, method) -> list[str]:
    """The model's observed sites (none for a density, which is fitted as it is); an error for a model with nothing
    to infer (no latent sample site and no ``pyro.param`` site).  A model whose only unknowns are ``pyro.param`` sites is fitted by the methods that
    optimise them (:attr:`~pyro_bdl.inference.method.Method.learns_params`); beside latent sites, a method that
    does not optimise them holds them at their values, with a warning that says so."""
    params = sorted(sites.params)
    learners = [name for name, m in METHODS.items() if m.learns_params and m.requires <= {"continuous", "low-dimensional"}]
    if not sites.latent:
        if not params:
            raise ValueError("the model has no latent sample site and no pyro.param site: nothing to infer")
        if not method.learns_params:
            raise ValueError(f"the model has no latent sample site, only pyro.param sites ({', '.join(params)}), which "
                             f"'{method.name}' does not fit: they are fitted by optimisation ({', '.join(learners)})")
    elif params and not method.learns_params:
        warnings.warn(f"the model's pyro.param sites ({', '.join(params)}) are held at their initial values by "
                      f"'{method.name}', which samples only the sample sites; give them a prior (pyro.sample) to infer "
                      f"them, or fit with a method that optimises them ({', '.join(learners)})", UserWarning,
                      stacklevel=outside_stacklevel())
    return list(sites.observed)


def _check_prior_scale(result: FitResult) -> None:
    """A zoo regression that works in the data's units (not standardised): a warning where the posterior sits far
    out in the model's fixed priors (:func:`~pyro_bdl.posterior.prior_check.prior_posterior_conflict`): data in
    other units than the priors expect, a posterior pulled to the prior's scale that would pass unnoticed."""
    spec = result.spec
    if spec is None or spec.data.standardize or spec.data.task is not Task.REGRESSION or not result.samples:
        return
    with result.own_params():
        conflicts = prior_posterior_conflict(result.model, result.data, result.samples)
    if conflicts:
        far = "; ".join(f"{c['site']} (entry {c['index']}) = {c['posterior_mean']:.4g}, {c['z']:.0f} prior sds from "
                        f"{c['prior_median']:.3g}" for c in conflicts)
        warnings.warn(f"model '{spec.name}': the posterior sits far out in the model's fixed priors: {far}. The data "
                      f"push against a prior scale too small for their units, and the posterior is pulled towards it: "
                      f"standardise the data, or widen the prior (`pyro-bdl describe {spec.name}` lists the options)",
                      DataWarning, stacklevel=outside_stacklevel())


def _checkpoint(path, plan, record: FitRecord, kwargs: dict, guide, model) -> Checkpoint | None:
    """The checkpoint of this run (its fingerprint: model, method, seed, settings, options, guide and data), or None
    where none is asked for or the method cannot resume.  ``model``: the zoo's spec or the user's program."""
    if path is None or not plan.method.resumable:
        return None
    name = model.name if isinstance(model, ModelSpec) else getattr(model, "__qualname__", "model")
    guide_label = guide if guide is None or isinstance(guide, str) else getattr(guide, "__qualname__",
                                                                                type(guide).__name__)
    return Checkpoint(path, fingerprint(
        model=name, method=plan.method.name, seed=record.seed, settings=record.settings, options=record.options,
        guide=guide_label, **{f"data.{k}": v for k, v in kwargs.items() if isinstance(v, torch.Tensor)},
    ))


def _result(prepared: PreparedModel, draws, observed: list[str], inference: str, record: FitRecord) -> FitResult:
    """The :class:`FitResult` of a run's draws: the model's local latents left out, what the model makes of the
    draws (its ``posterior`` hook, e.g. pruning), its deterministic sites computed, its learned parameters kept."""
    spec, bound, kwargs = prepared.spec, prepared.model, prepared.kwargs
    local = set(spec.data.local_latents) if spec is not None else set()
    kept, kept_params = {k: v for k, v in draws.samples.items() if k not in local}, {}
    if spec is not None and spec.hooks.posterior is not None:
        kept, kept_params = spec.hooks.posterior(kept, draws.guide, kwargs, prepared.options)
    return FitResult(
        model=prepared.answer_model(observed), data=prepared.data if prepared.data is not None else kwargs,
        method=inference, likelihood_sites=observed, samples=with_deterministic(bound, kwargs, kept),
        sample_stats=draws.sample_stats, losses=draws.losses, info=draws.info, record=record,
        guide=draws.guide, spec=spec, standardizer=prepared.standardizer,
        params={**model_params(bound, kwargs), **draws.params, **kept_params},
    )


def _check_minibatch(resolved: dict, bound, dataset, name: str | None = None) -> None:
    """``batch_size`` only for a model that subsamples its data (has a ``batch_size`` argument, as the
    networks do); a batch at least as large as the data set is the whole data (``batch_size`` None).
    ``name``: the zoo model's name, for the error (else the callable's)."""
    size = resolved.get("batch_size")
    if size is None:
        return
    if not takes_minibatches(bound):
        name = name or getattr(bound, "__name__", None) or getattr(getattr(bound, "func", None), "__name__", "model")
        raise ValueError(f"model '{name}' does not take minibatches (it has no batch_size argument): "
                         f"leave batch_size unset")
    if dataset is not None and size >= len(dataset):
        resolved["batch_size"] = None


def _diagnose(result: FitResult, method) -> None:
    """Check the fit: the method judges its own (:attr:`~pyro_bdl.inference.method.Method.diagnose`, whose report
    becomes ``result.diagnostics``; warnings name what is wrong), the zoo model reports of itself, and the draws
    and the prior's scale are checked whatever the method."""
    result.diagnostics = method.diagnose(result)
    if result.spec is not None and result.spec.hooks.report is not None:  # what the model reports of itself
        result.report = result.spec.hooks.report(result)
    _check_prior_scale(result)
    for name, value in result.samples.items():
        if not torch.isfinite(value).all():
            warnings.warn(f"the draws of site '{name}' contain NaN or infinite values", RuntimeWarning,
                          stacklevel=outside_stacklevel())
