"""The CUDA path, run where a GPU exists: each (model, method) pair fitted on ``cuda`` in a process of its own
(a CUDA error must not hide the pairs after it), saved, loaded on the CPU and predicted on the CPU, and its
seconds beside the same fit on the CPU.  ``python benchmarks/gpu_check.py`` (results: benchmarks/RESULTS.md,
"Devices")."""

import subprocess
import sys

RUNS = [("blr", "nuts"), ("blr", "svi"), ("blr", "map"), ("bnn-regressor", "svi"), ("bnn-regressor", "ensemble"),
        ("bnn-regressor", "mc-dropout"), ("bnn-regressor", "laplace-ggn"), ("bnn-classifier", "svi"),
        ("vae", "svi-amortised"), ("ss-vae", "svi-amortised"), ("sparse-vd", "svi-meanfield"),
        ("coin", "importance"), ("blr", "laplace"), ("blr", "hmc"), ("last-layer", "nuts"),
        ("adaptive-depth-resnet", "svi-amortised")]

ONE = """
import sys, tempfile, time, warnings, torch, pyro_bdl
from pyro_bdl.inference import get_method
from pyro_bdl.store import load_fit, write_fit
warnings.simplefilter("ignore")
model, method = sys.argv[1:3]
seconds = {}
for device in ("cuda", "cpu"):
    start = time.time()
    r = pyro_bdl.fit(model, inference=method, progress=False, device=device, **get_method(method).quick)
    seconds[device] = time.time() - start
    if device == "cuda":
        on = {v.device.type for v in r.samples.values()} | {v.device.type for v in r.params.values()}
        with tempfile.TemporaryDirectory() as tmp:
            write_fit(r, f"{tmp}/fit")
            loaded = load_fit(f"{tmp}/fit")
            X = loaded.data.get(loaded.spec.data.features) if loaded.spec.data.features else None
            table = loaded.predict(X[:5]) if X is not None and loaded.spec.data.task.has_input_features else None
            cpu = {v.device.type for v in loaded.samples.values()}
print(f"OK   {model:15} {method:15} fit on {sorted(on)}, loaded on {sorted(cpu)}, predicted "
      f"{'-' if table is None else len(table)} rows on the CPU; cuda {seconds['cuda']:.1f} s, cpu {seconds['cpu']:.1f} s")
"""

import torch  # noqa: E402

if not torch.cuda.is_available():
    print("no CUDA GPU on this machine: nothing to check (tests/inference/parallel/test_parallel.py skips its GPU tests likewise)")
    sys.exit(0)
for model, method in RUNS:
    done = subprocess.run([sys.executable, "-c", ONE, model, method], capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        print(done.stdout.strip().splitlines()[-1], flush=True)
    else:
        lines = done.stderr.strip().splitlines()
        tail = [line for line in lines if "pyro_bdl" in line and "File" in line][-3:] + [
            line for line in lines if "Error" in line][-2:]
        print(f"FAIL {model:15} {method:15}\n    " + "\n    ".join(tail), flush=True)
