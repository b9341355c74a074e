"""Contextual bandits (pyro_bdl.workflows.bandit): the regret's bookkeeping against a hand computation, the refit
schedule, that Thompson sampling learns, resuming after an interruption, bad agents and settings refused before any
fit, a user's own reward model, the comparison's table and figure, and the command line."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_bdl
import pyro_bdl.workflows.bandit as bandit_module
from pyro_bdl.cli import main
from pyro_bdl.data.bandit import RewardTable
from pyro_bdl.workflows.bandit import Agent, bandit, compare_agents, plot_regret, regret_table, update_steps

#: a fast method with posterior draws on blr: importance sampling from the Laplace approximation, which is exact for
#: its Gaussian posterior
FAST = {"samples": 200, "progress": False, "options": {"noise": 0.1}}


@pytest.fixture(scope="module")
def sign():
    """40 contexts x on [-1, 1]; action 0 pays x, action 1 pays -x (for sure): the oracle picks by x's sign."""
    x = torch.linspace(-1, 1, 40).unsqueeze(-1)
    return RewardTable("sign", x, torch.cat([x, -x], dim=-1))


@pytest.fixture(scope="module")
def shift():
    """40 contexts x on [-1, 1]; action 0 pays x + 0.5, action 1 pays x - 0.5: linear in the context and the one-hot
    action (what blr can learn), the oracle always action 0, a random action's expected regret 0.5."""
    x = torch.linspace(-1, 1, 40).unsqueeze(-1)
    return RewardTable("shift", x, torch.cat([x + 0.5, x - 0.5], dim=-1))


