"""Regenerate tests/support/fixtures/digits_autodelta_reference.json: the held-out accuracy of Pyro's own MAP fit,
``SVI(model, AutoDelta(model), Adam, Trace_ELBO)`` at AutoDelta's default start (``init_to_median``), of the
PyroModule MLP of tests/support/ported_programs.py (``DigitsMLP``) on scikit-learn's digits, over several seeds.

tests/test_ported_programs.py holds the zoo's ``map`` and ``mle`` on the same network, data, steps and learning
rate to these accuracies (their mean less K = 4.5 times the larger of their spread and a binomial sd).

    python benchmarks/pyro_autodelta_reference.py                 # the fixture (5 seeds)
    python benchmarks/pyro_autodelta_reference.py --seeds 1 --steps 20 --out q.json   # a smoke run
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np
import pyro
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoDelta
from pyro.optim import Adam

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.ported_programs import DIGITS_MAP, DigitsMLP, digits_data  # noqa: E402

FIXTURE = ROOT / "tests" / "support" / "fixtures" / "digits_autodelta_reference.json"


def accuracy(seed: int, steps: int, lr: float, hidden: int) -> float:
    """Held-out accuracy of one AutoDelta fit started at seed ``seed``: the arg-max of the network's logits."""
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    train, test = digits_data()
    net = DigitsMLP(hidden=hidden)
    guide = AutoDelta(net)
    svi = SVI(net, guide, Adam({"lr": lr}), Trace_ELBO())
    for _ in range(steps):
        svi.step(train["x"], train["y"])
    point = {name: value.detach() for name, value in guide.median().items()}
    with torch.no_grad():
        conditioned = pyro.poutine.condition(net, data=point)
        trace = pyro.poutine.trace(conditioned).get_trace(test["x"])
        logits = trace.nodes["obs"]["fn"].logits
    return float((logits.argmax(-1) == test["y"]).float().mean())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=DIGITS_MAP["steps"])
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    settings = dict(DIGITS_MAP, steps=args.steps)
    accuracies = [accuracy(seed, settings["steps"], settings["lr"], settings["hidden"]) for seed in range(args.seeds)]
    doc = {"pyro_version": pyro.__version__, "torch_version": torch.__version__, "date": datetime.date.today().isoformat(),
           "fit": "SVI(DigitsMLP, AutoDelta (init_to_median), Adam(lr), Trace_ELBO), seeds 0..S-1",
           "settings": settings, "test_rows": len(digits_data()[1]["y"]), "accuracy": accuracies,
           "command": "python benchmarks/pyro_autodelta_reference.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(doc, indent=1) + "\n")
    partial.replace(args.out)
    print(f"AutoDelta accuracy over {args.seeds} seeds: mean {np.mean(accuracies):.3f}, "
          f"min {min(accuracies):.3f}, max {max(accuracies):.3f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
