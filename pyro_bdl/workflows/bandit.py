r"""Contextual bandits: act on a posterior, observe the reward, refit, and count the regret against the oracle.

The loop of Blundell et al. (2015, section 5.3), for any model of a reward given a context and an action (a zoo
regressor, ``bnn-regressor`` by default, or a Pyro program over ``X`` and ``y``) and any method of the zoo.  At
every step a context is drawn at random from a :class:`~pyro_bdl.data.bandit.RewardTable`, the agent picks an
action, and the reward is drawn from the table.  The model sees the context with the action one-hot coded after it,
and predicts the reward.  Agents (:class:`Agent`):

* ``thompson`` (Thompson sampling): each step takes one posterior draw theta_s at random and acts greedily on the
  predicted rewards under it, E[r | x, a, theta_s];
* ``greedy``: acts on the predictive mean (for a point fit such as ``map``, the point's prediction);
* either with ``epsilon``: a random action with that probability (the epsilon-greedy agents of the paper).

The model is refitted on the interactions so far (or the last ``buffer`` of them) at steps 16, 32, 64, ...
(doubling up to ``update_every``) and then every ``update_every`` steps; between refits the agent acts on the last
fit (Thompson sampling with delayed updates).  Before the first fit the actions are uniform at random.  Every fit
starts afresh, with the seed of its update, so a run's fits are functions of the interactions alone.

Regret is the expected regret of each action: the oracle's expected reward in that context less the action's
(:meth:`~pyro_bdl.data.bandit.RewardTable.regret`).  On the mushroom table its expectation is the paper's (the
oracle's reward less the agent's), without the noise of the -35 / +5 draw.  Each block of steps between refits is
kept in ``checkpoint`` as it ends: a run interrupted (Ctrl-C) resumes after the last finished block and ends as an
uninterrupted run does.

Example
-------
>>> import torch, warnings
>>> from pyro_bdl.data.bandit import RewardTable
>>> x = torch.linspace(-1, 1, 40).unsqueeze(-1)
>>> table = RewardTable("shift", x, torch.cat([x + 0.5, x - 0.5], dim=-1))   # action 0 pays 1 more than action 1
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     run = bandit("blr", table, "importance", interactions=64, first_update=16, update_every=32,
...                  options={"noise": 0.1}, samples=200, progress=False)
>>> run.history.columns.tolist()[:5]
['step', 'row', 'action', 'reward', 'regret']
>>> run.updates["step"].tolist()   # the refits: doubling from 16 up to update_every
[16, 32]
>>> [float(run.history["regret"].iloc[steps].mean()) for steps in (slice(0, 16), slice(32, 64))]  # random, then learnt
[0.6875, 0.0]
"""

from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from pyro_bdl.data.bandit import RewardTable
from pyro_bdl.data.checks import DataWarning
from pyro_bdl.data.task import Task
from pyro_bdl.data.table import Dataset
from pyro_bdl.fit import fit
from pyro_bdl.inference import METHODS
from pyro_bdl.inference.base import ConvergenceWarning
from pyro_bdl.inference.parallel.pool import run_jobs
from pyro_bdl.registry import ModelSpec, list_models, resolve, spec_of
from pyro_bdl.storage.checkpoint import fingerprint
from pyro_bdl.storage.run_log import RunLog

__all__ = ["Agent", "BanditResult", "bandit", "compare_agents", "update_steps", "regret_table", "plot_regret",
           "POLICIES", "BUFFER"]

#: How an agent acts on its fit.
POLICIES = ("thompson", "greedy")
#: The interactions a refit sees, the most recent ones (None: every one so far). Not Blundell et al.'s 4,096: a
#: fresh refit on a short buffer forgets what the agent no longer does (RESULTS.md, "Thompson sampling on the
#: mushroom bandit").
BUFFER = None


