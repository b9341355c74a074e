"""Active learning (pyro_bdl.workflows.active_learning): the loop's bookkeeping, that the posterior chooses the rows,
resuming after an interruption, the oracle, bad settings, and the command line."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

import pyro_bdl
from pyro_bdl.cli import main
from pyro_bdl.data.embedded import digits_split
from pyro_bdl.data.table import Dataset
from pyro_bdl.workflows.active_learning import active_learning, compare_acquisitions, labels_to_reach

#: a fast method with posterior draws on blr: importance sampling from the Laplace approximation, which is exact for
#: its Gaussian posterior
FAST = {"inference": "importance", "samples": 300, "progress": False, "options": {"noise": 0.3}}


@pytest.fixture(scope="module")
def line():
    """A 1-D linear regression pool of 120 rows (x uniform on [-1, 1]) and 60 test rows."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(180, 1, generator=g) * 2 - 1
    y = 1.5 * x[:, 0] - 0.5 + 0.3 * torch.randn(180, generator=g)
    ds = lambda rows, name: Dataset(name, x[rows], y[rows], ["x"], "y")  # noqa: E731
    return ds(slice(0, 120), "pool"), ds(slice(120, 180), "test")


@pytest.mark.slow
def test_the_loop_labels_distinct_rows_and_judges_every_round(line):
    pool, test = line
    run = active_learning("blr", pool, acquisition="variance", test=test, initial=4, batch=3, rounds=3, **FAST)
    assert run.history["labelled"].tolist() == [4, 7, 10, 13]
    assert run.history["round"].tolist() == [0, 1, 2, 3]
    assert {"rmse", "test_ll", "fit_seconds", "warnings"} <= set(run.history)
    assert len(set(run.order.tolist())) == 13
    assert np.allclose(run.labels, pool.y[torch.as_tensor(run.order)].numpy())  # the pool's hidden column, revealed
    assert run.history["rmse"].iloc[-1] < 0.45  # 13 rows pin a line: RMSE near the noise sd 0.3
    assert labels_to_reach(run.history, "rmse", 10.0) == 4 and labels_to_reach(run.history, "rmse", 0.0) is None


@pytest.mark.slow
def test_max_variance_asks_for_the_ends_of_a_line(line):
    """For a line, the predictive variance grows with the distance from the labelled inputs' mean, so max variance
    labels the ends of [-1, 1]; random labels anywhere.  Five runs each: the acquired |x| differ by far more than
    their spread (mean |x| of a uniform draw: 0.5, sd 0.29 / sqrt(45) for 45 rows)."""
    pool, test = line
    far = {}
    for acquisition in ("variance", "random"):
        xs = [pool.X[torch.as_tensor(active_learning("blr", pool, acquisition=acquisition, initial=3, batch=3,
                                                     rounds=3, seed=s, **FAST).order[3:]), 0].abs().mean()
              for s in range(5)]
        far[acquisition] = float(np.mean(xs))
    assert far["variance"] > 0.85 and abs(far["random"] - 0.5) < 4 * 0.29 / np.sqrt(45)


@pytest.mark.slow
def test_an_interrupted_run_resumes_where_it_stopped(line, tmp_path):
    """The oracle raises Ctrl-C on its third call (round 2's batch): rounds 0 and 1 are kept; the rerun finishes
    with the same rows and the same history as a run never interrupted."""
    pool, test = line
    unlabelled = Dataset("pool", pool.X, None, ["x"], None)
    calls = []

    def oracle(rows):
        calls.append(list(rows))
        if len(calls) == 3 and stop[0]:
            raise KeyboardInterrupt
        return pool.y[torch.as_tensor(rows)].numpy()

    stop = [True]
    checkpoint = tmp_path / "run.jsonl"
    kwargs = dict(acquisition="variance", test=test, initial=4, batch=3, rounds=3, oracle=oracle, **FAST)
    with pytest.raises(KeyboardInterrupt):
        active_learning("blr", unlabelled, checkpoint=checkpoint, **kwargs)
    assert checkpoint.exists() and len(calls) == 3
    stop[0], calls[:] = False, []
    resumed = active_learning("blr", unlabelled, checkpoint=checkpoint, **kwargs)
    assert len(calls) == 2 and not checkpoint.exists()  # the initial rows and round 0's batch were not asked again
    calls[:] = []
    whole = active_learning("blr", unlabelled, **kwargs)
    assert whole.order.tolist() == resumed.order.tolist()
    pd.testing.assert_frame_equal(whole.history.drop(columns=["fit_seconds", "score_seconds"]),
                                  resumed.history.drop(columns=["fit_seconds", "score_seconds"]))


