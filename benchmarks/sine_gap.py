r"""In-between uncertainty: predictive sd in a gap of the inputs over the sd where the data lie, per method.

Run on demand (the test suite smoke-tests it with a few steps)::

    .venv/bin/python benchmarks/sine_gap.py svi mc-dropout ensemble svi:50,50 mc-dropout:50,50:p=0.1
    .venv/bin/python benchmarks/sine_gap.py laplace-ggn laplace-ggn::subset=last-layer --seeds 0 1 2 3 4
    .venv/bin/python benchmarks/sine_gap.py --family ensemble@in-between svi:50,50:activation=tanh:steps=10000

Each argument is ``METHOD[:HIDDEN[:KEY=VALUE...]]``: an inference method for ``bnn-regressor``, its
hidden widths (default: the model's, one layer of 50) and settings of the method or options of the
model (``prior_scale``, ``noise``, ``activation``, ``prior``, ``likelihood``), e.g.
``svi:50,50:steps=10000:grad_clamp=10`` or ``svi::activation=tanh`` (default widths); or
``METHOD@in-between``, the settings ``IN_BETWEEN`` (pyro_bdl/models/bnn.py, ``pyro-bdl describe bnn-regressor``)
recommends for that method.  Every fit uses seed 0, or each of ``--seeds 0 1 2 3 4``, on the embedded
``sine`` data, or with ``--family`` on each problem of ``pyro_bdl.data.gap.gap_family`` (other
curves, gap widths and places, noise levels and sizes).  One line per fit:

* ``gap/data``: mean predictive sd in the middle of the gap (on sine |x| < 0.25) over the mean sd where
  the data lie (0.4 < |x| < 0.95): the issue-3 criterion is >= 2;
* ``epistemic`` sd in the data and in the gap, and ``aleatoric`` sd (the noise), in the data's units (the
  tables' ``epistemic gap/data`` is their ratio: reported, not judged; see ``pyro_bdl.data.gap``);
* ``rmse``: the predictive mean against the true curve where the data lie, and as a multiple of the
  noise sd (``x noise``; the criterion is <= 2: on sine 0.1);
* ``gap|z|``: the mean |truth - mean| / sd in the middle of the gap (the criterion is < 2);
* ``loss``: the mean of the method's last 200 training losses, when it has them (negative ELBO for
  ``svi``: comparable between runs of one method and architecture, not across them);
* ``pass`` when all three criteria hold (``pyro_bdl.bench.gap.check_gap``), else what failed.

``--family`` prints a Markdown table after each spec's fits (for benchmarks/RESULTS.md).

For a single hidden ReLU layer, a mean-field Gaussian or MC dropout posterior cannot reach 2 (Foong et
al. 2020: the variance between two inputs is at most the sum of the variances at them).  What the
script measured is in benchmarks/RESULTS.md (the settings withdrawn since: benchmarks/history/in_between.md).
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
from pyro_bdl.data.embedded import SINE_PROBLEM as SINE
from pyro_bdl.data.gap import GapProblem, gap_family
from pyro_bdl.inference import get_method
from pyro_bdl.models.bnn import IN_BETWEEN
from pyro_bdl.bench.gap import GapCheck, gap_report

#: The model every spec fits; a spec's KEY=VALUE pairs are its options where it has one, else settings.
MODEL = "bnn-regressor"
#: ``METHOD@in-between``: the method with the settings ``IN_BETWEEN`` recommends.
RECOMMENDED = "@in-between"


def parse_spec(spec: str) -> tuple[str, dict, dict]:
    """``METHOD[:HIDDEN[:KEY=VALUE...]]`` or ``METHOD@in-between`` -> (method, model options, method settings)."""
    if spec.endswith(RECOMMENDED):
        method = spec[:-len(RECOMMENDED)]
        if method not in IN_BETWEEN:
            raise ValueError(f"'{spec}': IN_BETWEEN recommends settings for {', '.join(IN_BETWEEN)}, not '{method}'")
        return method, dict(IN_BETWEEN[method]["options"]), dict(IN_BETWEEN[method]["settings"])
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


def gap_row(spec: str, problem: GapProblem = SINE, grid_size: int = 400, extra: dict | None = None,
            seed: int = 0) -> tuple[str, GapCheck]:
    """Fit ``spec`` on ``problem``'s data and judge it: (one line, the ``GapCheck``)."""
    method, options, settings = parse_spec(spec)
    start = time.perf_counter()
    fit = pyro_bdl.fit(MODEL, problem.dataset(), inference=method, options=options, seed=seed, progress=False,
                       **{**settings, **(extra or {})})
    seconds = time.perf_counter() - start
    report = gap_report(fit, problem, grid_size)
    check, table = report.check, report.table
    loss = f"{np.mean(fit.losses[-200:]):.1f}" if fit.losses is not None and len(fit.losses) else "n/a"
    line = (f"{spec:<36} seed {seed}  {problem.name:<48} gap/data {check.ratio:5.2f}  epistemic in data "
            f"{report.mean_in('epistemic_sd', 'inside'):.3f}, in gap {report.mean_in('epistemic_sd', 'gap'):.3f}  "
            f"aleatoric {table['aleatoric_sd'].mean():.3f}  "
            f"rmse {check.rmse:.3f} ({check.rmse / problem.noise:.1f} x noise)  gap|z| {check.gap_z:.2f}  "
            f"loss {loss}  {check.failures or 'pass'}  ({seconds:.0f} s)")
    return line, check


def markdown_table(spec: str, rows: list[tuple[GapProblem, int, GapCheck]]) -> str:
    """The family's results for one spec: a row per (problem, seed) and the count that pass."""
    lines = [f"`{spec}`: passes on {sum(c.passed for _, _, c in rows)} of {len(rows)}", "",
             "| problem | seed | gap/data | epistemic gap/data | rmse | rmse / noise | gap abs z | result |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {p.name} | {seed} | {c.ratio:.2f} | {c.epistemic_ratio:.1f} | {c.rmse:.3f} | {c.rmse / p.noise:.1f} | "
              f"{c.gap_z:.2f} | {c.failures or 'pass'} |" for p, seed, c in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="METHOD[:HIDDEN[:KEY=VALUE...]], e.g. svi:50,50:steps=10000")
    parser.add_argument("--steps", type=int, help="override every optimisation method's steps (smoke runs)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="fit each spec once per seed (default: 0)")
    parser.add_argument("--family", action="store_true", help="fit on each generated gap problem instead of sine")
    parser.add_argument("--family-seed", type=int, default=0, help="the seed the family is generated from (default: 0)")
    parser.add_argument("--per-function", type=int, default=3, help="family problems per curve (default: 3)")
    parser.add_argument("--problems", type=int, nargs="+", help="only these problems of the family (0-based, in order)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=pyro_bdl.ConvergenceWarning)
    problems = gap_family(args.family_seed, args.per_function) if args.family else [SINE]
    if args.problems is not None:
        if not args.family or not all(0 <= i < len(problems) for i in args.problems):
            parser.error(f"--problems needs --family and indices in 0..{len(problems) - 1}")
        problems = [problems[i] for i in args.problems]
    for spec in args.specs:
        method = parse_spec(spec)[0]
        extra = {"steps": args.steps} if args.steps and "steps" in get_method(method).defaults else None
        rows = []
        for problem in problems:
            for seed in args.seeds:
                line, check = gap_row(spec, problem, extra=extra, seed=seed)
                print(line, flush=True)
                rows.append((problem, seed, check))
        if args.family:
            print(f"\n{markdown_table(spec, rows)}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