@dataclass(frozen=True)
class Agent:
    """A method, a way to act on its fit, and its settings.

    Attributes
    ----------
    inference : a method of the zoo (``svi``, ``map``, ``mc-dropout``, ``ensemble``, ``laplace-ggn``, ...).
    policy : ``thompson`` (one posterior draw per step) or ``greedy`` (the predictive mean).
    epsilon : the probability of a random action at each step (0: none).
    settings : the method's settings for every refit (``steps``, ``samples``, ...), over the run's own.
    """

    inference: str
    policy: str = "thompson"
    epsilon: float = 0.0
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.inference not in METHODS:
            raise ValueError(f"unknown inference '{self.inference}'; choose one of {', '.join(METHODS)}")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy '{self.policy}'; choose one of {', '.join(POLICIES)}")
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float)) or not 0 <= self.epsilon <= 1:
            raise ValueError(f"epsilon must be a probability in [0, 1], got {self.epsilon!r}")
        if self.policy == "thompson" and METHODS[self.inference].point_estimate:
            raise ValueError(f"thompson sampling needs posterior draws; '{self.inference}' gives a single point "
                             f"(use policy 'greedy', with an epsilon for exploration)")

    @classmethod
    def parse(cls, text: str | Agent) -> Agent:
        """``METHOD`` (Thompson sampling, or greedy for a point method), ``METHOD:thompson``, ``METHOD:greedy``
        or ``METHOD:epsilon=0.05`` (epsilon-greedy)."""
        if isinstance(text, Agent):
            return text
        inference, _, how = str(text).strip().partition(":")
        if inference not in METHODS:
            raise ValueError(f"agent '{text}': unknown inference '{inference}'; choose one of {', '.join(METHODS)}")
        if not how:
            return cls(inference, "greedy" if METHODS[inference].point_estimate else "thompson")
        if how.startswith("epsilon="):
            try:
                epsilon = float(how.split("=", 1)[1])
            except ValueError:
                raise ValueError(f"agent '{text}': epsilon must be a number, e.g. {inference}:epsilon=0.05") from None
            return cls(inference, "greedy", epsilon)
        if how not in POLICIES:
            raise ValueError(f"agent '{text}': after the method comes thompson, greedy or epsilon=P, got '{how}'")
        return cls(inference, how)

    @property
    def label(self) -> str:
        """A short name: ``svi thompson``, ``map greedy``, ``map epsilon-greedy 5%``."""
        if self.epsilon:
            return f"{self.inference} epsilon-greedy {100 * self.epsilon:g}%"
        return f"{self.inference} {self.policy}"


@dataclass
class BanditResult:
    """One bandit run.

    Attributes
    ----------
    history : one row per step: ``step``, ``row`` (the context's row of the table), ``action``, ``reward`` (drawn),
        ``regret`` (expected), ``cumulative_regret``, ``explored`` (a random action), ``agent`` and ``seed``.
    updates : one row per refit: ``step`` (the refit came before this step), ``rows`` (interactions it saw),
        ``fit_seconds``, ``warnings``.
    fit : the last refit's :class:`~pyro_bdl.result.FitResult` (None when no refit ran).
    """

    history: pd.DataFrame
    updates: pd.DataFrame
    fit: object

    @property
    def cumulative_regret(self) -> float:
        """The expected regret summed over every step."""
        return float(self.history["regret"].sum())

    def plot(self, ax=None):
        """This run's cumulative regret against the step."""
        return plot_regret(self.history, ax=ax)


def update_steps(interactions: int, first_update: int = 16, update_every: int = 1000) -> list[int]:
    """The steps before which the model is refitted: ``first_update``, doubling while below ``update_every``, then
    every ``update_every`` (each < ``interactions``).

    >>> update_steps(5000, 16, 1000)
    [16, 32, 64, 128, 256, 512, 1000, 2000, 3000, 4000]
    """
    out, step = [], first_update
    while step < min(update_every, interactions):
        out.append(step)
        step *= 2
    step = update_every
    while step < interactions:
        out.append(step)
        step += update_every
    return out


