"""Simulation-based calibration (pyro_bdl.workflows.sbc): the statistics on synthetic ranks (an exact posterior's are
uniform and pass; too narrow, too wide and shifted posteriors are flagged with their shape; the band's false-alarm
rate is its level), the mechanics (workers, checkpoint, deterministic sites, observations passed as None, zoo models
by name, bad input), and, in the slow tests, real fits: NUTS calibrated on the linear models, mean-field SVI and the
Laplace approximation caught where they are wrong."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy.stats import norm

import pyro_bdl
from pyro_bdl.workflows import sbc as sbc_module
from pyro_bdl.workflows.sbc import SBCResult, ecdf_band, rank_of, sbc, uniformity

L = 19  # ranks 0..19 in the synthetic tests: 20 values


def _ranks_of_posterior(n: int, scale: float = 1.0, shift: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """Ranks of theta ~ N(0, 1) among L draws of a posterior of y ~ N(theta, 1) (3 observations), the exact one
    N(m, s^2) with its sd times ``scale`` and its mean moved by ``shift`` posterior sds."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=n)
    y = theta[:, None] + rng.normal(size=(n, 3))
    precision = 1.0 + 3.0
    m, s = y.sum(1) / precision, precision ** -0.5
    draws = m[:, None] + shift * s + scale * s * rng.normal(size=(n, L))
    return pd.DataFrame({"theta": [int(rank_of(np.array([t]), d[:, None], rng)[0]) for t, d in zip(theta, draws)]})


# ---------------------------------------------------------------------------------------------- the statistics


def test_exact_posterior_ranks_are_uniform():
    """An exact posterior sampler: the ranks stay in the band (at alpha = 0.01: a false alarm has chance <= 0.01) and
    their mean is L / 2 within 4 standard errors (sd of a discrete uniform rank / sqrt(n) = 0.18): a rank off by
    one moves the mean by 5.5 of them."""
    ranks = _ranks_of_posterior(1000)
    table = uniformity(ranks, L, alpha=0.01)
    assert table.loc["theta", "in_band"], table
    se = np.sqrt(((L + 1) ** 2 - 1) / 12 / len(ranks))
    assert abs(ranks["theta"].mean() - L / 2) < 4 * se
    assert table.loc["theta", "chi2_p"] > 0.001


@pytest.mark.parametrize("scale, shift, shape", [
    (0.5, 0.0, "over-confident (ranks at both ends: posterior too narrow)"),
    (2.0, 0.0, "under-confident (ranks in the middle: posterior too wide)"),
    (1.0, 1.0, "biased (ranks low: posterior too high)"),
    (1.0, -1.0, "biased (ranks high: posterior too low)"),
])
def test_wrong_posteriors_are_flagged_with_their_shape(scale, shift, shape):
    """300 replications.  Too narrow by half: the truth falls outside the draws' central 90% with chance
    P(|Z| > 0.82) = 0.41 instead of 0.10 (about 124 of 300 against 30 +- 5); too wide by 2, with chance
    P(|Z| > 3.3) = 0.001; shifted by one posterior sd, the mean fractional rank is about Phi(-1 / sqrt(2)) = 0.24
    against 0.5 +- 0.017: each far outside the band at 0.01, and the shape's statistic far beyond the other's."""
    table = uniformity(_ranks_of_posterior(300, scale, shift), L, alpha=0.01)
    assert not table.loc["theta", "in_band"]
    assert table.loc["theta", "shape"] == shape
    assert table.loc["theta", "chi2_p"] < 0.01


def test_the_band_false_alarm_rate_is_its_level():
    """1000 sets of 100 uniform ranks in 0..19: the fraction leaving the 95% band is 0.05 up to the band's own
    simulation error and the counts' discreteness (which make it conservative), within 3 binomial sds
    (sqrt(0.05 * 0.95 / 1000) = 0.007) below and above; the chi-square p-values are uniform likewise."""
    rng = np.random.default_rng(1)
    ranks = pd.DataFrame(rng.integers(0, L + 1, size=(100, 1000)), columns=[f"x[{j}]" for j in range(1000)])
    table = uniformity(ranks, L, alpha=0.05)
    sd = np.sqrt(0.05 * 0.95 / 1000)
    assert 0.05 - 3 * sd - 0.01 < (~table["in_band"]).mean() < 0.05 + 3 * sd
    assert abs((table["chi2_p"] < 0.05).mean() - 0.05) < 3 * sd + 0.01
    # in the band exactly when the simultaneous test's p-value exceeds the level
    assert ((table["ecdf_p"] > 0.05) == table["in_band"]).all()