def quiet(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


def test_update_steps_double_then_keep_the_interval():
    assert update_steps(5000, 16, 1000) == [16, 32, 64, 128, 256, 512, 1000, 2000, 3000, 4000]
    assert update_steps(100, 16, 1000) == [16, 32, 64]
    assert update_steps(10, 16, 1000) == []
    assert update_steps(100, 50, 20) == [20, 40, 60, 80]  # an interval shorter than the first update: no doubling


def test_the_regret_is_the_oracles_expected_reward_less_the_actions_by_hand():
    """A random agent (epsilon 1, no refit before the end) on a table of random rewards: every step's regret, the
    cumulative sum and the drawn rewards recomputed by hand from the rows and actions the history records."""
    g = torch.Generator().manual_seed(3)
    rewards = torch.randint(-3, 4, (7, 3, 2), generator=g).float()
    probabilities = torch.rand(7, 3, 2, generator=g)
    probabilities = probabilities / probabilities.sum(-1, keepdim=True)
    table = RewardTable("random", torch.randn(7, 2, generator=g), rewards, probabilities)
    run = bandit("blr", table, "map", epsilon=1.0, interactions=300, first_update=1000, update_every=1000,
                 progress=False)
    history = run.history
    assert len(history) == 300 and history["explored"].all() and run.updates.empty and run.fit is None
    expected = [[sum(float(r) * float(p) for r, p in zip(rewards[i, a], probabilities[i, a])) for a in range(3)]
                for i in range(7)]
    for _, step in history.iterrows():
        i, a = int(step["row"]), int(step["action"])
        assert step["regret"] == pytest.approx(max(expected[i]) - expected[i][a], abs=1e-6)
        assert step["reward"] in [float(r) for r, p in zip(rewards[i, a], probabilities[i, a]) if p > 0]
    assert history["cumulative_regret"].iloc[-1] == pytest.approx(history["regret"].sum())
    assert run.cumulative_regret == pytest.approx(float(np.cumsum(history["regret"].to_numpy())[-1]))
    assert set(history["action"]) == {0, 1, 2} and history["row"].between(0, 6).all()


def test_thompson_sampling_learns_the_better_action(shift):
    """Random actions' expected regret is 0.5 a step; after three refits Thompson sampling's is below a fifth of
    that."""
    run = quiet(bandit, "blr", shift, "importance", interactions=256, first_update=16, update_every=64, **FAST)
    assert run.updates["step"].tolist() == [16, 32, 64, 128, 192]
    assert run.updates["rows"].tolist() == [16, 32, 64, 128, 192]
    assert run.history["regret"].iloc[:16].mean() > 0.2  # before the first fit: at random
    assert run.history["regret"].iloc[128:].mean() < 0.1
    assert run.fit is not None and run.fit.method == "importance"


def test_a_buffer_keeps_only_the_latest_interactions(sign):
    run = quiet(bandit, "blr", sign, "importance", interactions=100, buffer=20, first_update=16, update_every=32,
                **FAST)
    assert run.updates["rows"].tolist() == [16, 20, 20, 20]


def test_epsilon_greedy_explores_at_its_rate(sign):
    run = quiet(bandit, "blr", sign, "map", epsilon=0.25, interactions=1040, first_update=16, update_every=1024,
                progress=False, options={"noise": 0.1}, steps=100)
    share = run.history["explored"].iloc[16:].mean()
    assert abs(share - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 1024)


@pytest.mark.slow
def test_an_interrupted_run_resumes_and_ends_as_an_uninterrupted_one(sign, tmp_path, monkeypatch):
    """Ctrl-C in the third refit (before step 64): three blocks are kept; the rerun goes on from there and its history, updates and
    last fit's draws are those of a run never stopped."""
    real, calls = bandit_module.fit, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3 and stop[0]:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    stop = [True]
    monkeypatch.setattr(bandit_module, "fit", stopping)
    checkpoint = tmp_path / "run.jsonl"
    kwargs = dict(interactions=128, first_update=16, update_every=32, checkpoint=checkpoint, **FAST)
    with pytest.raises(KeyboardInterrupt):
        quiet(bandit, "blr", sign, "importance", **kwargs)
    assert checkpoint.exists() and len(checkpoint.read_text().splitlines()) == 1 + 3  # header, blocks 0, 1 and 2
    stop[0], calls[:] = False, []
    resumed = quiet(bandit, "blr", sign, "importance", **kwargs)
    assert len(calls) == 2 and not checkpoint.exists()  # the refits at 64 and 96; not those at 16 and 32 again
    whole = quiet(bandit, "blr", sign, "importance", **{**kwargs, "checkpoint": None})
    pd.testing.assert_frame_equal(whole.history, resumed.history)
    assert whole.updates["step"].tolist() == resumed.updates["step"].tolist() == [16, 32, 64, 96]
    torch.testing.assert_close(whole.fit.samples["w"], resumed.fit.samples["w"])


def test_a_checkpoint_of_another_run_is_refused(sign, tmp_path):
    checkpoint = tmp_path / "run.jsonl"
    checkpoint.write_text('{"run": "bandit", "fingerprint": "something else"}\n')
    with pytest.raises(ValueError, match="holds another run"):
        bandit("blr", sign, "map", interactions=10, checkpoint=checkpoint, progress=False)


@pytest.mark.parametrize("text, agent", [
    ("svi", Agent("svi", "thompson")), ("map", Agent("map", "greedy")), ("svi:greedy", Agent("svi", "greedy")),
    ("map:epsilon=0.05", Agent("map", "greedy", 0.05)), ("ensemble:thompson", Agent("ensemble", "thompson")),
])
def test_agents_are_parsed(text, agent):
    assert Agent.parse(text) == agent


@pytest.mark.parametrize("text, message", [
    ("sgd", "unknown inference 'sgd'"), ("map:thompson", "needs posterior draws"),
    ("svi:boltzmann", "thompson, greedy or epsilon=P"), ("map:epsilon=lots", "epsilon must be a number"),
    ("map:epsilon=1.5", "a probability in"),
])
def test_a_bad_agent_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        Agent.parse(text)


def test_agent_labels():
    assert [Agent.parse(a).label for a in ("svi", "map", "map:epsilon=0.01")] == [
        "svi thompson", "map greedy", "map epsilon-greedy 1%"]


@pytest.mark.parametrize("call, message", [
    (lambda t: bandit("bnn-classifier", t, "map"), "is a classification model"),
    (lambda t: bandit("blr", t, "map", steps="many"), "steps"),
    (lambda t: bandit("blr", t, "map", samples=10), "unknown setting 'samples' for inference 'map'"),
    (lambda t: bandit("blr", t, "map", options={"colour": 1}), "colour"),
    (lambda t: bandit("blr", t, "map", interactions=0), "interactions must be a whole number >= 1"),
    (lambda t: bandit("blr", t, "map", buffer=2.5), "buffer must be a whole number"),
    (lambda t: bandit("blr", t.contexts, "map"), "must be a RewardTable"),
    (lambda t: compare_agents("blr", t, ["map", "map:greedy"]), "agents must differ"),
    (lambda t: compare_agents("blr", t, ["importance", "map"], samples=10), "unknown setting 'samples'"),
])
def test_bad_settings_are_refused_before_any_fit(sign, monkeypatch, call, message):
    monkeypatch.setattr(bandit_module, "fit", lambda *a, **k: pytest.fail("a fit ran"))
    with pytest.raises((ValueError, TypeError), match=message):
        call(sign)


def test_a_users_own_pyro_program_is_the_reward_model():
    """Action 0 pays 0.3 and action 1 -0.3 whatever the context: a linear model of the one-hot action learns it."""

    def reward_model(X, y=None):
        w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1]), 1.0).to_event(1))
        with pyro.plate("rows", X.shape[0]):
            pyro.sample("y", dist.Normal(X @ w, 0.1), obs=y)

    x = torch.linspace(-1, 1, 20).unsqueeze(-1)
    table = RewardTable("constant", x, torch.tensor([[0.3, -0.3]]).expand(20, 2))
    run = quiet(bandit, reward_model, table, "importance", interactions=96, first_update=16, update_every=32,
                samples=200, progress=False)
    assert (run.history["action"].iloc[32:] == 0).mean() > 0.9


