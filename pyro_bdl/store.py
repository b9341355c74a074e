"""A fit on disk: write a fit directory atomically, and load it back.

A fit directory holds ``posterior.nc`` (ArviZ InferenceData, NetCDF), ``summary.csv``
(``az.summary``), ``metrics.json`` and the plots.  Files are written into a temporary
directory beside the target and moved in only when all of them are complete, so a failed
or interrupted run leaves nothing half-written.  Loading reads NetCDF and JSON only: no pickle.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import arviz as az
import numpy as np
import torch

from .arviz_io import samples_from_inference_data
from .plots import write_plots
from .registry import get_model
from .result import FitResult

__all__ = ["metrics", "write_fit", "load_fit"]

_METRIC_KEYS = (
    "model", "method", "seed", "wall_seconds", "data", "rows", "target", "options", "settings",
    "final_elbo", "settled", "steps_run", "divergences", "max_r_hat", "min_ess_bulk", "min_ess_tail",
    "mean_accept_prob", "importance_ess", "importance_draws", "proposal", "log_evidence",
    "p_next_heads", "p_next_heads_exact", "heads", "tosses", "members", "dropout_p", "tau", "heldout",
)


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def metrics(result: FitResult) -> dict:
    """The JSON-safe metrics of a fit (NaN becomes null)."""
    out = {k: result.info[k] for k in _METRIC_KEYS if k in result.info}
    out["point_estimate"] = result.point_estimate
    return _clean(out)


def write_fit(result: FitResult, out_dir: str | Path, test=None) -> list[str]:
    """Write the fit directory; returns the file names written.

    ``test``: held-out data, for the predictive-band or reliability plot.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        idata = result.to_inference_data()
        idata.to_netcdf(str(tmp / "posterior.nc"))
        summary = result.summary()
        summary.to_csv(tmp / "summary.csv")
        (tmp / "metrics.json").write_text(json.dumps(metrics(result), indent=2) + "\n")
        files = ["posterior.nc", "summary.csv", "metrics.json"] + write_plots(result, idata, tmp, test)
        out_dir.mkdir(exist_ok=True)
        for name in files:
            os.replace(tmp / name, out_dir / name)
        return files
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_fit(fit_dir: str | Path) -> FitResult:
    """Rebuild a :class:`FitResult` of a zoo model from its fit directory (``posterior.nc``)."""
    path = Path(fit_dir) / "posterior.nc"
    if not path.exists():
        raise FileNotFoundError(f"{fit_dir}: no posterior.nc here (is this the --out directory of `pyro-bdl fit`?)")
    idata = az.from_netcdf(str(path))
    attrs = idata.posterior.attrs
    if attrs.get("inference_library") != "pyro_bdl":
        raise ValueError(f"{path} was not written by pyro-bdl")
    spec = get_model(attrs["model"])
    options = json.loads(attrs["options"])
    sites = json.loads(attrs["likelihood_sites"])
    y = torch.tensor(idata.observed_data[sites[0]].values, dtype=torch.float32)
    if "constant_data" in idata.groups() and "X" in idata.constant_data:
        X = torch.tensor(idata.constant_data["X"].values, dtype=torch.float32)
    else:
        X = torch.zeros(len(y), 0)
    info = {
        "model": spec.name,
        "options": options,
        "seed": int(attrs.get("seed", -1)),
        "feature_names": json.loads(attrs["feature_names"]),
        "target": attrs.get("target") or None,
    }
    standardizer = None
    if attrs.get("standardizer"):
        from .datasets import Standardizer

        standardizer = Standardizer.from_dict(json.loads(attrs["standardizer"]))
    return FitResult(
        standardizer=standardizer,
        model=spec.bind(options), data={"X": X, "y": y}, method=attrs["inference"],
        samples=samples_from_inference_data(idata), likelihood_sites=sites, info=info, spec=spec,
    )