def test_the_band_contains_the_uniform_cdf_and_narrows_with_n():
    small, large = ecdf_band(50, L), ecdf_band(800, L)
    for band in (small, large):
        assert ((band.lower <= band.n * band.z) & (band.n * band.z <= band.upper)).all()
    assert ((large.upper - large.lower) / 800 < (small.upper - small.lower) / 50).all()


def test_ties_are_broken_at_random():
    """A truth equal to every draw (a discrete site) takes each rank 0..L with chance 1 / (L + 1): over 4000 draws
    the mean is L / 2 within 4 standard errors and both ends occur."""
    rng = np.random.default_rng(2)
    ranks = np.array([rank_of(np.zeros(1), np.zeros((L, 1)), rng)[0] for _ in range(4000)])
    assert ranks.min() == 0 and ranks.max() == L
    assert abs(ranks.mean() - L / 2) < 4 * np.sqrt(((L + 1) ** 2 - 1) / 12 / 4000)


def test_result_plot_caps_its_panels_and_names_unknown_sites():
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(3)
    ranks = pd.DataFrame(rng.integers(0, L + 1, size=(60, 20)), columns=[f"w[{j}]" for j in range(19)] + ["b"])
    result = SBCResult(ranks, L, "demo", "nuts")
    figure = result.plot(max_panels=4)
    assert sum(axis.get_visible() for axis in figure.axes) == 4
    assert "showing 4 of 20 entries" in figure._suptitle.get_text()
    plt.close(figure)
    figure = result.plot(sites="b")
    assert len(figure.axes) == 1
    plt.close(figure)
    with pytest.raises(ValueError, match="unknown site 'v'"):
        result.plot(sites=["v"])
    figure, axes = plt.subplots(1, 2)
    assert result.plot(sites=["w[0]", "b"], ax=axes) is figure  # into a caller's Axes
    with pytest.raises(ValueError, match="ax holds 2 Axes for 20 panels"):
        result.plot(ax=axes, max_panels=20)
    plt.close(figure)
    assert "calibrated" in result.summary() and list(result.table()["site"].unique()) == ["w", "b"]


# ------------------------------------------------------------------------------------------------ the mechanics


def tiny(n=3, y=None):
    """A tiny program with a deterministic site in a plate (not ranked) and its observations possibly None."""
    mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    with pyro.plate("data", n):
        shifted = pyro.deterministic("shifted", mu + torch.zeros(n))
        pyro.sample("y", dist.Normal(shifted, 1.0), obs=y)


TINY = dict(draws=9, samples=150, warmup=100, progress=False)


@pytest.fixture(scope="module")
def tiny_run():
    """Three replications of the tiny program under NUTS, in one process (computed once for the module)."""
    return sbc(tiny, {"n": 3, "y": None}, "nuts", n=3, **TINY)


def test_sbc_ranks_the_latent_sites_only(tiny_run):
    assert list(tiny_run.ranks.columns) == ["mu"]  # not the deterministic site, not the observations
    assert tiny_run.ranks.shape == (3, 1) and tiny_run.max_rank == 9
    assert tiny_run.ranks["mu"].between(0, 9).all()
    assert (tiny_run.fits["seed"] == [0, 1, 2]).all() and (tiny_run.fits["fit_draws"] >= 300).all()


def test_two_workers_give_the_same_ranks(tiny_run):
    """Replication i draws everything from seed + i: two processes give exactly the ranks one does."""
    parallel = sbc(tiny, {"n": 3, "y": None}, "nuts", n=3, workers=2, **TINY)
    pd.testing.assert_frame_equal(parallel.ranks, tiny_run.ranks)
    pd.testing.assert_frame_equal(parallel.fits.drop(columns="warnings"), tiny_run.fits.drop(columns="warnings"))