def test_the_comparison_table_and_figure(sign):
    agents = [Agent("importance", settings={"samples": 100}), Agent("map", "greedy", 0.2, {"steps": 100})]
    history = quiet(compare_agents, "blr", sign, agents, seeds=(0, 1), interactions=64, first_update=16,
                    update_every=32, options={"noise": 0.1}, progress=False)
    assert history.groupby(["agent", "seed"]).size().tolist() == [64] * 4
    table = regret_table(history)
    assert table.index.tolist() == ["importance thompson", "map epsilon-greedy 20%"]
    totals = history.groupby(["agent", "seed"])["regret"].sum()
    assert table.loc["importance thompson", "seed 1"] == pytest.approx(totals["importance thompson", 1])
    assert table.loc["map epsilon-greedy 20%", "mean"] == pytest.approx(totals["map epsilon-greedy 20%"].mean())
    assert table["steps"].tolist() == [64, 64]
    ax = plot_regret(history)
    assert [line.get_label() for line in ax.get_lines()] == ["importance thompson (2 seeds)",
                                                            "map epsilon-greedy 20% (2 seeds)"]
    import matplotlib.pyplot as plt

    plt.close(ax.figure)


def test_the_comparison_runs_side_by_side_with_the_same_histories(sign):
    kwargs = dict(seeds=(0, 1), interactions=48, first_update=16, update_every=32, options={"noise": 0.1},
                  progress=False)
    one = quiet(compare_agents, "blr", sign, ["map"], steps=100, **kwargs)
    two = quiet(compare_agents, "blr", sign, ["map"], steps=100, workers=2, **kwargs)
    pd.testing.assert_frame_equal(one, two)


def test_pyro_bdl_bandit_is_the_workflow():
    assert pyro_bdl.bandit is bandit


def test_the_command_line_writes_the_history_and_the_figure(sign, tmp_path, capsys):
    table = tmp_path / "sign.npz"
    np.savez(table, contexts=sign.contexts.numpy(), rewards=sign.rewards.squeeze(-1).numpy())
    out = tmp_path / "run"
    args = ["bandit", "blr", "--data", str(table), "--agents", "importance,map:epsilon=0.1", "--interactions", "48",
            "--update-every", "32", "--option", "noise=0.1", "--set", "importance.samples=100", "--no-progress",
            "--out", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args) == 0
    said = capsys.readouterr().out
    assert "importance thompson: cumulative regret" in said and "map epsilon-greedy 10%" in said
    history = pd.read_csv(out / "history.csv")
    assert len(history) == 96 and (out / "regret.png").stat().st_size > 0
    assert not list(out.glob("checkpoint-*"))  # the runs' logs are gone once they finish
    assert main(args) == 2 and "already holds a bandit run" in capsys.readouterr().err


@pytest.mark.parametrize("change, message", [
    (["--data", "absent.npz"], "no such file"),
    (["--agents", "map:thompson"], "needs posterior draws"),
    (["--set", "map.samples=3"], "unknown setting 'samples' for inference 'map'"),
])
def test_the_command_line_refuses_bad_input_and_writes_nothing(sign, tmp_path, capsys, monkeypatch, change, message):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "sign.npz", contexts=sign.contexts.numpy(), rewards=sign.rewards.squeeze(-1).numpy())
    monkeypatch.setattr(bandit_module, "fit", lambda *a, **k: pytest.fail("a fit ran"))
    given = {"--data": "sign.npz", "--interactions": "40", "--out": "run", **dict(zip(change[::2], change[1::2]))}
    assert main(["bandit", "blr", "--no-progress", *[x for pair in given.items() for x in pair]]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "history.csv").exists() and not list((tmp_path).glob("run/checkpoint-*"))


def test_the_command_line_keeps_the_finished_blocks_on_ctrl_c(sign, tmp_path, capsys, monkeypatch):
    np.savez(tmp_path / "sign.npz", contexts=sign.contexts.numpy(), rewards=sign.rewards.squeeze(-1).numpy())
    real, calls = bandit_module.fit, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(bandit_module, "fit", stopping)
    args = ["bandit", "blr", "--data", str(tmp_path / "sign.npz"), "--agents", "map", "--interactions", "48",
            "--update-every", "32", "--option", "noise=0.1", "--set", "steps=50", "--no-progress",
            "--out", str(tmp_path / "run")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args) == 130
        assert "the same command resumes" in capsys.readouterr().err
        assert list((tmp_path / "run").glob("checkpoint-*")) and not (tmp_path / "run" / "history.csv").exists()
        assert main(args) == 0 and (tmp_path / "run" / "history.csv").exists()
