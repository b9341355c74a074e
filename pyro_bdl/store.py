"""A fit on disk: write a fit directory atomically, and load it back.

A fit directory holds ``posterior.nc`` (ArviZ InferenceData, NetCDF), ``summary.csv``
(``az.summary``), ``metrics.json``, the plots and, for a model with learned parameters (``pyro.param``
or ``pyro.module`` sites: networks, amortised guides' encoders, feature maps), ``params.pt``.  Files are written into a temporary
directory beside the target and moved in only when all of them are complete, so a failed
or interrupted run leaves nothing half-written.  Loading reads NetCDF, JSON and tensors (``weights_only=True``) only: no pickle.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import torch

from pyro_bdl.data.arguments import bind_arguments, binding_of, rebind
from pyro_bdl.data.transforms import StandardizedModel, Standardizer
from pyro_bdl.inference.method import METHODS
from pyro_bdl.inference.outputs import to_json
from pyro_bdl.posterior.inference_data import samples_from_inference_data
from pyro_bdl.registry import get_model
from pyro_bdl.result import FitRecord, FitResult
from pyro_bdl.storage.paths import FitDirectoryError

__all__ = ["write_fit", "load_fit", "PARAMS", "ARGUMENTS"]

#: The model's learned parameters (networks, feature maps) in a fit directory: a dict of tensors, read
#: back with ``torch.load(..., weights_only=True)``.
PARAMS = "params.pt"
#: A user's program's tensor arguments (its data), read back the same way.
ARGUMENTS = "arguments.pt"

def _recorded(written: dict) -> dict:
    """What ``metrics.json`` recorded of the run that the NetCDF attributes do not hold (settings, run time, data
    set, rows, where it ran), where it is there and of the right type (it is not needed to predict)."""
    kinds = {"settings": dict, "wall_seconds": (int, float), "data": str, "rows": int}
    out = {k: written[k] for k, kind in kinds.items() if isinstance(written.get(k), kind)}
    runs_on = {k: written[k] for k in ("device", "threads", "processes") if k in written}
    return {**out, "runs_on": runs_on} if runs_on else out


def _outputs(method: str, written: dict, spec) -> dict:
    """The fit's typed records rebuilt from its ``metrics.json``: the method's outputs (``info``), its check
    (``diagnostics``: the report type of the method's ``diagnose``), held-out scores, caught warnings, and a zoo model's
    own report (the keys that no other record holds).  Nothing where the method is unknown or no file was kept."""
    known = METHODS.get(method)
    if known is None or not written:
        return {}
    report_type = getattr(known.diagnose, "report", None)
    out = {"info": known.outputs.from_metrics(written),
           "diagnostics": report_type.from_metrics(written) if report_type is not None else None,
           "heldout": written.get("heldout") if isinstance(written.get("heldout"), dict) else None,
           "warnings": [str(w) for w in written.get("warnings", [])] if isinstance(written.get("warnings"), list) else []}
    if spec is not None and spec.hooks.report is not None:
        claimed = {f.name for record in (out["info"], out["diagnostics"]) if record is not None
                   for f in dataclasses.fields(record)}
        claimed |= set(FitRecord(spec.name).as_dict(method)) | {"data", "rows", "feature_names", "target", "device",
                                                                "threads", "processes", "point_estimate", "heldout",
                                                                "warnings"}
        out["report"] = {k: v for k, v in written.items() if k not in claimed}
    return out


def _arguments_record(result: FitResult) -> tuple[dict, dict]:
    """What a fit of a user's program stores of its arguments: ``({"names": key -> argument, "binding": ...,
    "values": numbers, text and None}, tensors)``; other values (a function) are named, to be given again."""
    tensors = {k: v.detach().cpu() for k, v in result.data.items() if isinstance(v, torch.Tensor)}
    values = {k: v for k, v in result.data.items()
              if v is None or isinstance(v, (bool, int, float, str)) and not isinstance(v, torch.Tensor)}
    names = getattr(result.model, "call_names", lambda: {k: k for k in result.data})()
    names = {k: names.get(k, k) for k in result.data}
    return {"names": names, "binding": binding_of(result.model), "values": to_json(values)}, tensors


def write_fit(result: FitResult, out_dir: str | Path, test=None, plots: bool = True) -> list[str]:
    """Write the fit directory; returns the file names written.

    ``test``: held-out data, for the predictive-band or reliability plot.  ``plots=False`` writes the records
    alone (``posterior.nc``, ``summary.csv``, ``metrics.json`` and the stored tensors), no figures: what
    :func:`load_fit` reads is the same either way.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        idata = result.to_inference_data()
        files = ["posterior.nc", "summary.csv", "metrics.json"]
        if result.spec is None:  # a user's program: how it takes its arguments, and those that can be stored
            idata = idata.copy()
            own, tensors = _arguments_record(result)
            for group in idata.groups():
                idata[group].attrs["arguments"] = json.dumps(own)
            if tensors:
                torch.save(tensors, tmp / ARGUMENTS)
                files.append(ARGUMENTS)
        idata.to_netcdf(str(tmp / "posterior.nc"))
        summary = result.summary()
        summary.to_csv(tmp / "summary.csv")
        (tmp / "metrics.json").write_text(json.dumps(result.metrics(), indent=2) + "\n")
        if result.params:  # learned parameters of the model (networks, feature maps): tensors only
            torch.save({k: v.detach().cpu() for k, v in result.params.items()}, tmp / PARAMS)
            files.append(PARAMS)
        if plots:
            from pyro_bdl.posterior.plots import write_plots  # matplotlib and ArviZ load when a fit is written

            files += write_plots(result, idata, tmp, test)
        out_dir.mkdir(exist_ok=True)
        for name in files:
            os.replace(tmp / name, out_dir / name)
        return files
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_fit(fit_dir: str | Path, model: Callable | None = None, data: dict | None = None) -> FitResult:
    """Rebuild a :class:`FitResult` from its fit directory (``posterior.nc``, written by :func:`write_fit` or
    ``pyro-bdl fit``).

    A zoo model's fit is rebuilt from its name.  A fit of your own Pyro program needs the program, ``model``
    (its code is not stored: nothing is unpickled); its tensor arguments, numbers and strings come back from the
    files, and ``data`` supplies (or replaces) any others, such as a function the program takes.

    Example
    -------
    >>> import tempfile, torch, pyro, pyro.distributions as dist, pyro_bdl
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    ...     with pyro.plate("data", len(y)):
    ...         pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)
    >>> fit = pyro_bdl.fit(model, {"y": torch.randn(20)}, inference="map", progress=False)
    >>> out = tempfile.mkdtemp()
    >>> _ = write_fit(fit, out)
    >>> again = load_fit(out, model=model)
    >>> bool(torch.allclose(again.samples["mu"], fit.samples["mu"]))
    True
    """
    idata, attrs, written, params = _read(Path(fit_dir))
    try:
        sites = json.loads(attrs["likelihood_sites"])
        options = json.loads(attrs["options"])
        seed = int(attrs.get("seed", -1))
        if not (isinstance(options, dict) and isinstance(sites, list)):  # [] for a density (no observed site)
            raise ValueError("options or likelihood_sites has the wrong type")
        samples = samples_from_inference_data(idata)
        method = str(attrs["inference"])
        own = attrs.get("arguments")  # a user's program: how it takes its arguments
    except Exception as exc:
        raise FitDirectoryError(f"{Path(fit_dir) / 'posterior.nc'}: damaged or edited ({type(exc).__name__}: {exc})") from None
    if own:
        if model is None:
            raise FitDirectoryError(f"{fit_dir} holds a fit of your own model '{attrs['model']}', whose code is not "
                                    f"stored: load it with load_fit(path, model={attrs['model']})")
        record = FitRecord(attrs["model"], seed, options={}, **_recorded(written))
        bound, kwargs = _user_model(Path(fit_dir), model, json.loads(own), data)
        return FitResult(model=bound, data=kwargs, method=method, samples=samples, likelihood_sites=sites,
                         record=record, params=params, **_outputs(method, written, None))
    if model is not None or data is not None:
        raise ValueError(f"{fit_dir} holds a fit of the zoo model '{attrs['model']}': load it without model= or data=")
    return _zoo_fit(Path(fit_dir), idata, attrs, written, params, method, samples, sites, options, seed)


