r"""In-between uncertainty on ``sine``: predictive sd in the gap over the sd where the data lie, per method.

Run on demand (the test suite smoke-tests it with a few steps)::

    .venv/bin/python benchmarks/sine_gap.py svi mc-dropout ensemble svi:50,50 mc-dropout:50,50:p=0.1

Each argument is ``METHOD[:HIDDEN[:KEY=VALUE...]]``: an inference method for ``bnn-regressor``, its
hidden widths (default: the model's, one layer of 50) and settings of the method or options of the
model (``prior_scale``, ``noise``, ``activation``, ``prior``, ``likelihood``), e.g.
``svi:50,50:steps=10000:grad_clamp=10`` or ``svi::activation=tanh`` (default widths).  Every fit uses
the embedded ``sine`` data and seed 0, or each of ``--seeds 0 1 2 3 4``.  One line per fit:

* ``gap/data``: mean predictive sd in the middle of the gap (|x| < 0.25) over the mean sd where the
  data lie (0.4 < |x| < 0.95): the issue-3 criterion is >= 2;
* ``epistemic`` sd in the data and in the gap, and ``aleatoric`` sd (the noise), in the data's units;
* ``rmse``: the predictive mean against the true curve where the data lie (the noise sd is 0.05);
* ``loss``: the mean of the method's last 200 training losses, when it has them (negative ELBO for
  ``svi``: comparable between runs of one method and architecture, not across them).

For a single hidden ReLU layer, a mean-field Gaussian or MC dropout posterior cannot reach 2 (Foong et
al. 2020: the variance between two inputs is at most the sum of the variances at them).  The script is
for looking at what deeper networks and other settings do; what it measured, and the settings that
reach 2, are in ``IN_BETWEEN`` (models/bnn.py) and ``pyro-bdl describe bnn-regressor``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import torch

import pyro_bdl
from pyro_bdl.cli import parse_key_values
from pyro_bdl.datasets import sine_curve, sine_gap_ratio, sine_grid, sine_regions
from pyro_bdl.inference import get_method
from pyro_bdl.uncertainty import rmse

#: The model every spec fits; a spec's KEY=VALUE pairs are its options where it has one, else settings.
MODEL = "bnn-regressor"


def parse_spec(spec: str) -> tuple[str, dict, dict]:
    """``METHOD[:HIDDEN[:KEY=VALUE...]]`` -> (method, model options, method settings)."""
    method, *rest = spec.split(":")
    options, settings = {}, {}
    if rest and "=" not in rest[0]:
        hidden = rest.pop(0)
        if hidden:  # empty (``svi::KEY=VALUE``): the model's default widths
            options["hidden"] = hidden
    try:
        pairs = parse_key_values(rest, f"each option or setting of '{spec}'")
    except ValueError as err:
        raise ValueError(f"{err} (METHOD[:HIDDEN[:KEY=VALUE...]])") from None
    for key, value in pairs.items():  # text: pyro_bdl.fit reads it, as from the CLI
        (options if key in pyro_bdl.get_model(MODEL).options else settings)[key] = value
    return method, options, settings


def gap_row(spec: str, grid_size: int = 400, extra: dict | None = None, seed: int = 0) -> str:
    method, options, settings = parse_spec(spec)
    grid = sine_grid(grid_size)
    xs = grid[:, 0]
    inside, gap = sine_regions(xs)
    start = time.perf_counter()
    fit = pyro_bdl.fit(MODEL, "sine", inference=method, options=options, seed=seed, progress=False,
                       **{**settings, **(extra or {})})
    seconds = time.perf_counter() - start
    table = fit.predict(grid)
    sd, epi = table["sd"].to_numpy(), table["epistemic_sd"].to_numpy()
    error = rmse(table["mean"].to_numpy()[inside], sine_curve(xs[inside]).numpy())
    loss = f"{np.mean(fit.losses[-200:]):.1f}" if fit.losses is not None and len(fit.losses) else "n/a"
    return (f"{spec:<36} seed {seed}  gap/data {sine_gap_ratio(xs, sd):5.2f}  epistemic in data "
            f"{epi[inside].mean():.3f}, in gap {epi[gap].mean():.3f}  aleatoric {table['aleatoric_sd'].mean():.3f}  "
            f"rmse {error:.3f}  loss {loss}  ({seconds:.0f} s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="METHOD[:HIDDEN[:KEY=VALUE...]], e.g. svi:50,50:steps=10000")
    parser.add_argument("--steps", type=int, help="override every optimisation method's steps (smoke runs)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="fit each spec once per seed (default: 0)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=pyro_bdl.ConvergenceWarning)
    for spec in args.specs:
        takes_steps = "steps" in get_method(spec.split(":")[0]).defaults
        extra = {"steps": args.steps} if args.steps and takes_steps else None
        for seed in args.seeds:
            print(gap_row(spec, extra=extra, seed=seed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