def bandit(model: str | Callable, table: RewardTable, inference: str | Agent = "svi", policy: str | None = None, *,
           epsilon: float = 0.0, interactions: int = 50_000, buffer: int | None = BUFFER, first_update: int = 16,
           update_every: int = 1000, seed: int = 0, checkpoint: str | Path | None = None, progress: bool = True,
           options: dict | None = None, **settings) -> BanditResult:
    """A contextual bandit run (the module's docstring says how).

    Parameters
    ----------
    model : a zoo model that predicts a real target from features (``bnn-regressor``, ``blr``, ``gp``, ...) or a
        Pyro program over ``X`` (n, d + A) and ``y`` (n,).
    table : the contexts and their rewards, a :class:`~pyro_bdl.data.bandit.RewardTable`.
    inference : a method of the zoo, or an :class:`Agent`.
    policy : ``thompson`` or ``greedy`` (default: thompson for a method with draws, greedy for a point method).
    epsilon : the probability of a random action at each step.
    interactions : steps of the bandit in all (``steps`` is the method's own setting, the optimiser's steps of
        each refit).
    buffer : the most recent interactions each refit sees (None: all of them; give the method a ``batch_size``
        when they are many).
    first_update, update_every : the refit schedule (:func:`update_steps`).
    seed : the run's seed (the contexts, the actions, the rewards and every refit's seed).
    checkpoint : a run log (:mod:`pyro_bdl.storage.run_log`) keeping the finished blocks of steps; a run of the
        same settings resumes from it (a log of another run is refused); deleted when the run ends.
    options : the model's options; ``**settings``: the method's settings for every refit.

    Returns
    -------
    BanditResult
    """
    agent = inference if isinstance(inference, Agent) else Agent(
        inference, policy or ("greedy" if inference in METHODS and METHODS[inference].point_estimate else "thompson"),
        epsilon)
    if not isinstance(table, RewardTable):
        raise TypeError(f"table must be a RewardTable (pyro_bdl.data.bandit), got {type(table).__name__}")
    buffer = interactions if buffer is None else buffer
    for name, value, low in (("interactions", interactions, 1), ("buffer", buffer, 1),
                             ("first_update", first_update, 1), ("update_every", update_every, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    spec = spec_of(model)
    settings = {**settings, **agent.settings}
    _check_agent(spec, agent, options, settings)
    boundaries = [0, *update_steps(interactions, first_update, update_every), interactions]
    log = RunLog(checkpoint, "bandit", fingerprint(
        model=spec.name if spec is not None else getattr(model, "__qualname__", "model"), contexts=table.contexts,
        rewards=table.rewards, probabilities=table.probabilities,
        settings=[agent.inference, agent.policy, agent.epsilon, interactions, buffer, first_update, update_every, seed,
                  options, settings]))
    standardize_on = table.every_pair() if spec is not None else None
    blocks, last = list(log.records), None
    bar = tqdm(total=interactions, initial=sum(len(b["rows"]) for b in blocks), desc=f"bandit ({agent.label})",
               disable=not progress)
    for b in range(len(blocks), len(boundaries) - 1):
        start, stop = boundaries[b], boundaries[b + 1]
        update = {}
        if b > 0:
            began = time.perf_counter()
            last, said, seen = _refit(spec or model, table, agent, blocks, buffer, seed * 100_003 + b, options,
                                      settings, standardize_on)
            update = {"step": start, "rows": seen, "fit_seconds": time.perf_counter() - began, "warnings": said}
        block = _act(table, agent, last, stop - start, np.random.default_rng([seed, b]))
        block["update"] = update
        blocks.append(block)
        log.keep(block)
        bar.update(stop - start)
        bar.set_postfix({"regret": f"{sum(sum(x['regret']) for x in blocks):.4g}"})
    bar.close()
    updates = [x["update"] for x in blocks if x["update"]]
    said = sum(u["warnings"] for u in updates)
    if said:
        warnings.warn(f"bandit ({agent.label}, seed {seed}): {said} warning(s) from the refits (the updates' "
                      f"'warnings' column counts them per refit)", ConvergenceWarning, stacklevel=2)
    if last is None and len(boundaries) > 2:  # every block was in the checkpoint: the last fit is made again
        b = len(boundaries) - 2
        last = _refit(spec or model, table, agent, blocks[:b], buffer, seed * 100_003 + b, options, settings,
                      standardize_on)[0]
    log.clear()
    return BanditResult(_history(blocks, agent, seed), pd.DataFrame(updates, columns=["step", "rows", "fit_seconds",
                                                                                        "warnings"]), last)


def _check_agent(spec: ModelSpec | None, agent: Agent, options, settings) -> None:
    """The model's task, the method, its settings and the model's options: checked before the first step."""
    if spec is not None and spec.data.task is not Task.REGRESSION:
        regressors = ", ".join(m.name for m in list_models() if m.data.task is Task.REGRESSION)
        raise ValueError(f"model '{spec.name}' is a {spec.data.task.value} model; a bandit's reward model predicts "
                         f"a real reward (one of {regressors}, or a Pyro program of your own)")
    resolve(spec, agent.inference, settings=settings)
    if spec is not None:
        spec.resolve_options(options)


def _refit(model, table: RewardTable, agent: Agent, blocks: list[dict], buffer: int, seed: int, options, settings,
           standardize_on):
    """The model fitted afresh on the last ``buffer`` interactions of ``blocks``; (fit, warnings kept, rows)."""
    rows = torch.tensor([r for x in blocks for r in x["rows"]][-buffer:])
    actions = torch.tensor([a for x in blocks for a in x["actions"]][-buffer:])
    rewards = torch.tensor([v for x in blocks for v in x["rewards"]][-buffer:], dtype=table.contexts.dtype)
    data = Dataset(f"{table.name} (interactions)", table.features(rows, actions), rewards, table.feature_columns,
                   "reward")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit(model, data, agent.inference, options=options, seed=seed, progress=False,
                     standardize_on=standardize_on, **settings)
    # one-hot columns constant among a few interactions are expected, not news
    said = [w for w in caught if not (issubclass(w.category, DataWarning) and "constant" in str(w.message))]
    return result, len(said), len(rows)


def _act(table: RewardTable, agent: Agent, result, count: int, rng: np.random.Generator) -> dict:
    """``count`` steps acted on ``result`` (None: at random): the contexts, actions, rewards and regrets."""
    rows = torch.as_tensor(rng.integers(len(table), size=count))
    actions = torch.as_tensor(rng.integers(table.actions, size=count))  # the random actions, used where exploring
    explored = np.ones(count, dtype=bool) if result is None else rng.random(count) < agent.epsilon
    if result is not None and not explored.all():
        values = _predicted_rewards(table, result, rows)  # (draws, count, A)
        if agent.policy == "thompson":
            values = values[torch.as_tensor(rng.integers(values.shape[0], size=count)), torch.arange(count)]
        else:
            values = values.mean(0)
        actions = torch.where(torch.as_tensor(explored), actions, values.argmax(-1))
    rewards = table.draw(rows, actions, rng.random(count))
    return {"rows": rows.tolist(), "actions": actions.tolist(), "rewards": rewards.tolist(),
            "regret": table.regret(rows, actions).tolist(), "explored": explored.tolist()}


def _predicted_rewards(table: RewardTable, result, rows: torch.Tensor) -> torch.Tensor:
    """(draws, m, A): E[r | x, a, theta_s] for the contexts ``rows`` and every action, per posterior draw."""
    m, A = len(rows), table.actions
    pairs = table.features(rows.repeat_interleave(A), torch.arange(A).repeat(m))
    pred = result.predictive(pairs)
    site = result.likelihood_sites[0]
    mean = torch.as_tensor(pred.mean[site])
    return mean.reshape(-1, m, A)


def _history(blocks: list[dict], agent: Agent, seed: int) -> pd.DataFrame:
    frame = pd.DataFrame({key: [v for x in blocks for v in x[key]]
                          for key in ("rows", "actions", "rewards", "regret", "explored")})
    frame = frame.rename(columns={"rows": "row", "actions": "action", "rewards": "reward"})
    frame.insert(0, "step", np.arange(len(frame)))
    frame["cumulative_regret"] = frame["regret"].cumsum()
    frame = frame[["step", "row", "action", "reward", "regret", "cumulative_regret", "explored"]]
    return frame.assign(agent=agent.label, seed=seed)


def compare_agents(model, table: RewardTable, agents: Sequence[str | Agent] = ("svi", "map:greedy",
                                                                              "map:epsilon=0.01", "map:epsilon=0.05"),
                   seeds: Sequence[int] = (0,), workers: int = 1, progress: bool = True, **kwargs) -> pd.DataFrame:
    """The histories of :func:`bandit` for every agent and seed, one frame (``agent`` and ``seed`` tell them
    apart): what :func:`plot_regret` and :func:`regret_table` read.  ``agents``: :meth:`Agent.parse`'s forms or
    Agents; ``workers``: runs side by side in that many processes (one torch thread each, no progress bars), the
    same histories as one process's.  ``kwargs`` as for :func:`bandit` (a ``checkpoint`` per run: ``{agent}`` and
    ``{seed}`` in it are filled in)."""
    parsed = [Agent.parse(a) for a in agents]  # every agent checked before the first run
    spec = spec_of(model)
    for agent in parsed:
        _check_agent(spec, agent, kwargs.get("options"),
                     {**{k: v for k, v in kwargs.items() if k not in _run_arguments()}, **agent.settings})
    labels = [a.label for a in parsed]
    if len(set(labels)) != len(labels):
        raise ValueError(f"agents must differ, got {labels}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    checkpoint = kwargs.pop("checkpoint", None)

    def one_run(job: tuple[int, int]) -> pd.DataFrame:
        k, seed = job
        where = None if checkpoint is None else str(checkpoint).format(agent=labels[k].replace(" ", "-"), seed=seed)
        return bandit(model, table, parsed[k], seed=seed, checkpoint=where, progress=progress and workers == 1,
                      **kwargs).history

    jobs = [(k, seed) for k in range(len(parsed)) for seed in seeds]
    # side by side, the runs end in any order: put back in the jobs' order
    done = {(h["agent"].iloc[0], int(h["seed"].iloc[0])): h for h in run_jobs(one_run, jobs, workers)}
    return pd.concat([done[labels[k], seed] for k, seed in jobs], ignore_index=True)




def _run_arguments() -> set:
    """bandit()'s own keyword arguments: the rest of compare_agents's are the methods' settings."""
    return {name for name, p in inspect.signature(bandit).parameters.items() if p.kind is p.KEYWORD_ONLY}


def regret_table(history: pd.DataFrame) -> pd.DataFrame:
    """Per agent: the cumulative regret at the last step, its mean and standard error over seeds, and each seed's
    (``seed k`` columns), in the agents' order."""
    totals = history.groupby(["agent", "seed"], sort=False)["regret"].sum().unstack("seed")
    table = pd.DataFrame({"steps": history.groupby("agent", sort=False)["step"].max() + 1,
                          "mean": totals.mean(axis=1),
                          "se": totals.std(axis=1, ddof=1) / np.sqrt(totals.count(axis=1))})
    for seed in totals.columns:
        table[f"seed {seed}"] = totals[seed]
    return table.loc[list(dict.fromkeys(history["agent"]))]


def plot_regret(history: pd.DataFrame, ax=None, log: bool = False):
    """Cumulative regret against the step, one line per agent (the mean over seeds) with a band from the lowest
    to the highest seed.  ``history``: :func:`compare_agents`'s frame or one run's.  Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for name, runs in history.groupby("agent", sort=False):
        curves = runs.pivot(index="step", columns="seed", values="cumulative_regret")
        every = max(1, len(curves) // 2000)  # a few thousand points draw the same line
        curves = curves.iloc[::every]
        line, = ax.plot(curves.index, curves.mean(axis=1), label=f"{name} ({curves.shape[1]} seeds)")
        ax.fill_between(curves.index, curves.min(axis=1), curves.max(axis=1), color=line.get_color(), alpha=0.2,
                        linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative expected regret")
    if log:
        ax.set_yscale("log")
    ax.legend()
    return ax