def _read(fit_dir: Path) -> tuple:
    """The directory's InferenceData, its attributes, ``metrics.json`` and ``params.pt``, each checked: a file that
    cannot be read is a :class:`FitDirectoryError` naming it."""
    path = fit_dir / "posterior.nc"
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
    metrics_path, written = fit_dir / "metrics.json", {}
    if metrics_path.exists():  # not needed to predict, but a damaged one means a damaged directory
        try:
            written = json.loads(metrics_path.read_text())
            if not isinstance(written, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError, OSError) as exc:
            raise FitDirectoryError(f"{metrics_path}: not a readable JSON object ({exc})") from None
    return idata, attrs, written, _tensors(fit_dir / PARAMS, "parameter")


def _tensors(path: Path, what: str) -> dict:
    """A file of named tensors (``torch.load(..., weights_only=True)``: no pickle), or {} where there is none."""
    if not path.exists():
        return {}
    try:
        tensors = torch.load(path, weights_only=True, map_location="cpu")
        if not (isinstance(tensors, dict) and all(isinstance(v, torch.Tensor) for v in tensors.values())):
            raise ValueError("not a dict of tensors")
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... for a damaged file
        raise FitDirectoryError(f"{path}: not a readable {what} file ({type(exc).__name__}: {exc})") from None
    return tensors


