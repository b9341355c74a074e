"""MC dropout, DropConnect and concrete dropout on the digits, held out (issue 34).

Each ``--methods`` entry is ``method`` or ``method:key=value,...`` (e.g. ``mc-dropout:mask=weight``, DropConnect),
fitted to ``bnn-classifier`` on ``pyro_bdl.data.embedded.digits_split()`` (1347 training / 450 test rows) with
seed ``--seed`` and the method's defaults otherwise.  Each row: test accuracy, NLL (mean negative log predictive
density), ECE (15 bins), the dropout rate per layer (``info.dropout_p``: the fixed ``p`` or concrete dropout's
learned rates) and the wall time of fit and evaluation.  The rows are printed and written as a markdown table to
``--out`` (default benchmarks/results/dropout_variants_digits.md) with the command, date and machine; the UCI rows
come from ``pyro-bdl bench uci`` (then ``benchmarks/uci_regression.py``, which it replaced;
benchmarks/results/dropout_variants.md has both).

``--sine``: also ``bnn-regressor`` on ``sine`` (200 rows), each row the coverage of the central 90% predictive
interval at 1000 fresh points from the data's curve and noise on its two intervals (binomial sd 0.0095 for a
calibrated model), the RMSE of the predictive mean to the curve there, and the rates.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dropout_variants.py --sine \\
        --methods mc-dropout mc-dropout:mask=weight concrete-dropout

``--quick``: each method's quick settings (a smoke run: the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyro_bdl  # noqa: E402
from pyro_bdl.data.embedded import SINE_NOISE, digits_split, sine_curve  # noqa: E402
from pyro_bdl.posterior.evaluation import evaluate_fit  # noqa: E402
from pyro_bdl.posterior.uncertainty import regression_summary  # noqa: E402

METHODS = ("mc-dropout", "mc-dropout:mask=weight", "concrete-dropout")
DIGITS_COLUMNS = [("accuracy", "accuracy", ".3f"), ("NLL", "nll", ".4f"), ("ECE", "ece", ".4f")]
SINE_COLUMNS = [("90% coverage", "coverage_90", ".3f"), ("rmse to the curve", "rmse", ".4f")]


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"mc-dropout:mask=weight,p=0.1"`` -> ``("mc-dropout", {"mask": "weight", "p": "0.1"})``."""
    method, _, extra = spec.partition(":")
    pairs = [item.split("=", 1) for item in extra.split(",") if item]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"method spec {spec!r}: settings are KEY=VALUE pairs after ':', separated by ','")
    return method, dict(pairs)


def _fit(model: str, data, spec: str, seed: int, quick: bool):
    method, settings = parse_spec(spec)
    if quick:
        settings = {**pyro_bdl.METHODS[method].quick, **settings}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pyro_bdl.fit(model, data, inference=method, seed=seed, progress=False, **settings)


def _rates(fit) -> str:
    rates = getattr(fit.info, "dropout_p", None)
    return ", ".join(f"{k} {v:.4f}" for k, v in rates.items()) if isinstance(rates, dict) else f"{rates:g} (fixed)"


def run_one(spec: str, *, seed: int, quick: bool) -> dict:
    """Fit ``spec`` to the digits' training rows; its held-out row."""
    train, test = digits_split()
    start = time.perf_counter()
    fit = _fit("bnn-classifier", train, spec, seed, quick)
    metrics = evaluate_fit(fit, test)
    return {"method": spec, "accuracy": metrics["accuracy"], "nll": -metrics["test_ll"], "ece": metrics["ece"],
            "p": _rates(fit), "seconds": time.perf_counter() - start}