def test_a_checkpoint_keeps_finished_replications_and_resumes(tiny_run, tmp_path, monkeypatch):
    """A run of 2 replications kept in a checkpoint, then one of 3 on the same file: only replication 2 is
    computed, and the ranks are those of an uninterrupted run; a line cut short by an interruption is dropped (and
    the next record starts a line of its own: a third run computes nothing); the file of another run (another seed)
    is refused."""
    path = tmp_path / "sbc.jsonl"
    sbc(tiny, {"n": 3, "y": None}, "nuts", n=2, checkpoint=path, **TINY)
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[1])["replication"] in (0, 1)
    path.write_text(path.read_text() + '{"replication": 2, "ran')  # interrupted while writing replication 2
    computed = []
    real = sbc_module._replicate
    monkeypatch.setattr(sbc_module, "_replicate", lambda problem, i: computed.append(i) or real(problem, i))
    resumed = sbc(tiny, {"n": 3, "y": None}, "nuts", n=3, checkpoint=path, **TINY)
    assert computed == [2]
    pd.testing.assert_frame_equal(resumed.ranks, tiny_run.ranks)
    again = sbc(tiny, {"n": 3, "y": None}, "nuts", n=3, checkpoint=path, **TINY)  # every replication kept now
    assert computed == [2]
    pd.testing.assert_frame_equal(again.ranks, tiny_run.ranks)
    with pytest.raises(ValueError, match="holds another run"):
        sbc(tiny, {"n": 3, "y": None}, "nuts", n=3, checkpoint=path, seed=1, **TINY)


def test_a_zoo_model_by_name_with_its_target_as_data():
    result = sbc("coin", {"y": torch.zeros(5)}, "nuts", n=2, draws=9, samples=150, warmup=100, progress=False)
    assert list(result.ranks.columns) == ["pi"] and result.model == "coin"


def test_bad_input_is_refused_with_a_clear_error():
    data = {"n": 3, "y": None}
    with pytest.raises(ValueError, match="n .replications. must be a whole number >= 1"):
        sbc(tiny, data, "nuts", n=0)
    with pytest.raises(ValueError, match="draws .posterior draws per replication. must be"):
        sbc(tiny, data, "nuts", n=2, draws=0)
    with pytest.raises(ValueError, match="unknown inference method 'nutz'"):
        sbc(tiny, data, "nutz", n=2)
    with pytest.raises(ValueError, match="gives a point estimate"):
        sbc(tiny, data, "map", n=2)
    with pytest.raises(ValueError, match="unknown setting 'sample'"):
        sbc(tiny, data, "nuts", n=2, sample=10)

    def no_latent(y=None):
        with pyro.plate("data", 3):
            pyro.sample("y", dist.Normal(0.0, 1.0), obs=y)

    with pytest.raises(ValueError, match="no latent sample site"):
        sbc(no_latent, {"y": None}, "nuts", n=2)

    def no_data():
        pyro.sample("mu", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="no observed sample site"):
        sbc(no_data, None, "nuts", n=2)

    def improper(y=None):
        mu = pyro.sample("mu", dist.ImproperUniform(dist.constraints.real, (), ()))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with pytest.raises(ValueError, match="prior cannot be sampled"):
        sbc(improper, {"y": torch.tensor(0.0)}, "nuts", n=2)

    def with_factor(y=None):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.factor("penalty", -mu ** 2)
        pyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    with pytest.raises(ValueError, match="pyro.factor"):
        sbc(with_factor, {"y": torch.tensor(0.0)}, "nuts", n=2)
    with pytest.raises(ValueError, match="standardised data"):
        sbc("bnn-regressor", None, "nuts", n=2)


# ------------------------------------------------------------------------------------------------ the slow tests


#: The power of the calibrated cases' check, for their docstrings: simulating it with L = 99 and 100 replications at
#: 0.01 / 3, a posterior 30% too narrow leaves the band in 72% of runs, 40% too narrow in 98%, one shifted by half its
#: sd in 91%, 50% too wide in 50%.
NUTS = dict(n=100, samples=250, warmup=150, progress=False)


@pytest.mark.slow
def test_nuts_is_calibrated_on_blr():
    """blr, known noise 0.5, 10 rows of 2 inputs (entries w[0], w[1], b), 100 replications under NUTS: every entry
    stays in its band at 0.01 / entries (Bonferroni: a calibrated method fails with chance <= 0.01).  The check has
    teeth at this n and level (the comment on NUTS: a posterior 30% too narrow is caught in 72% of runs)."""
    X = torch.randn(10, 2, generator=torch.Generator().manual_seed(0))
    result = sbc("blr", {"X": X, "y": None}, "nuts", options={"noise": 0.5}, **NUTS)
    assert list(result.ranks.columns) == ["w[0]", "w[1]", "b"]
    assert result.calibrated(alpha=0.01), result.summary()


