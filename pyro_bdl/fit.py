"""The one fit entry point, for zoo models and for any Pyro model."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyro
import torch

from .checkpoint import Checkpoint, fingerprint
from .data import DataError, Dataset, as_model_kwargs, load, nan_check_kwargs
from .diagnostics import importance_report, mcmc_report, svi_report
from .inference import get_method, latent_sites, observed_sites
from .inference.base import with_deterministic
from .registry import ModelSpec, get_model, takes_minibatches
from .result import FitResult

__all__ = ["fit"]


@dataclass
class _Prepared:
    """A model ready to fit: its spec (None for a user's model), the bound model and its arguments."""

    spec: ModelSpec | None
    model: Callable
    kwargs: dict
    dataset: Dataset | None = None
    options: dict = field(default_factory=dict)
    standardizer: object = None


def _prepare(model, data, target, options) -> _Prepared:
    if isinstance(model, (str, ModelSpec)):
        spec = get_model(model) if isinstance(model, str) else model
        if data is None:
            data = spec.default_data
        dataset = load(data, target) if isinstance(data, str) else data
        if not isinstance(dataset, Dataset):
            kwargs = as_model_kwargs(dataset, spec.uses_features)
            return _Prepared(spec, spec.bind(options), kwargs, None, spec.resolve_options(options))
        if dataset.y is None:
            raise DataError(f"{dataset.name}: no target column to fit on")
        if spec.check_data is not None:
            spec.check_data(dataset)
        resolved = spec.resolve_options(options)
        if spec.infer_options is not None:  # options the data decide, e.g. the number of classes
            resolved.update({k: v for k, v in spec.infer_options(dataset).items() if resolved.get(k) is None})
        standardizer = None
        if spec.standardize:
            from .datasets import Standardizer

            regression = spec.task == "regression"
            standardizer = Standardizer.fit(dataset.X, dataset.y if regression else None)
            dataset = Dataset(dataset.name, standardizer.transform_X(dataset.X),
                              standardizer.transform_y(dataset.y) if regression else dataset.y,
                              dataset.feature_names, dataset.target_name)
        kwargs = as_model_kwargs(dataset, spec.uses_features)
        return _Prepared(spec, spec.bind(resolved), kwargs, dataset, resolved, standardizer)
    if not callable(model):
        raise TypeError(f"model must be a zoo model name or a Pyro model callable, not {type(model).__name__}")
    if options:
        raise ValueError("options=... are for zoo models; bind your own model's options with functools.partial")
    if data is None:
        data = {}
    return _Prepared(None, model, as_model_kwargs(data), data if isinstance(data, Dataset) else None)


def fit(
    model: str | Callable,
    data=None,
    inference: str = "nuts",
    guide=None,
    *,
    target: str | None = None,
    options: dict | None = None,
    seed: int = 0,
    progress: bool = True,
    checkpoint: str | Path | None = None,
    **settings,
) -> FitResult:
    """Fit a model with one inference method.

    Parameters
    ----------
    model : a zoo model name (``pyro-bdl list``) or any Pyro model callable.
    data : for a zoo model, an embedded data set name, a CSV path (with ``target``) or a
        :class:`~pyro_bdl.data.Dataset` (default: the model's embedded data set); for your own
        model, a dict of the keyword arguments it is called with (observed values included).
    inference : ``svi``, ``svi-meanfield``, ``bbvi``, ``nuts``, ``hmc``, ``metropolis``,
        ``importance``, ``map`` or ``mle``.
    guide : for SVI methods: ``"normal"``, ``"mvn"``, ``"meanfield"``, a zoo model's own guide
        (e.g. ``"beta"`` for the coin), an AutoGuide class, or a guide callable; default is the
        model's or the method's own choice.
    target : the target column when ``data`` is a CSV path.
    options : zoo model options, e.g. ``{"prior_scale": 2.0}``.
    seed : random seed (torch, numpy, random).
    progress : show a progress bar.
    checkpoint : a file to save progress in (SVI, MAP, MLE: every 500 steps and on Ctrl-C;
        MCMC: after every chain).  If it holds a checkpoint of the same run, the fit resumes
        from it; it is deleted when the fit completes.
    **settings : run-length settings of the method (``steps``, ``lr``, ``particles``,
        ``samples``, ``warmup``, ``chains``, ...; see :data:`pyro_bdl.inference.METHODS`).

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
    method = get_method(inference)
    if guide is not None and not method.takes_guide:
        raise ValueError(f"inference '{inference}' takes no guide")
    prepared = _prepare(model, data, target, options)
    spec, bound, kwargs, dataset = prepared.spec, prepared.model, prepared.kwargs, prepared.dataset
    if spec is not None and inference not in spec.methods:
        raise ValueError(f"model '{spec.name}' does not support inference '{inference}'; it supports: {', '.join(spec.methods)}")
    given = {k: v for k, v in settings.items() if v is not None}
    # the model's settings for a method go with the method's default guide (given or by name)
    default_guide = spec is not None and (guide is None or guide == spec.default_guides.get(inference))
    model_defaults = spec.method_defaults.get(inference, {}) if default_guide else {}
    resolved = method.resolve_settings({**model_defaults, **given})
    _check_minibatch(resolved, bound, dataset, spec.name if spec is not None else None)
    nan_check_kwargs(kwargs)

    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    obs = observed_sites(bound, kwargs)
    if not obs:
        raise ValueError("the model has no observed sample site: pass the observations in data")
    if not latent_sites(bound, kwargs):
        raise ValueError("the model has no latent sample site to infer")

    start = time.perf_counter()
    guide_label = guide if guide is None or isinstance(guide, str) else getattr(guide, "__qualname__", type(guide).__name__)
    if spec is not None and method.takes_guide:
        guide = _model_guide(spec, inference, guide, bound)
    extra = {"guide": guide} if method.takes_guide else {}
    if spec is not None and spec.init_loc_fn is not None and method.family in ("svi", "point", "ensemble"):
        extra["init_loc_fn"] = spec.init_loc_fn
    if spec is not None:
        extra.update(spec.method_kwargs.get(inference, {}))
    saver = None
    if checkpoint is not None and method.resumable:
        saver = Checkpoint(checkpoint, fingerprint(
            model=spec.name if spec is not None else getattr(model, "__qualname__", "model"), method=inference,
            seed=seed, settings=resolved, options=prepared.options,
            guide=guide_label, **{f"data.{k}": v for k, v in kwargs.items() if isinstance(v, torch.Tensor)},
        ))
        extra["checkpoint"] = saver
    draws = method.run(bound, kwargs, progress=progress, **extra, **resolved)
    seconds = time.perf_counter() - start

    info = {
        "model": spec.name if spec is not None else getattr(model, "__name__", "model"),
        "method": inference,
        "seed": seed,
        "settings": resolved,
        "options": prepared.options,
        "wall_seconds": seconds,
        **draws.info,
    }
    if dataset is not None:
        info.update(data=dataset.name, feature_names=dataset.feature_names if spec is None or spec.uses_features else [],
                    target=dataset.target_name, rows=len(dataset))
    result = FitResult(
        model=bound, data=kwargs, method=inference, samples=with_deterministic(bound, kwargs, draws.samples),
        likelihood_sites=obs,
        sample_stats=draws.sample_stats, losses=draws.losses, info=info, guide=draws.guide, spec=spec,
        standardizer=prepared.standardizer,
    )
    _diagnose(result, method.family)
    if spec is not None and spec.report is not None:
        info.update(spec.report(result))
    if saver is not None:
        saver.clear()
    return result


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


def _model_guide(spec: ModelSpec, inference: str, guide, bound):
    """A zoo model's own guide when named (or the model's default for this method), else ``guide``."""
    if guide is None:
        guide = spec.default_guides.get(inference)
    if isinstance(guide, str) and guide in spec.guides:
        return spec.guides[guide](bound)
    return guide


def _diagnose(result: FitResult, family: str) -> None:
    """Check the fit and record the diagnostics in ``result.info`` (warnings name what is wrong)."""
    if result.losses is not None:
        losses = np.asarray(result.losses, dtype=float)
        # an ensemble is judged by its worst member
        reports = [svi_report(row, warn=False) for row in np.atleast_2d(losses)]
        worst = min(range(len(reports)), key=lambda i: (reports[i]["settled"], reports[i]["final_elbo"]))
        result.info.update(svi_report(np.atleast_2d(losses)[worst][np.isfinite(np.atleast_2d(losses)[worst])]))
    if family == "mcmc":
        result.info.update(mcmc_report(result.to_inference_data(), var_names=list(result.samples)))
    if family == "importance":
        result.info.update(importance_report(result.info["importance_ess"], result.info["importance_draws"]))
    for name, value in result.samples.items():
        if not torch.isfinite(value).all():
            warnings.warn(f"the draws of site '{name}' contain NaN or infinite values", RuntimeWarning, stacklevel=3)
