"""Thompson sampling on the mushroom bandit (Blundell et al. 2015, section 5.3): the cumulative expected regret of
BBB (``svi``) with Thompson sampling against greedy and epsilon-greedy agents on a point fit (``map``), and of the
zoo's other methods with draws (issue 54).

Every agent refits the same reward model, ``bnn-regressor`` with two hidden layers of 100 ReLU units (the paper's
net), on every interaction so far (minibatches of 512), fresh at each refit, at the schedule of
:func:`pyro_bdl.workflows.bandit.update_steps`.  The paper took gradient steps at every interaction on a buffer of
the last 4,096; ours refits in blocks (delayed updates).

    python benchmarks/bandit_mushroom.py --out benchmarks/results/bandit          # 50,000 steps, 3 seeds
    python benchmarks/bandit_mushroom.py --interactions 200 --seeds 0 --steps 20 --out /tmp/b   # a smoke run

Writes ``regret.md`` (the table, with the command, date and machine), ``regret.csv`` (cumulative regret every
``--every`` steps per agent and seed) and ``regret.png`` to ``--out``; the runs' checkpoints are kept there while
they run, so a stopped run resumes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pyro_bdl.data.mushroom import load_mushroom
from pyro_bdl.storage.files import atomic_write, atomic_write_text
from pyro_bdl.inference import METHODS
from pyro_bdl.workflows.bandit import Agent, compare_agents, plot_regret, regret_table

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "mushroom" / "agaricus-lepiota.data"


def markdown(regret) -> str:
    """The regret table as markdown: agent, steps, mean +- s.e. over seeds, each seed."""
    seeds = [c for c in regret.columns if c.startswith("seed ")]
    lines = ["| agent | steps | cumulative regret (mean +- s.e.) | " + " | ".join(seeds) + " |",
             "|---|---|---|" + "---|" * len(seeds)]
    for agent, row in regret.iterrows():
        se = "" if np.isnan(row["se"]) else f" +- {row['se']:.0f}"
        lines.append(f"| {agent} | {int(row['steps'])} | {row['mean']:.0f}{se} | "
                     + " | ".join(f"{row[s]:.0f}" for s in seeds) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--agents", default="svi,map:greedy,map:epsilon=0.01,map:epsilon=0.05")
    parser.add_argument("--interactions", type=int, default=50_000)
    parser.add_argument("--update-every", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000, help="optimiser steps of each refit")
    parser.add_argument("--batch-size", type=int, default=512, help="minibatch of each refit")
    parser.add_argument("--samples", type=int, default=100, help="posterior draws of each refit")
    parser.add_argument("--hidden", default="100,100")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", action="append", metavar="METHOD.KEY=VALUE",
                        help="a setting of one method's refits, e.g. laplace-ggn.subset=last-layer")
    parser.add_argument("--every", type=int, default=500, help="steps between the rows of regret.csv")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = load_mushroom(args.data)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    agents = [Agent.parse(a) for a in args.agents.split(",")]
    extra = {}
    for item in args.set or []:  # METHOD.KEY=VALUE
        key, _, value = item.partition("=")
        method, _, name = key.partition(".")
        extra.setdefault(method, {})[name] = value
    agents = [Agent(a.inference, a.policy, a.epsilon,
                    {**({"samples": args.samples} if "samples" in METHODS[a.inference].defaults else {}),
                     **({"batch_size": args.batch_size} if "batch_size" in METHODS[a.inference].defaults else {}),
                     **extra.get(a.inference, {})}) for a in agents]
    start = time.perf_counter()
    history = compare_agents("bnn-regressor", table, agents, seeds=args.seeds, workers=args.jobs,
                             progress=args.jobs == 1, interactions=args.interactions, update_every=args.update_every,
                             options={"hidden": hidden}, steps=args.steps,
                             checkpoint=out / "checkpoint-{agent}-{seed}.jsonl")
    seconds = time.perf_counter() - start
    regret = regret_table(history)
    late = history[history["step"] >= args.interactions - min(10_000, args.interactions // 2)]
    mistakes = history.assign(poisonous_eaten=history["regret"] == 15.0, edible_passed=history["regret"] == 5.0)
    counts = mistakes.groupby("agent", sort=False)[["poisonous_eaten", "edible_passed"]].sum() / len(args.seeds)
    tail = late.groupby("agent", sort=False)["regret"].sum() / len(args.seeds)
    thinned = history[(history["step"] + 1) % args.every == 0][["agent", "seed", "step", "cumulative_regret"]]
    atomic_write_text(out / "regret.csv", thinned.to_csv(index=False))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_regret(history)
    ax.set_title(f"mushroom bandit: {args.interactions} steps, {len(args.seeds)} seeds")
    atomic_write(out / "regret.png", lambda path: ax.figure.savefig(path, format="png", dpi=120, bbox_inches="tight"))
    plt.close(ax.figure)
    command = "python benchmarks/bandit_mushroom.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = f"{os.cpu_count()} CPU cores ({platform.machine()}), torch {torch.__version__}, {args.jobs} process(es)"
    text = (f"# Mushroom bandit: cumulative expected regret\n\n`{command}`, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}; {seconds:.0f} s.\n\n"
            f"Reward model `bnn-regressor` hidden={hidden}, refitted on every interaction so far, "
            f"{args.steps} optimiser steps on minibatches of {args.batch_size} and {args.samples} draws a refit, "
            f"refits doubling from step 16 up to "
            f"{args.update_every}, then every {args.update_every}.\n\n"
            + markdown(regret) + "\n\nPer agent, mean over seeds: regret in the last "
            f"{late['step'].nunique()} steps, and the mistakes (a poisonous mushroom eaten: regret 15; an edible one "
            "passed: 5):\n\n| agent | late regret | poisonous eaten | edible passed |\n|---|---|---|---|\n"
            + "\n".join(f"| {a} | {tail[a]:.0f} | {counts.loc[a, 'poisonous_eaten']:.0f} | "
                        f"{counts.loc[a, 'edible_passed']:.0f} |" for a in tail.index) + "\n")
    atomic_write_text(out / "regret.md", text)
    print(text)


if __name__ == "__main__":
    main()