def fresh_sine(m: int = 1000, seed: int = 123) -> tuple[torch.Tensor, torch.Tensor]:
    """``m`` new points of ``sine``'s curve and noise, x uniform on its two intervals: (x (m, 1), y (m,))."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(m, generator=g) * 0.6
    x = torch.where(torch.randint(0, 2, (m,), generator=g) == 1, 0.4 + u, -1.0 + u)
    y = sine_curve(x.double()) + SINE_NOISE * torch.randn(m, generator=g, dtype=torch.float64)
    return x.unsqueeze(1), y


def sine_one(spec: str, *, seed: int, quick: bool) -> dict:
    """Fit ``spec`` to ``sine``; the 90% interval's coverage and the RMSE to the curve at fresh points."""
    x, y = fresh_sine()
    start = time.perf_counter()
    fit = _fit("bnn-regressor", "sine", spec, seed, quick)
    pred = fit.predictive(pyro_bdl.Dataset("sine-fresh", x, y.float(), ["x"], "y"))
    site = fit.likelihood_sites[0]
    mu = pred.mean[site].reshape(-1, len(y))
    table = regression_summary(mu, np.sqrt(pred.variance[site].reshape(mu.shape)), 0.90)
    yy, truth = y.numpy(), sine_curve(x.squeeze(1).double()).numpy()
    cover = float(np.mean((yy >= table["lower"].to_numpy()) & (yy <= table["upper"].to_numpy())))
    rmse = float(np.sqrt(np.mean((table["mean"].to_numpy() - truth) ** 2)))
    return {"method": spec, "coverage_90": cover, "rmse": rmse, "p": _rates(fit),
            "seconds": time.perf_counter() - start}


def table(rows: list[dict], columns: list) -> str:
    """A markdown table of ``rows``: the method, ``columns`` ((header, key, format), ...), the rates, the seconds."""
    lines = ["| method | " + " | ".join(c[0] for c in columns) + " | dropout p per layer | seconds |",
             "|---|" + "---|" * (len(columns) + 2)]
    lines += ["| `" + r["method"] + "` | " + " | ".join(format(r[k], f) for _, k, f in columns)
              + f" | {r['p']} | {r['seconds']:.0f} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), help="method or method:key=value,...")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="each method's quick settings (a smoke run)")
    parser.add_argument("--sine", action="store_true", help="also the 90%% coverage on sine")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "dropout_variants_digits.md")
    args = parser.parse_args(argv)
    for spec in args.methods:
        try:
            method, _ = parse_spec(spec)
            pyro_bdl.METHODS[method]
        except (ValueError, KeyError) as err:
            parser.error(f"--methods {spec}: {err}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    started = datetime.datetime.now(datetime.timezone.utc)
    rows = []
    for spec in args.methods:
        rows.append(run_one(spec, seed=args.seed, quick=args.quick))
        r = rows[-1]
        print(f"digits {spec}: accuracy {r['accuracy']:.3f} NLL {r['nll']:.4f} ECE {r['ece']:.4f} "
              f"p {r['p']} ({r['seconds']:.0f} s)", flush=True)
    sine = []
    for spec in args.methods if args.sine else ():
        sine.append(sine_one(spec, seed=args.seed, quick=args.quick))
        r = sine[-1]
        print(f"sine {spec}: coverage_90 {r['coverage_90']:.3f} rmse {r['rmse']:.4f} p {r['p']} ({r['seconds']:.0f} s)",
              flush=True)
    command = "python benchmarks/dropout_variants.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = (f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__} on "
               f"{torch.get_num_threads()} thread(s), load average {os.getloadavg()[0]:.1f} at the end")
    text = (f"# Dropout variants on digits and sine (generated by benchmarks/dropout_variants.py)\n\n"
            f"* Command: `{command}`\n* Date: {started:%Y-%m-%d %H:%M} UTC, seed {args.seed}"
            f"{' (quick settings: the numbers mean nothing)' if args.quick else ''}\n* Machine: {machine}\n\n"
            f"## digits (1347 training / 450 test rows)\n\n"
            f"{table(rows, DIGITS_COLUMNS)}\n")
    if sine:
        text += (f"\n## sine (200 rows; 1000 fresh points on its intervals)\n\n"
                 f"{table(sine, SINE_COLUMNS)}\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
