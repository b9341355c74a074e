"""Data-parallel SVI: 1 against 2 processes on this machine's cores, seconds per epoch and where the time goes
(the gradient all-reduce against the rest of the step).  benchmarks/RESULTS.md, "Data-parallel SVI".

    python benchmarks/data_parallel.py            # starts the runs through torchrun; ~3 minutes on 2 cores
    python benchmarks/data_parallel.py --quick    # a smoke run

Each configuration runs as its own ``torchrun --standalone --nproc-per-node N`` launch of this file with
``--worker``; the all-reduce is timed by wrapping :func:`pyro_bdl.inference.parallel.data_parallel.all_reduce_gradients`.
Models: the VAE on the MNIST 8k split (784-400-50, batches of 128 and of 1,024; the digits where the MNIST files are
absent) and
a Bayes-by-Backprop net (``bnn-classifier`` on the digits, batches of 256).  One torch thread per process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-t10k"


def _case(name: str, quick: bool):
    if name.startswith("vae"):
        batch = int(name[3:])
        if MNIST.exists() and not quick:
            from pyro_bdl.data.images import mnist_split

            data, label = mnist_split(MNIST)[0], f"vae, MNIST 8k, 784-400-50, batch {batch}"
        else:
            data, label = "digits-01", f"vae, digits (pixels in [0, 1]), 64-400-50, batch {batch}"
        return label, ("vae", data, "svi-amortised", {"epochs": 1 if quick else 3 * batch // 128, "is_samples": 5,
                                                       "validation": 0.0, "batch_size": batch},
                       {"hidden": 400, "latent_dim": 50})
    return ("bnn-classifier (BBB), digits, 64-100-10, batch 256",
            ("bnn-classifier", "digits", "svi", {"steps": 30 if quick else 300, "samples": 10, "batch_size": 256},
             {"hidden": 100}))


def worker(name: str, quick: bool, out: str) -> None:
    import torch

    import pyro_bdl
    import pyro_bdl.inference.parallel.data_parallel as dp

    spent = [0.0]
    reduce = dp.all_reduce_gradients

    def timed(params, weight):
        start = time.perf_counter()
        reduce(params, weight)
        spent[0] += time.perf_counter() - start

    dp.all_reduce_gradients = timed
    label, (model, data, method, settings, options) = _case(name, quick)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = pyro_bdl.fit(model, data, inference=method, options=options, progress=False, threads=1, **settings)
    if int(os.environ.get("RANK", 0)) == 0:
        steps = len(r.losses)
        Path(out).write_text(json.dumps({"label": label, "seconds": r.record.wall_seconds, "steps": steps,
                                         "allreduce": spent[0], "processes": r.record.runs_on["processes"],
                                         "final_loss": float(torch.as_tensor(r.losses[-20:]).mean())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.quick, args.out)
        return
    print("| model | processes | s / 100 steps | speed-up | all-reduce share | final loss (mean of last 20) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in (("vae128", "bbb") if args.quick else ("vae128", "vae1024", "bbb")):
        base = None
        for nproc in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "out.json"
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                           __file__, "--worker", name, "--out", str(out)] + (["--quick"] if args.quick else [])
                subprocess.run(command, check=True, capture_output=True)
                run = json.loads(out.read_text())
            per100 = 100 * run["seconds"] / run["steps"]
            base = per100 if base is None else base
            print(f"| {run['label']} | {nproc} | {per100:.2f} | {base / per100:.2f} | "
                  f"{run['allreduce'] / run['seconds']:.1%} | {run['final_loss']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
