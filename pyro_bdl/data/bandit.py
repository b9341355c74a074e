r"""A contextual bandit's reward table: contexts, actions, and each action's reward distribution in each context.

A bandit step shows a context :math:`x_i` (row ``i`` of ``contexts``), the agent picks an action :math:`a`, and the
reward is one of ``rewards[i, a, :]`` drawn with ``probabilities[i, a, :]``.  From the table follow the expected
rewards :math:`\bar r_{ia} = \sum_k p_{iak} r_{iak}`, the oracle's action :math:`a^*_i = \arg\max_a \bar r_{ia}`
and the expected regret of an action, :math:`\bar r_{i a^*_i} - \bar r_{ia}`.

A model of the rewards sees the context with the action one-hot coded after it, :math:`(x_i, e_a)` (Blundell et
al. 2015, section 5.3): :meth:`RewardTable.features`.

Example
-------
>>> import torch
>>> table = RewardTable("coin", torch.eye(2), rewards=torch.tensor([[[1.0, 1.0], [0.0, 4.0]],
...                                                              [[1.0, 1.0], [0.0, 0.0]]]),
...                     probabilities=torch.full((2, 2, 2), 0.5))
>>> table.expected.tolist(), table.oracle.tolist()
([[1.0, 2.0], [1.0, 0.0]], [1, 0])
>>> table.regret(torch.tensor([0, 1]), torch.tensor([0, 1])).tolist()
[1.0, 1.0]
>>> table.features(torch.tensor([0]), torch.tensor([1])).tolist()
[[1.0, 0.0, 0.0, 1.0]]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from pyro_bdl.data.table import DataError

__all__ = ["RewardTable"]


@dataclass(frozen=True)
class RewardTable:
    """Contexts and the reward distribution of every action in every context (checked when made).

    Attributes
    ----------
    name : what the table is called in messages and reports.
    contexts : (n, d) float features of the contexts.
    rewards : (n, A, K) the K possible rewards of action a in context i (K = 1: a fixed reward).
    probabilities : (n, A, K) their probabilities (each (i, a) sums to 1); default: a fixed reward (K = 1).
    feature_names : the contexts' d column names (default x0, x1, ...).
    action_names : the A actions' names (default action0, ...).
    """

    name: str
    contexts: torch.Tensor
    rewards: torch.Tensor
    probabilities: torch.Tensor | None = None
    feature_names: list[str] = field(default_factory=list)
    action_names: list[str] = field(default_factory=list)

    def __post_init__(self):
        contexts, rewards = torch.as_tensor(self.contexts), torch.as_tensor(self.rewards)
        if contexts.dim() != 2 or contexts.shape[0] == 0 or contexts.shape[1] == 0:
            raise DataError(f"{self.name}: contexts must be a non-empty (n, d) matrix, got shape "
                            f"{tuple(contexts.shape)}")
        if not contexts.dtype.is_floating_point:
            contexts = contexts.float()
        if rewards.dim() == 2:  # (n, A): one fixed reward per action
            rewards = rewards.unsqueeze(-1)
        n, d = contexts.shape
        if rewards.dim() != 3 or rewards.shape[0] != n or rewards.shape[1] < 2 or rewards.shape[2] < 1:
            raise DataError(f"{self.name}: rewards must be (n, A) or (n, A, K) with n = {n} contexts and A >= 2 "
                            f"actions, got shape {tuple(rewards.shape)}")
        rewards = rewards.to(contexts.dtype)
        probabilities = (torch.ones_like(rewards) if self.probabilities is None and rewards.shape[2] == 1 else
                         self.probabilities)
        if probabilities is None:
            raise DataError(f"{self.name}: rewards has K = {rewards.shape[2]} outcomes per action; give their "
                            f"probabilities (n, A, K)")
        probabilities = torch.as_tensor(probabilities).to(contexts.dtype)
        if probabilities.shape != rewards.shape:
            raise DataError(f"{self.name}: probabilities must have the rewards' shape {tuple(rewards.shape)}, got "
                            f"{tuple(probabilities.shape)}")
        for what, values in (("contexts", contexts), ("rewards", rewards), ("probabilities", probabilities)):
            if not torch.isfinite(values).all():
                bad = tuple(int(i) for i in torch.nonzero(~torch.isfinite(values))[0])
                raise DataError(f"{self.name}: {what} holds a NaN or infinite value (at {bad})")
        if (probabilities < 0).any():
            bad = tuple(int(i) for i in torch.nonzero(probabilities < 0)[0])
            raise DataError(f"{self.name}: probabilities must be >= 0 (negative at {bad})")
        totals = probabilities.sum(-1)
        off = (totals - 1).abs() > 1e-6
        if off.any():
            i, a = (int(v) for v in torch.nonzero(off)[0])
            raise DataError(f"{self.name}: the probabilities of context {i}, action {a} sum to "
                            f"{float(totals[i, a]):.6g}, not 1")
        features = list(self.feature_names) or [f"x{j}" for j in range(d)]
        actions = list(self.action_names) or [f"action{a}" for a in range(rewards.shape[1])]
        if len(features) != d or len(actions) != rewards.shape[1]:
            raise DataError(f"{self.name}: {len(features)} feature names for {d} columns, {len(actions)} action "
                            f"names for {rewards.shape[1]} actions")
        if len(set(actions)) != len(actions):
            raise DataError(f"{self.name}: action names must differ, got {actions}")
        for key, value in (("contexts", contexts), ("rewards", rewards), ("probabilities", probabilities),
                           ("feature_names", features), ("action_names", actions)):
            object.__setattr__(self, key, value)

    def __len__(self) -> int:
        return int(self.contexts.shape[0])

    @property
    def actions(self) -> int:
        """The number of actions A."""
        return int(self.rewards.shape[1])

    @property
    def expected(self) -> torch.Tensor:
        """(n, A): each action's expected reward in each context."""
        return (self.rewards * self.probabilities).sum(-1)

    @property
    def oracle(self) -> torch.Tensor:
        """(n,): the action of highest expected reward in each context (the first of a tie)."""
        return self.expected.argmax(-1)

    def regret(self, rows: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """(m,): the expected regret of ``actions`` (m,) in the contexts ``rows`` (m,): the oracle's expected reward
        less the action's."""
        expected = self.expected[rows]
        return expected.max(-1).values - expected.gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    def draw(self, rows: torch.Tensor, actions: torch.Tensor, uniform: np.ndarray) -> torch.Tensor:
        """(m,): the rewards of ``actions`` in the contexts ``rows``, the outcome of each chosen by ``uniform``
        (m,), a draw in [0, 1) (the caller's random stream, so a run can be replayed)."""
        cumulative = self.probabilities[rows, actions].cumsum(-1)
        u = torch.as_tensor(uniform, dtype=cumulative.dtype).unsqueeze(-1)
        outcome = (cumulative <= u).sum(-1).clamp(max=self.rewards.shape[2] - 1)
        return self.rewards[rows, actions].gather(-1, outcome.unsqueeze(-1)).squeeze(-1)

    def features(self, rows: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """(m, d + A): the contexts ``rows`` with the ``actions`` one-hot coded after them, a reward model's
        inputs."""
        onehot = torch.nn.functional.one_hot(actions.long(), self.actions).to(self.contexts.dtype)
        return torch.cat([self.contexts[rows], onehot], dim=-1)

    @property
    def feature_columns(self) -> list[str]:
        """The names of :meth:`features`'s columns."""
        return self.feature_names + [f"action={a}" for a in self.action_names]

    def every_pair(self) -> torch.Tensor:
        """(n A, d + A): every context with every action (row i A + a): what a reward model's inputs are
        standardised by."""
        n = len(self)
        rows = torch.arange(n).repeat_interleave(self.actions)
        return self.features(rows, torch.arange(self.actions).repeat(n))