def _user_model(fit_dir: Path, model: Callable, own: dict, data: dict | None) -> tuple[Callable, dict]:
    """A user's program bound as when it was fitted, and its arguments: the stored ones, ``data`` over them."""
    if not callable(model):
        raise TypeError(f"model must be the Pyro program the fit was made with, not {type(model).__name__}")
    kwargs = {**_tensors(fit_dir / ARGUMENTS, "argument"), **own.get("values", {})}
    given = {}
    if data:
        keys = {name: key for key, name in own["names"].items()}
        given = {keys.get(name, name): value for name, value in data.items()}
    missing = sorted(set(own["names"]) - set(kwargs) - set(given))
    if missing:
        raise ValueError(f"the fit's argument(s) {', '.join(own['names'][k] for k in missing)} could not be stored "
                         f"(not tensors, numbers or text): pass them again, load_fit(path, model=..., data={{...}})")
    bound = rebind(model, list(own["names"]), own["binding"])
    return bound, {**kwargs, **bind_arguments(bound, data)[1]} if data else kwargs


def _zoo_fit(fit_dir, idata, attrs, written, params, method, samples, sites, options, seed) -> FitResult:
    """A zoo model's fit from its files: the spec from its name, the data from the stored groups."""
    path = fit_dir / "posterior.nc"
    try:
        spec = get_model(attrs["model"])
        feature_names = json.loads(attrs["feature_names"])
        if not isinstance(feature_names, list):
            raise ValueError("feature_names has the wrong type")
        data = {}
        if "constant_data" in idata.groups():
            data = {k: torch.tensor(v.values, dtype=torch.float32) for k, v in idata.constant_data.data_vars.items()}
        observed = torch.tensor(idata.observed_data[sites[0]].values, dtype=torch.float32)
    except Exception as exc:
        raise FitDirectoryError(f"{path}: damaged or edited ({type(exc).__name__}: {exc})") from None
    if spec.data.target is not None:
        data[spec.data.target] = observed
    elif spec.data.features is not None and spec.data.features not in data:  # the observed site is the data (x of a VAE)
        data[spec.data.features] = observed
    if spec.data.size is not None:
        data[spec.data.size] = len(observed)
    record = FitRecord(spec.name, seed, options=options, feature_names=feature_names, target=attrs.get("target") or None,
                       **_recorded(written))
    try:
        model, standardizer = spec.bind(options), None
        if attrs.get("standardizer"):
            standardizer = Standardizer.from_dict(json.loads(attrs["standardizer"]))
            model = StandardizedModel(model, standardizer, spec.data.features, spec.data.target, sites)
    except Exception as exc:
        raise FitDirectoryError(f"{path}: damaged or edited ({type(exc).__name__}: {exc})") from None
    return FitResult(
        standardizer=standardizer,
        model=model, data=data, method=method,
        samples=samples, likelihood_sites=sites, record=record, spec=spec, params=params,
        **_outputs(method, written, spec),
    )