@pytest.mark.slow
def test_nuts_is_calibrated_on_the_coin():
    """The Beta(1, 1) coin, 10 tosses, 100 replications under NUTS: pi stays in its band at 0.01 (as for blr)."""
    result = sbc("coin", {"y": torch.zeros(10)}, "nuts", **NUTS)
    assert result.calibrated(alpha=0.01), result.summary()


def _correlated_inputs() -> torch.Tensor:
    x = torch.randn(10, 2, generator=torch.Generator().manual_seed(1))
    x[:, 1] = x[:, 0] + 0.1 * x[:, 1]
    return x


@pytest.mark.slow
def test_mean_field_svi_is_caught_over_confident_on_a_correlated_posterior():
    """blr on two nearly collinear inputs (posterior correlation of w about -0.97): the mean-field optimum's
    marginal sds are 1 / sqrt(precision_ii), a quarter of the true sds (computed from the exact posterior of these
    inputs).  The truth then falls outside the draws' central 90% with chance P(|Z| > 0.41) = 0.68, not 0.10;
    simulating the test on the exact and mean-field posteriors, 40 replications leave the band at 0.01 / 3 in 100%
    of 200 runs (20 replications: 99%)."""
    result = sbc("blr", {"X": _correlated_inputs(), "y": None}, "svi-meanfield", n=40, options={"noise": 0.5},
                 steps=400, lr=0.05, jit=True, progress=False)
    table = result.table(alpha=0.01 / 3)
    for entry in ("w[0]", "w[1]"):
        assert not table.loc[entry, "in_band"], table
        assert table.loc[entry, "shape"] == "over-confident (ranks at both ends: posterior too narrow)"
        assert table.loc[entry, "spread"] > 2.0  # (u - 1/2)^2 over its uniform mean: ranks at the ends
    assert not result.calibrated(alpha=0.01)


def poisson_rate(y=None):
    rate = pyro.sample("rate", dist.Gamma(0.5, 1.0))
    with pyro.plate("counts", 1):
        pyro.sample("y", dist.Poisson(rate), obs=y)


@pytest.mark.slow
def test_laplace_is_caught_on_a_skewed_posterior():
    """A Poisson rate, Gamma(0.5, 1) prior, one count: the posterior is Gamma(0.5 + y, 2), whose log (Pyro's
    unconstrained coordinate) is skewed left; the Laplace approximation there is N(log((0.5 + y) / 2), 1 / (0.5 + y)),
    too high and too narrow (for y = 0, in 7 of 10 prior draws: sd 1.41 against 2.22, the mode 1.3 above the mean).
    Over the prior, 21% of fractional ranks fall below 0.05 and their mean is 0.36 (200000 draws of the exact
    computation); simulating the test, 100 replications leave the band at 0.01 in 100% of 200 runs (50: 94%)."""
    result = sbc(poisson_rate, {"y": None}, "laplace", n=100, steps=200, lr=0.1, progress=False)
    row = result.table(alpha=0.01).loc["rate"]
    assert not row["in_band"], result.summary()
    assert row["shape"] == "biased (ranks low: posterior too high)"
    # the exact shape predicted: mean fractional rank 0.36 (sd of the mean of 100 about 0.03)
    assert abs(row["mean_rank"] - 0.358) < 3 * np.sqrt(1 / 12 / 100)


def test_the_power_computation_of_the_laplace_test_holds():
    """The numbers in test_laplace_is_caught_on_a_skewed_posterior's docstring: the fraction of fractional ranks
    below 0.05 and their mean under the exact Laplace computation (20000 prior draws: sd 0.003 and 0.002)."""
    rng = np.random.default_rng(0)
    rate = rng.gamma(0.5, 1.0, size=20000)
    a = 0.5 + rng.poisson(rate)
    u = norm.cdf((np.log(rate) - np.log(a / 2)) * np.sqrt(a))
    assert abs((u < 0.05).mean() - 0.213) < 0.01 and abs(u.mean() - 0.358) < 0.007
    assert pyro_bdl.sbc is sbc
