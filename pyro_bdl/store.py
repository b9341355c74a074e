"""A fit on disk: write a fit directory atomically, and load it back.

A fit directory holds ``posterior.nc`` (ArviZ InferenceData, NetCDF), ``summary.csv``
(``az.summary``), ``metrics.json``, the plots and, for a model with learned parameters (``pyro.param``
or ``pyro.module`` sites: networks, amortised guides' encoders, feature maps), ``params.pt``.  Files are written into a temporary
directory beside the target and moved in only when all of them are complete, so a failed
or interrupted run leaves nothing half-written.  Loading reads NetCDF, JSON and tensors (``weights_only=True``) only: no pickle.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from pyro_bdl.data.transforms import StandardizedModel, Standardizer
from pyro_bdl.posterior.inference_data import samples_from_inference_data
from pyro_bdl.registry import get_model
from pyro_bdl.result import FitRecord, FitResult
from pyro_bdl.storage.paths import FitDirectoryError

__all__ = ["metrics", "write_fit", "load_fit", "PARAMS"]

#: The model's learned parameters (networks, feature maps) in a fit directory: a dict of tensors, read
#: back with ``torch.load(..., weights_only=True)``.
PARAMS = "params.pt"

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
    """The fit's :class:`~pyro_bdl.result.FitRecord` and every entry of its ``info``, JSON-safe (NaN becomes null,
    other objects their repr; options as the files record them:
    :meth:`~pyro_bdl.registry.ModelSpec.options_on_disk`)."""
    record = result.record.as_dict(result.method)
    if result.spec is not None:
        record["options"] = result.spec.options_on_disk(record["options"])
    return _clean({**record, **result.info, "point_estimate": result.point_estimate})


def _recorded(written: dict) -> dict:
    """What ``metrics.json`` recorded of the run that the NetCDF attributes do not hold (settings, run time, data
    set, rows), where it is there and of the right type (it is not needed to predict)."""
    kinds = {"settings": dict, "wall_seconds": (int, float), "data": str, "rows": int}
    return {k: written[k] for k, kind in kinds.items() if isinstance(written.get(k), kind)}


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
        files = ["posterior.nc", "summary.csv", "metrics.json"]
        if result.params:  # learned parameters of the model (networks, feature maps): tensors only
            torch.save({k: v.detach().cpu() for k, v in result.params.items()}, tmp / PARAMS)
            files.append(PARAMS)
        from pyro_bdl.posterior.plots import write_plots  # matplotlib and ArviZ load when a fit is written

        files += write_plots(result, idata, tmp, test)
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
        raise FitDirectoryError(f"{fit_dir}: no posterior.nc here (is this the --out directory of `pyro-bdl fit`?)")
    try:  # any failure to read a file of the directory is an error naming the file (FitDirectoryError)
        import arviz as az  # loads when a fit is read, not with the package

        idata = az.from_netcdf(str(path))
        attrs = next((idata[g].attrs for g in idata.groups() if "inference_library" in idata[g].attrs), {})
    except Exception as exc:  # h5py / netCDF4 / xarray raise OSError, ValueError, KeyError, ... for a damaged file
        raise FitDirectoryError(f"{path}: not a readable NetCDF file ({type(exc).__name__}: {exc})") from None
    if attrs.get("inference_library") != "pyro_bdl":
        raise FitDirectoryError(f"{path} was not written by pyro-bdl")
    try:
        spec = get_model(attrs["model"])
        options = json.loads(attrs["options"])
        sites = json.loads(attrs["likelihood_sites"])
        feature_names = json.loads(attrs["feature_names"])
        seed = int(attrs.get("seed", -1))
        if not (isinstance(options, dict) and isinstance(sites, list) and sites and isinstance(feature_names, list)):
            raise ValueError("options, likelihood_sites or feature_names has the wrong type")
        data = {}
        if "constant_data" in idata.groups():
            data = {k: torch.tensor(v.values, dtype=torch.float32) for k, v in idata.constant_data.data_vars.items()}
        observed = torch.tensor(idata.observed_data[sites[0]].values, dtype=torch.float32)
        samples = samples_from_inference_data(idata)
    except Exception as exc:
        raise FitDirectoryError(f"{path}: damaged or edited ({type(exc).__name__}: {exc})") from None
    if spec.data.target is not None:
        data[spec.data.target] = observed
    elif spec.data.features is not None and spec.data.features not in data:  # the observed site is the data (x of a VAE)
        data[spec.data.features] = observed
    if spec.data.size is not None:
        data[spec.data.size] = len(observed)
    metrics_path, written = Path(fit_dir) / "metrics.json", {}
    if metrics_path.exists():  # not needed to predict, but a damaged one means a damaged directory
        try:
            written = json.loads(metrics_path.read_text())
            if not isinstance(written, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError, OSError) as exc:
            raise FitDirectoryError(f"{metrics_path}: not a readable JSON object ({exc})") from None
    params = {}
    if (Path(fit_dir) / PARAMS).exists():
        try:
            params = torch.load(Path(fit_dir) / PARAMS, weights_only=True, map_location="cpu")
            if not (isinstance(params, dict) and all(isinstance(v, torch.Tensor) for v in params.values())):
                raise ValueError("not a dict of tensors")
        except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a damaged file
            raise FitDirectoryError(f"{Path(fit_dir) / PARAMS}: not a readable parameter file "
                                    f"({type(exc).__name__}: {exc})") from None
    record = FitRecord(spec.name, seed, options=options, feature_names=feature_names, target=attrs.get("target") or None,
                       **_recorded(written))
    try:
        model, standardizer, method = spec.bind(options), None, str(attrs["inference"])
        if attrs.get("standardizer"):
            standardizer = Standardizer.from_dict(json.loads(attrs["standardizer"]))
            model = StandardizedModel(model, standardizer, spec.data.features, spec.data.target, sites)
    except Exception as exc:
        raise FitDirectoryError(f"{path}: damaged or edited ({type(exc).__name__}: {exc})") from None
    return FitResult(
        standardizer=standardizer,
        model=model, data=data, method=method,
        samples=samples, likelihood_sites=sites, record=record, spec=spec, params=params,
    )
