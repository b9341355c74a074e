"""The CUDA path, run where a GPU exists: fits on ``cuda`` with each family of methods, saved, loaded on the CPU
and predicted; then the device tests of tests/test_parallel.py.  ``python benchmarks/gpu_check.py``."""

import tempfile
import time
import warnings

import torch

import pyro_bdl
from pyro_bdl.inference import get_method
from pyro_bdl.store import load_fit, write_fit

warnings.simplefilter("ignore")
RUNS = [("blr", "nuts"), ("blr", "svi"), ("blr", "map"), ("bnn-regressor", "svi"), ("bnn-regressor", "ensemble"),
        ("bnn-regressor", "mc-dropout"), ("bnn-regressor", "laplace-ggn"), ("bnn-classifier", "svi"),
        ("vae", "svi-amortised"), ("ss-vae", "svi-amortised"), ("sparse-vd", "svi-meanfield"),
        ("coin", "importance"), ("blr", "laplace"), ("blr", "hmc"), ("last-layer", "nuts")]
for model, method in RUNS:
    start = time.time()
    try:
        r = pyro_bdl.fit(model, inference=method, progress=False, device="cuda", **get_method(method).quick)
        devices = {v.device.type for v in r.samples.values()}
        with tempfile.TemporaryDirectory() as tmp:
            write_fit(r, f"{tmp}/fit")
            loaded = load_fit(f"{tmp}/fit")
            cpu = {v.device.type for v in loaded.samples.values()}
        print(f"OK   {model:15} {method:15} draws on {devices}, loaded on {cpu}, {time.time() - start:.1f} s", flush=True)
    except Exception as exc:  # report every pair, then go on
        print(f"FAIL {model:15} {method:15} {type(exc).__name__}: {str(exc)[:300]}", flush=True)