def test_a_checkpoint_of_another_run_is_refused(line, tmp_path):
    pool, test = line
    checkpoint = tmp_path / "run.jsonl"
    checkpoint.write_text('{"run": "active-learning", "fingerprint": "something else"}\n')
    with pytest.raises(ValueError, match="holds another run"):
        active_learning("blr", pool, acquisition="random", initial=2, batch=1, rounds=1, checkpoint=checkpoint, **FAST)
    checkpoint.write_text('{"run": "sbc", "fingerprint": "something else"}\n')  # another workflow's log
    with pytest.raises(ValueError, match="holds no active-learning run log"):
        active_learning("blr", pool, acquisition="random", initial=2, batch=1, rounds=1, checkpoint=checkpoint, **FAST)


def test_a_classifier_starts_balanced_and_scores_by_bald():
    pool, test = digits_split()
    pool = Dataset("pool", pool.X[:400], pool.y[:400], pool.feature_names, pool.target_name)
    run = active_learning("bnn-classifier", pool, "mc-dropout", "bald", test=test, initial=20, batch=5, rounds=1,
                          progress=False, steps=200, samples=20)
    first = pool.y[torch.as_tensor(run.order[:20])].long()
    assert torch.bincount(first, minlength=10).tolist() == [2] * 10  # Gal et al.'s start: two of each class
    assert run.history["labelled"].tolist() == [20, 25]
    assert 0.1 < run.history["accuracy"].iloc[0] <= 1.0 and {"ece", "test_ll"} <= set(run.history)


@pytest.mark.parametrize("change, message", [
    ({"acquisition": "bold"}, "unknown acquisition 'bold'"),
    ({"acquisition": "bald"}, "does not suit model 'blr'"),
    ({"inference": "map"}, "gives a single point"),
    ({"rounds": 100}, "more than the pool's 120"),
    ({"batch": 0}, "batch must be a whole number >= 1"),
    ({"batch_mode": "greedy"}, "unknown batch mode"),
    ({"initial": [1, 1, 2]}, "distinct pool positions"),
])
def test_bad_settings_are_named_before_any_fit(line, change, message):
    pool, _ = line
    kwargs = {**FAST, "acquisition": "variance", "initial": 4, "batch": 3, "rounds": 3, **change}
    with pytest.raises(ValueError, match=message):
        active_learning("blr", pool, **kwargs)


def test_a_pool_without_labels_needs_an_oracle_and_the_oracle_must_answer(line):
    pool, _ = line
    unlabelled = Dataset("pool", pool.X, None, ["x"], None)
    with pytest.raises(ValueError, match="oracle="):
        active_learning("blr", unlabelled, acquisition="random", initial=2, batch=1, rounds=1, **FAST)
    with pytest.raises(ValueError, match="must return 2 finite labels"):
        active_learning("blr", unlabelled, acquisition="random", initial=2, batch=1, rounds=1,
                        oracle=lambda rows: [1.0], **FAST)


@pytest.mark.slow
def test_compare_acquisitions_stacks_the_runs(line):
    pool, test = line
    frame = compare_acquisitions("blr", pool, "importance", ("variance", "random"), seeds=(0, 1), test=test,
                                 initial=3, batch=2, rounds=1, progress=False, samples=300, options={"noise": 0.3})
    assert frame.groupby(["acquisition", "seed"]).size().to_dict() == {
        ("random", 0): 2, ("random", 1): 2, ("variance", 0): 2, ("variance", 1): 2}
    ax = pyro_bdl.workflows.active_learning.plot_learning_curves(frame, "rmse")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["variance (2 seeds)", "random (2 seeds)"]
    side_by_side = compare_acquisitions("blr", pool, "importance", ("variance", "random"), seeds=(0, 1), test=test,
                                        initial=3, batch=2, rounds=1, progress=False, samples=300,
                                        options={"noise": 0.3}, workers=2)  # the runs in two processes: same frame
    timing = ["fit_seconds", "score_seconds"]
    pd.testing.assert_frame_equal(frame.drop(columns=timing), side_by_side.drop(columns=timing))


@pytest.mark.slow
def test_the_command_line_writes_the_history_and_the_curve(tmp_path, capsys):
    out = tmp_path / "al"
    args = ["active-learn", "blr", "--data", "linear", "-i", "importance", "--initial", "4", "--batch", "2",
            "--rounds", "2", "--option", "noise=0.5", "--set", "samples=300", "--out",
            str(out), "--no-progress"]
    assert main(args) == 0
    history = pd.read_csv(out / "history.csv")
    assert sorted(history["acquisition"].unique()) == ["random", "variance"] and len(history) == 6
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert sorted(p.name for p in out.iterdir()) == ["history.csv", "learning_curve.png"]  # no checkpoint left
    assert main(args) == 2 and "already holds an active-learning run" in capsys.readouterr().err


