"""The one result type every inference method returns."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyro
import torch
from torch.distributions import constraints

from pyro_bdl.data.arguments import bind_arguments
from pyro_bdl.data.table import Dataset, as_model_kwargs
from pyro_bdl.data.task import Task
from pyro_bdl.inference.parallel.devices import move_to
from pyro_bdl.inference import METHODS
from pyro_bdl.inference.enumeration import discrete_draws
from pyro_bdl.inference.outputs import MethodInfo, Record, to_json
from pyro_bdl.posterior.inference_data import quiet_arviz, to_inference_data
from pyro_bdl.posterior.predictive import PredictiveDraws, check_draw_shapes, predictive_draws, summarise
from pyro_bdl.posterior.uncertainty import classification_summary

__all__ = ["FitResult", "FitRecord"]


@dataclass
class FitRecord:
    """What was fitted, how and on what: the facts that ``metrics.json``, the InferenceData's attributes, reports
    and plots read of a fit (the method's own outputs are :attr:`FitResult.info`, its checks
    :attr:`FitResult.diagnostics`).

    Attributes
    ----------
    model : the zoo model's name, or the user's callable's ``__name__``.
    seed : the random seed (-1: unknown, a fit loaded from files of another version).
    settings : every setting of the method, defaults filled in (a loaded fit: from its ``metrics.json``).
    options : the zoo model's options, defaults filled in and decided by the data (empty for a user's model).
    wall_seconds : the method's run time (a loaded fit: as its ``metrics.json`` recorded it, else None).
    data : the data set's name (None: the model was given its arguments, not a table).
    feature_names, target : the table's feature columns (empty for a model without inputs) and target column.
    rows : the table's number of rows.
    runs_on : where the fit ran: ``device``, torch's ``threads``, the launch's ``processes``.
    """

    model: str
    seed: int = -1
    settings: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    wall_seconds: float | None = None
    data: str | None = None
    feature_names: list = field(default_factory=list)
    target: str | None = None
    rows: int | None = None
    runs_on: dict = field(default_factory=dict)

    @classmethod
    def of(cls, model: str, seed: int, settings: dict, options: dict, dataset: Dataset | None = None,
           has_features: bool = True) -> FitRecord:
        """The record of a fit about to run (``wall_seconds`` is set when it ends) on ``dataset`` (or none)."""
        if dataset is None:
            return cls(model, seed, settings, options)
        return cls(model, seed, settings, options, data=dataset.name, target=dataset.target_name, rows=len(dataset),
                   feature_names=list(dataset.feature_names) if has_features else [])

    def as_dict(self, method: str) -> dict:
        """The record as ``metrics.json`` writes it: the table's entries where the fit had a table (a loaded fit:
        where its files name columns)."""
        out = {"model": self.model, "method": method, "seed": self.seed, "settings": self.settings,
               "options": self.options, "wall_seconds": self.wall_seconds}
        if self.data is not None:
            out.update(data=self.data, rows=self.rows)
        if self.data is not None or self.feature_names or self.target is not None:
            out.update(feature_names=self.feature_names, target=self.target)
        out.update(self.runs_on)
        return out


@dataclass
class FitResult:
    """A fitted model: posterior draws, statistics, and the means to predict.

    Attributes
    ----------
    model : the Pyro model with its options bound.
    data : keyword arguments the model was fitted on (for zoo models, named as its spec names them).
    method : name of the inference method.
    samples : site -> tensor (chains, draws, *site_shape); point estimates are one draw.
    sample_stats : per-draw statistics, arrays (chains, draws).
    losses : SVI loss per step, or None.
    likelihood_sites : names of the observed sites.
    info : what the method returns beside the draws, its typed record (:attr:`Method.outputs
        <pyro_bdl.inference.method.Method.outputs>`: the drift record, acceptance rate, importance ESS, the Laplace's
        log evidence, ...), or None.
    diagnostics : the method's check of the fit (:attr:`Method.diagnose <pyro_bdl.inference.method.Method.diagnose>`:
        a :class:`~pyro_bdl.inference.diagnose.LossReport`, :class:`~pyro_bdl.inference.diagnose.ChainReport` or
        :class:`~pyro_bdl.inference.diagnose.WeightsReport`), or None.
    heldout : the fit's scores on held-out rows where it was tested on them (``pyro-bdl fit --test-fraction``):
        ``{"fraction": ..., "test_ll": ..., ...}`` (:func:`~pyro_bdl.posterior.evaluation.evaluate_fit`), or None.
    warnings : warnings a workflow caught while it made the fit (active learning's rounds), as text.
    record : :class:`FitRecord`, what was fitted, how and on what (model name, seed, settings, options, the data).
    guide : the fitted guide (SVI-type methods).
    spec : the zoo :class:`~pyro_bdl.registry.ModelSpec`, or None for a user's model.
    standardizer : the transform fitted on the training data (zoo models with ``standardize``):
        ``model`` is then a :class:`~pyro_bdl.data.transforms.StandardizedModel`, so ``data``, predictions and
        the InferenceData are in the data's units, while the latent draws (weights, a noise sd) are in the
        standardised units the network works in (:attr:`standardized_data` is what it saw).
    params : the model's learned parameters (``pyro.param`` / ``pyro.module`` sites of the model, not
        of the guide), name -> constrained value, what the method's predictive needs besides the draws
        (``Draws.params``) and what its spec's ``hooks.posterior`` keeps (e.g. sparse VD's posterior factors); saved as
        ``params.pt`` and restored by ``load_fit``.
    report : what the zoo model reports of the fit (its spec's ``hooks.report``), name -> number.

    :meth:`metrics` is what ``metrics.json`` holds: all of these, flat, under their fields' names.
    """

    model: Callable
    data: dict
    method: str
    samples: dict
    likelihood_sites: list
    sample_stats: dict = field(default_factory=dict)
    losses: np.ndarray | None = None
    info: MethodInfo | None = None
    diagnostics: Record | None = None
    heldout: dict | None = None
    warnings: list = field(default_factory=list)
    record: FitRecord | None = None
    guide: Any = None
    spec: Any = None
    standardizer: Any = None
    params: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.record is None:  # a result built by hand: named after its model, as a fit names a user's model
            self.record = FitRecord(getattr(self.model, "__name__", "model"))

    @contextlib.contextmanager
    def own_params(self):
        """Run the model with the parameters it learned (``params``) in Pyro's param store, whatever
        the store holds now (another fit's); the store is restored afterwards."""
        if not self.params:
            yield
            return
        state = {"params": {k: v.detach().clone() for k, v in self.params.items()},
                 "constraints": {k: constraints.real for k in self.params}}
        with pyro.get_param_store().scope(state):
            yield

    @property
    def log_evidence(self) -> float | None:
        """The method's own estimate of ``log p(y)`` (``laplace``, ``laplace-ggn``, ``importance``: its
        ``info.EVIDENCE`` says what kind), in the units the model works in; None for a method that makes none."""
        return None if self.info is None else self.info.evidence_estimate()

    def metrics(self) -> dict:
        """What ``metrics.json`` holds, JSON-safe: the :class:`FitRecord`, the method's :attr:`info`, its
        :attr:`diagnostics`, the model's :attr:`report`, :attr:`heldout` and :attr:`warnings`, flat, each record
        under its fields' names (NaN as null; the options as the files record them)."""
        out = self.record.as_dict(self.method)
        if self.spec is not None:
            out["options"] = self.spec.options_on_disk(out["options"])
        for part in (self.info, self.diagnostics):
            if part is not None:
                out.update(part.to_metrics())
        out.update(self.report)
        if self.heldout is not None:
            out["heldout"] = self.heldout
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return to_json({**out, "point_estimate": self.point_estimate})

    @property
    def task(self) -> Task:
        """What the model predicts (a user's model: a regression on its observed sites)."""
        return self.spec.data.task if self.spec is not None else Task.REGRESSION

    @property
    def point_estimate(self) -> bool:
        """True for a method that returns one point (MAP, MLE): ``samples`` hold a single draw."""
        method = METHODS.get(self.method)
        return method.point_estimate if method is not None else self.num_draws == 1

    @property
    def predicting_model(self) -> Callable:
        """What the draws predict through: the model, or what the method declares
        (:attr:`~pyro_bdl.inference.Method.predictive_model`, e.g. ``laplace-ggn``'s linearised network), given the
        training rows where the model's predictive conditions on them (:attr:`PostFit.predictive_model`)."""
        method = METHODS.get(self.method)
        hook = method.predictive_model if method is not None else None
        model = self.model if hook is None else hook(self.model, self.params)
        own = self.spec.hooks.predictive_model if self.spec is not None else None
        return model if own is None else own(model, self.data)

    @property
    def standardized_data(self) -> dict:
        """The arguments the model saw while fitting: ``data`` standardised (or ``data`` itself)."""
        return self.model.standardize(self.data) if hasattr(self.model, "standardize") else self.data

    @property
    def num_draws(self) -> int:
        """Posterior draws per site, chains together (0 for a fit without latent sample sites)."""
        first = next(iter(self.samples.values()), None)
        return 0 if first is None else int(first.shape[0] * first.shape[1])

    def draws(self, site: str) -> torch.Tensor:
        """All draws of ``site`` with chains merged: (chains * draws, *site_shape)."""
        value = self.samples[site]
        return value.reshape((-1,) + value.shape[2:])

    def posterior_mean(self, site: str) -> torch.Tensor:
        return self.draws(site).double().mean(0)

    def posterior_sd(self, site: str) -> torch.Tensor:
        draws = self.draws(site).double()
        return draws.std(0) if draws.shape[0] > 1 else torch.full_like(draws[0], float("nan"))

    @cached_property
    def training_predictive(self) -> PredictiveDraws:
        """Predictive and pointwise log-likelihood on the training data (cached)."""
        with self.own_params():
            return predictive_draws(self.predicting_model, self.samples, self.data, self.likelihood_sites)

    def predictive(self, new_data=None) -> PredictiveDraws:
        """Predictive draws for ``new_data`` (a Dataset, a dict of model arguments, or a tensor X)."""
        if not self.likelihood_sites:
            raise ValueError("the model observes nothing (a density, no observed sample site): there is nothing to "
                             "predict; its draws are in .samples and .to_inference_data()")
        if new_data is None:
            return self.training_predictive
        data = move_to(self.model_kwargs(new_data), self.device)
        with self.own_params():
            check_draw_shapes(self.predicting_model, self.samples, data)
            return predictive_draws(self.predicting_model, self.samples, data, self.likelihood_sites)

    def infer_discrete(self, new_data=None, temperature: int = 1) -> dict:
        """The posterior of the model's discrete sites marked for enumeration, which the fit summed out
        (:mod:`pyro_bdl.inference.enumeration`; they are in no group of :meth:`to_inference_data`): for every
        posterior draw theta_s, one draw of them from p(z | theta_s, data) by Pyro's ``infer_discrete``
        (``temperature=0``: their most probable values given theta_s).  Site -> tensor (chains, draws,
        *site_shape), e.g. a mixture's assignments (chains, draws, rows); empty for a model that enumerates nothing.
        ``new_data``: the data to condition on, observations included (default: the training data)."""
        data = self.data if new_data is None else move_to(self.model_kwargs(new_data), self.device)
        with self.own_params():
            return discrete_draws(self.predicting_model, self.samples, data, temperature)

    @property
    def device(self) -> torch.device:
        """Where the fit's draws are (a fit loaded from files: the CPU); new data is moved there to predict."""
        return next((v.device for v in self.samples.values()), torch.device("cpu"))

    def model_kwargs(self, new_data) -> dict:
        """The model's arguments for predicting ``new_data``: a :class:`~pyro_bdl.data.table.Dataset` or a tensor
        of feature rows (a zoo model's features, in the data's units), or a dict of model arguments.  The
        target, if any, is left out (it is what is predicted)."""
        spec = self.spec
        if spec is None:  # a user's program: its data in any form the fit took (dict, tuple, tensor, DataFrame)
            if isinstance(new_data, Dataset):  # as fit binds one (its model_kwargs), the target left out
                new_data = {k: v for k, v in new_data.model_kwargs().items() if k != "y"}
            return bind_arguments(self.model, new_data)[1]
        if isinstance(new_data, dict):
            return as_model_kwargs(new_data)
        if not isinstance(new_data, (Dataset, torch.Tensor)):
            raise TypeError(f"new data must be a Dataset, a tensor of rows or a dict, not {type(new_data).__name__}")
        dataset = new_data if isinstance(new_data, Dataset) else Dataset("new data", new_data, None)
        kwargs = spec.data_kwargs(Dataset(dataset.name, dataset.X, None))
        if spec.data.features is not None:
            X = kwargs[spec.data.features]
            expected = self.data[spec.data.features].shape[-1]
            if X.dim() != 2 or X.shape[1] != expected:
                raise ValueError(f"new data has {X.shape[-1] if X.dim() else 0} feature columns; the fit used {expected}")
        return kwargs

    def predict(self, new_data=None, prob: float = 0.94) -> pd.DataFrame:
        """Posterior predictive summary per row: mean, sd, aleatoric_sd, epistemic_sd, lower, upper.

        ``lower``/``upper`` bound the central ``prob`` (default 94%) predictive interval.
        With several likelihood sites, columns are prefixed by the site name.

        Example
        -------
        >>> import pyro_bdl, torch
        >>> fit = pyro_bdl.fit("blr", "linear", inference="map", steps=200, progress=False)
        >>> list(fit.predict(torch.zeros(2, 3)).columns)
        ['mean', 'sd', 'aleatoric_sd', 'epistemic_sd', 'lower', 'upper']
        """
        if self.spec is not None and self.spec.hooks.predict is not None:  # the model answers itself (amortised models)
            return self.spec.hooks.predict(self, self.model_kwargs(new_data))
        pred = self.predictive(new_data)
        frames = [self._summarise(pred, site, prob) for site in self.likelihood_sites]
        if len(frames) == 1:
            return frames[0]
        return pd.concat([f.add_prefix(f"{s}_") for s, f in zip(self.likelihood_sites, frames)], axis=1)

    def _summarise(self, pred: PredictiveDraws, site: str, prob: float) -> pd.DataFrame:
        if site in pred.probs:  # classification: probabilities and the entropy split
            probs = pred.probs[site].reshape((-1,) + pred.probs[site].shape[2:])  # (S, n, C)
            summary = classification_summary(probs)
            table = pd.DataFrame(summary["prob"], columns=[f"prob_{c}" for c in range(probs.shape[-1])])
            for key in ("pred", "entropy", "expected_entropy", "mutual_info"):
                table[key] = summary[key]
            return table
        return summarise(pred, site, prob)

    def to_inference_data(self):
        """ArviZ InferenceData (see :func:`pyro_bdl.posterior.inference_data.to_inference_data`); cached."""
        if "_idata" not in self.__dict__:
            self.__dict__["_idata"] = to_inference_data(self)
        return self.__dict__["_idata"]

    def summary(self, **kwargs) -> pd.DataFrame:
        """``az.summary`` of the latent sites (for point estimates: the values only)."""
        import arviz as az

        if not self.samples:  # every latent local (an amortised model): its learned parameters, tensor by tensor
            return pd.DataFrame({name: {"size": v.numel(), "mean": float(v.double().mean()),
                                        "sd": float(v.double().std()) if v.numel() > 1 else 0.0}
                                 for name, v in self.params.items()}).T
        if self.point_estimate:  # one draw: no spread, no diagnostics, just the values
            rows = {}
            for name, value in self.samples.items():
                flat = value.reshape(-1).double()
                for j, v in enumerate(flat.tolist()):
                    rows[name if value[0, 0].dim() == 0 else f"{name}[{j}]"] = v
            return pd.DataFrame({"mean": rows})
        if next(iter(self.samples.values())).shape[0] == 1:  # one chain (a guide's independent draws): no R-hat
            with quiet_arviz():  # its "Shape validation failed" for R-hat on one chain: nothing a user can change
                return az.summary(self.to_inference_data(), **kwargs)
        return az.summary(self.to_inference_data(), **kwargs)

    def __repr__(self) -> str:
        name = self.record.model
        return f"FitResult(model={name!r}, method={self.method!r}, sites={list(self.samples)}, draws={self.num_draws})"

