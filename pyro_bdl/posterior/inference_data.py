"""The one place that turns any fit into ArviZ InferenceData.

Groups: ``posterior`` (chains, draws), ``posterior_predictive`` (one y per draw, training
inputs), ``log_likelihood`` (pointwise, for LOO/WAIC), ``observed_data``, ``constant_data``
(the other model arguments, e.g. X), and ``sample_stats``: MCMC statistics (``diverging``,
``step_size``, ``n_steps``, ``tree_depth``, ``lp``), importance ``log_weight``, or the SVI loss
trace as ``loss`` over a ``step`` dimension.  ``posterior.attrs`` record the model, method,
seed, options and whether the posterior is a point estimate.

A site whose draws are zero at the same entries in every draw, for at least half of its entries (a pruned
network's weights: sparse variational dropout), is stored as its other entries only, over a dimension
``{site}_kept`` whose coordinate is each entry's flat index in the site's shape (``attrs["dense_shape"]``);
:func:`samples_from_inference_data` puts the zeros back.  Nothing is lost, and ArviZ summarises the kept
weights, not hundreds of thousands of zeros.
"""

from __future__ import annotations

import contextlib
import json
import logging

import numpy as np

from pyro_bdl.posterior.predictive import PredictiveDraws

__all__ = ["to_inference_data", "samples_from_inference_data", "quiet_arviz"]


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _stored(samples: dict) -> tuple[dict, dict, dict, dict]:
    """The posterior arrays ArviZ gets, their dims and coords, and the dense shape of each site stored sparse."""
    posterior, dims, coords, shapes = {}, {}, {}, {}
    for name, value in samples.items():
        array = value.detach().double().cpu().numpy()
        if array.ndim > 2 and array[0, 0].size > 1:
            flat = array.reshape(array.shape[:2] + (-1,))
            kept = np.flatnonzero((flat != 0).any(axis=(0, 1)))
            if 2 * kept.size <= flat.shape[-1]:  # zero at the same entries in every draw, at least half of them
                dim = f"{name}_kept"
                posterior[name], dims[name], coords[dim] = flat[:, :, kept], [dim], kept
                shapes[name] = list(array.shape[2:])
                continue
        posterior[name] = array
    return posterior, dims, coords, shapes


def to_inference_data(result):
    """Convert a :class:`~pyro_bdl.result.FitResult` to :class:`arviz.InferenceData`.

    A fit without posterior draws (every latent local to a row: an amortised model) has no ``posterior``,
    ``posterior_predictive`` or ``log_likelihood`` group; the attributes go on its other groups."""
    # a zoo model without global draws (its latents local to rows, inferred by its encoder) predicts through its
    # networks: its observed values only; a user's model without latent sites (pyro.param only) predicts as it is
    pred = result.training_predictive if result.samples or result.spec is None else _observed_only(result)
    posterior, dims, coords, sparse = _stored(result.samples)
    observed = [np.asarray(v) for v in pred.observed.values()]
    constant = {  # the model's other tensor arguments (features): not the observed values again
        k: v.cpu().numpy()
        for k, v in result.data.items()
        if hasattr(v, "numpy") and k not in result.likelihood_sites and v.numel() > 0
        and not any(v.shape == o.shape and np.array_equal(v.cpu().numpy(), o) for o in observed)
    }
    record = result.record
    options = record.options
    if result.spec is not None:
        options = result.spec.options_on_disk(options)
    attrs = {
        "inference": result.method,
        "model": record.model,
        "point_estimate": int(result.point_estimate),
        "seed": record.seed,
        "options": json.dumps({k: _jsonable(v) for k, v in options.items()}),
        "feature_names": json.dumps(list(record.feature_names)),
        "target": record.target or "",
        "likelihood_sites": json.dumps(list(result.likelihood_sites)),
        # ArviZ stores every draw in float64: what load_fit gives back (samples_from_inference_data)
        "draws_dtype": "float64" if any(str(v.dtype) == "torch.float64" for v in result.samples.values()) else "float32",
        "inference_library": "pyro_bdl",
        "standardizer": json.dumps(result.standardizer.to_dict()) if result.standardizer is not None else "",
    }
    import arviz as az  # here, not at the top: `import pyro_bdl` stays quick (ArviZ takes seconds)

    idata = az.from_dict(
        posterior=posterior,
        dims=dims or None,
        coords=coords or None,
        posterior_predictive={s: v[:, :, 0] for s, v in pred.draws.items()},
        log_likelihood=pred.log_likelihood or None,
        observed_data=pred.observed or None,
        constant_data=constant or None,
        sample_stats=dict(result.sample_stats) or None,
    )
    if result.losses is not None:
        losses = np.asarray(result.losses, dtype=float)
        dims = ("step",) if losses.ndim == 1 else ("member", "step")  # ensembles: one loss trace per member
        import xarray as xr  # with ArviZ, when a fit is converted

        loss = xr.Dataset({"loss": (dims, losses)})
        idata.add_groups(sample_stats=loss)
    for group in idata.groups():
        idata[group].attrs.update(attrs)
    for name, shape in sparse.items():
        idata.posterior[name].attrs["dense_shape"] = shape
    return idata


def _observed_only(result):
    """The observed values of the likelihood sites, read from one run of the model on the fit's data (a
    :class:`~pyro_bdl.posterior.predictive.PredictiveDraws` with nothing else)."""
    import torch
    from pyro import poutine


    with torch.no_grad(), result.own_params():
        trace = poutine.trace(result.model).get_trace(**result.data)
    observed = {s: trace.nodes[s]["value"].cpu().numpy() for s in result.likelihood_sites}
    return PredictiveDraws({}, {}, {}, {}, observed, {}, {})


def samples_from_inference_data(idata) -> dict:
    """The posterior group back as ``{site: tensor (chains, draws, ...)}`` (empty without one), sites stored sparse
    made whole again, in the dtype the fit drew in (its ``draws_dtype`` attribute: float64 for a fit of float64
    data; float32 where a fit directory written before it was recorded has none)."""
    import torch

    if "posterior" not in idata.groups():
        return {}
    dtype = torch.float64 if idata.posterior.attrs.get("draws_dtype") == "float64" else torch.float32
    samples = {}
    for name, da in idata.posterior.data_vars.items():
        value = torch.tensor(da.values, dtype=dtype)
        if "dense_shape" in da.attrs:
            shape = [int(v) for v in np.atleast_1d(da.attrs["dense_shape"])]
            index = torch.tensor(np.array(da[f"{name}_kept"].values, dtype=np.int64))
            whole = value.new_zeros(tuple(value.shape[:2]) + (int(np.prod(shape)),))
            whole[:, :, index] = value
            value = whole.reshape(tuple(value.shape[:2]) + tuple(shape))
        samples[name] = value
    return samples


@contextlib.contextmanager
def quiet_arviz():
    """ArviZ's log messages below errors held back (its logger, ``arviz``) and put back after: for one chain of
    independent draws (a guide's), its "Shape validation failed" before an R-hat it cannot compute is nothing a
    user can act on."""
    import arviz as az

    # ArviZ makes its logger as Logger("arviz"), not through logging.getLogger: held as az._log
    logger = getattr(az, "_log", None) or logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