def test_the_command_line_refuses_bad_settings_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "al"
    code = main(["active-learn", "blr", "--data", "linear", "-i", "importance", "--acquisition", "variance,bold",
                 "--out", str(out), "--no-progress"])
    assert code == 2 and "unknown acquisition 'bold'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_a_warm_start_begins_where_the_last_round_ended(line, monkeypatch):
    """Each warm round's fit is started (Pyro's init_to_value) at the last round's posterior mean; a cold one is
    left to the method's own start."""
    import pyro_bdl.workflows.active_learning as module

    pool, _ = line
    seen = []

    def recording_fit(*args, **kwargs):
        result = fit(*args, **kwargs)
        init = kwargs.get("init_loc_fn")
        start = None if init is None else init({"name": "w", "fn": None, "is_observed": False})
        seen.append((start, result.posterior_mean("w")))
        return result

    fit = module.fit
    monkeypatch.setattr(module, "fit", recording_fit)
    settings = dict(initial=10, batch=10, rounds=2, progress=False, steps=300, lr=0.05, options={"noise": 0.3})
    active_learning("blr", pool, "laplace", "random", warm_start=False, **settings)
    assert [start for start, _ in seen] == [None, None, None]
    seen.clear()
    active_learning("blr", pool, "laplace", "random", warm_start=True, **settings)
    assert seen[0][0] is None
    for (start, _), (_, previous) in zip(seen[1:], seen[:-1]):
        assert torch.allclose(start.double(), previous.double())


def _draw_methods(model: str) -> list[str]:
    """The methods of ``model`` (from the registry) whose predictive has draws: those active learning scores with."""
    spec = pyro_bdl.get_model(model)
    return [name for name in spec.methods if spec.runs_as(name) == name and pyro_bdl.METHODS[name].family != "point"]


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if pyro_bdl.METHODS[m].family == "mcmc" else m
                                    for m in _draw_methods("bnn-classifier")])  # a sampler on a net: minutes
def test_every_method_with_draws_scores_the_pool(method):
    """One BALD round with each method's quick settings: the pool is scored from its draws and a batch acquired."""
    pool, test = digits_split()
    small = Dataset("pool", pool.X[:60], pool.y[:60], pool.feature_names, pool.target_name)
    with warnings.catch_warnings():  # quick settings: a short run is what is asked for
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        run = active_learning("bnn-classifier", small, method, "bald", initial=10, batch=5, rounds=1, progress=False,
                              options={"hidden": (8,)}, **pyro_bdl.METHODS[method].quick)
    assert run.history["labelled"].tolist() == [10, 15] and len(set(run.order.tolist())) == 15


def test_a_users_own_program_over_x_and_y(line):
    """A Pyro program of one's own, taking X and y, goes through the loop: fitted on the labelled rows, judged on
    the test rows and scored on the pool by the same predictive (a Dataset bound as fit binds it)."""
    import pyro
    import pyro.distributions as dist

    def own_line(X, y=None):
        w = pyro.sample("w", dist.Normal(0.0, 2.0))
        b = pyro.sample("b", dist.Normal(0.0, 2.0))
        with pyro.plate("data", X.shape[0]):
            return pyro.sample("y", dist.Normal(X[:, 0] * w + b, 0.3), obs=y)

    pool, test = line
    run = active_learning(own_line, pool, "importance", "variance", test=test, initial=4, batch=2, rounds=2,
                          progress=False, samples=300)
    assert run.history["labelled"].tolist() == [4, 6, 8] and run.history["rmse"].iloc[-1] < 0.45
    assert pool.X[torch.as_tensor(run.order[4:]), 0].abs().min() > 0.8  # a line's variance is largest at its ends


def test_a_gp_under_map_chooses_by_its_latent_variance(line):
    """The exact GP fitted by map has one draw: its epistemic variance is the latent variance of its predictive, not
    the spread of draws (none).  Labelled at four rows with x < -0.5 and its lengthscale fixed at the pool's width
    (its variance then grows with the distance all the way), it asks next for the rows farthest from them: every row
    of the batch at x > 0.5 (23 % of the pool lies there; by chance all five would be 1 in 1,400)."""
    pool, test = line
    left = np.flatnonzero(pool.X[:, 0].numpy() < -0.5)[:4].tolist()
    run = active_learning("gp", pool, inference="map", acquisition="epistemic-variance", initial=left, batch=5,
                          rounds=1, steps=200, lr=0.05, progress=False, options={"fixed": "lengthscale=1"})
    asked = pool.X[torch.as_tensor(run.order[4:]), 0]
    assert len(asked) == 5 and bool((asked > 0.5).all()), asked
