"""Reward tables (pyro_bdl.data.bandit) and the mushroom bandit (pyro_bdl.data.mushroom): the expected rewards,
the oracle and the regret by hand, the draws' frequencies, and every bad table refused with a message naming it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyro_bdl.data.bandit import RewardTable
from pyro_bdl.data.mushroom import load_mushroom
from pyro_bdl.data.reward_files import load_reward_table
from pyro_bdl.data.table import DataError


def three_contexts() -> RewardTable:
    """Three contexts, two actions: action 0 pays 2 or -4 (probabilities 0.75, 0.25: expected 0.5), 1, or 3 for
    sure; action 1 pays 1 everywhere."""
    rewards = torch.tensor([[[2.0, -4.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]], [[3.0, 3.0], [1.0, 1.0]]])
    probabilities = torch.tensor([[[0.75, 0.25], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.5, 0.5]]])
    return RewardTable("three", torch.eye(3), rewards, probabilities)


def test_expected_rewards_oracle_and_regret_by_hand():
    table = three_contexts()
    assert table.expected.tolist() == [[0.5, 1.0], [1.0, 1.0], [3.0, 1.0]]
    assert table.oracle.tolist() == [1, 0, 0]  # a tie goes to the first action
    rows, actions = torch.tensor([0, 0, 1, 2, 2]), torch.tensor([0, 1, 1, 0, 1])
    assert table.regret(rows, actions).tolist() == [0.5, 0.0, 0.0, 0.0, 2.0]
    assert table.features(torch.tensor([2]), torch.tensor([0])).tolist() == [[0.0, 0.0, 1.0, 1.0, 0.0]]
    assert table.feature_columns == ["x0", "x1", "x2", "action=action0", "action=action1"]
    pairs = table.every_pair()
    assert pairs.shape == (6, 5) and pairs[3].tolist() == [0.0, 1.0, 0.0, 0.0, 1.0]  # row i A + a: context 1, action 1


def test_drawn_rewards_follow_the_probabilities():
    table, n = three_contexts(), 20_000
    rewards = table.draw(torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long),
                         np.random.default_rng(0).random(n))
    share = float((rewards == 2.0).float().mean())
    assert set(rewards.unique().tolist()) == {2.0, -4.0}
    assert abs(share - 0.75) < 4 * np.sqrt(0.75 * 0.25 / n)  # four binomial standard errors
    sure = table.draw(torch.full((100,), 2), torch.zeros(100, dtype=torch.long), np.random.default_rng(1).random(100))
    assert sure.tolist() == [3.0] * 100  # an outcome of probability 0 is never drawn


@pytest.mark.parametrize("change, message", [
    (dict(contexts=torch.zeros(0, 2)), "non-empty"),
    (dict(rewards=torch.zeros(3, 1)), "A >= 2 actions"),
    (dict(rewards=torch.zeros(4, 2)), "n = 3 contexts"),
    (dict(rewards=torch.zeros(3, 2, 2), probabilities=None), "give their probabilities"),
    (dict(probabilities=torch.full((3, 2, 3), 1 / 3)), "the rewards' shape"),
    (dict(probabilities=torch.tensor([[[0.5, 0.4], [0.5, 0.5]]] * 3)), "sum to 0.9, not 1"),
    (dict(probabilities=torch.tensor([[[1.5, -0.5], [0.5, 0.5]]] * 3)), "must be >= 0"),
    (dict(rewards=torch.tensor([[[float("nan"), 1.0], [1.0, 1.0]]] * 3)), "rewards holds a NaN"),
    (dict(contexts=torch.tensor([[1.0], [float("inf")], [0.0]])), "contexts holds a NaN or infinite value"),
    (dict(action_names=["eat"]), "1 action names for 2 actions"),
    (dict(action_names=["eat", "eat"]), "action names must differ"),
])
def test_a_bad_reward_table_is_refused(change, message):
    given = dict(name="bad", contexts=torch.eye(3), rewards=torch.zeros(3, 2, 2),
                 probabilities=torch.full((3, 2, 2), 0.5))
    given.update(change)
    with pytest.raises(DataError, match=message):
        RewardTable(**given)


def test_a_fixed_reward_needs_no_probabilities():
    table = RewardTable("fixed", torch.eye(2), torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    assert table.rewards.shape == (2, 2, 1) and table.oracle.tolist() == [0, 1]


def test_an_npz_reward_table_is_read_without_unpickling(tmp_path):
    path = tmp_path / "table.npz"
    np.savez(path, contexts=np.eye(2), rewards=np.array([[1.0, 0.0], [0.0, 2.0]]))
    assert load_reward_table(path).expected.tolist() == [[1.0, 0.0], [0.0, 2.0]]
    np.savez(tmp_path / "objects.npz", contexts=np.array([{"a": 1}], dtype=object), rewards=np.zeros((1, 2)))
    with pytest.raises(DataError, match="numeric arrays"):
        load_reward_table(tmp_path / "objects.npz")
    np.savez(tmp_path / "partial.npz", contexts=np.eye(2))
    with pytest.raises(DataError, match="no array rewards"):
        load_reward_table(tmp_path / "partial.npz")
    with pytest.raises(DataError, match="no such file"):
        load_reward_table(tmp_path / "absent.npz")


MUSHROOMS = "p,x,s,n\ne,x,y,?\ne,b,s,n\np,b,y,n\n"


def test_the_mushroom_file_is_one_hot_coded_with_the_papers_rewards(tmp_path):
    path = tmp_path / "agaricus-lepiota.data"
    path.write_text(MUSHROOMS)
    table = load_mushroom(path)
    assert table.feature_names == ["a1=b", "a1=x", "a2=s", "a2=y", "a3=?", "a3=n"]
    assert table.contexts.tolist()[1] == [0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert table.action_names == ["eat", "pass"] and table.expected.tolist() == [[-15.0, 0.0], [5.0, 0.0],
                                                                                 [5.0, 0.0], [-15.0, 0.0]]
    assert table.oracle.tolist() == [1, 0, 0, 1]
    # the regret of eating a poisonous one is 15, of passing an edible one 5
    assert table.regret(torch.tensor([0, 1]), torch.tensor([0, 1])).tolist() == [15.0, 5.0]
    assert load_reward_table(path).contexts.shape == (4, 6)  # any file but .npz is read as the mushroom data


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("p,x,s\ne,x\n", "line 2: 2 columns, the first row has 3"),
    ("q,x,s\n", "must be 'e' or 'p'"),
    ("p,xx,s\n", "one letter each"),
    ("p\n", "no attribute columns"),
])
def test_a_bad_mushroom_file_is_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "m.data"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        load_mushroom(path)


def test_a_missing_mushroom_file_is_refused(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_mushroom(tmp_path / "absent.data")
