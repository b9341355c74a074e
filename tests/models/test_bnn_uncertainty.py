"""The uncertainty claims of issue 3 for the networks, on the embedded ``sine`` and ``digits`` data.

Every fit runs with the zoo's defaults (no options, no settings) and a fixed seed, so these are also
the checks that the defaults are good.  Thresholds are the issue's (gap sd >= 2x the in-data sd; test
accuracy >= 95 %, ECE < 0.05; OOD AUROC above the MAP net's).  Measured values (seed 0, this machine)
are noted next to each assertion so the margins are visible.

Slow (``pytest -m slow``): the checks of the defaults on full-length fits (the ensemble's gap, the digits'
accuracy, calibration and OOD, the one-hidden-layer bound), and NUTS on the 1-50-1 network, the gold standard that
SVI is compared with; ``make test`` keeps the point estimates' check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pyro_bdl
from pyro_bdl.data.embedded import SINE_GAP, digits_ood, digits_split
from pyro_bdl.models.bnn import IN_BETWEEN
from pyro_bdl.posterior.evaluation import classification_report
from pyro_bdl.posterior.uncertainty import auroc
from pyro_bdl.bench.gap import gap_report


def sine_fit(inference: str, **settings):
    return pyro_bdl.fit("bnn-regressor", "sine", inference=inference, progress=False, seed=0, **settings)


# --------------------------------------------------------------------------- sine: the gap

@pytest.mark.slow  # five members at the defaults: 40-55 s
def test_ensemble_is_uncertain_in_the_gap():
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # at its default steps the members' loss still falls by more than its noise
        result = sine_fit("ensemble")
    w = result.samples["layer1.weight"]
    assert w.shape[:2] == (5, 1) and not torch.allclose(w[0], w[1])  # independent starts, distinct members
    check = gap_report(result).check
    assert check.rmse < 0.05  # measured 0.016
    assert check.ratio >= 2.0  # measured 5.00 (benchmarks/RESULTS.md)


@pytest.mark.slow
@pytest.mark.parametrize("inference", ["map", "mle"])
def test_point_estimates_are_overconfident_in_the_gap(inference):
    """A point estimate has only the noise: the same sd in the gap as in the data, while its error there
    is many of its own sds (the ensemble's error in the gap is within its sds)."""
    with pytest.warns(pyro_bdl.ConvergenceWarning, match="not settled"):  # at the default steps the loss still falls by more than its noise
        report = gap_report(sine_fit(inference))
    assert np.allclose(report.table["epistemic_sd"], 0.0)
    assert report.check.ratio < 1.2  # the noise sd, the same everywhere
    assert report.check.gap_z > 2.0  # measured 7.7 (map), 7.0 (mle); the ensemble's is 0.6


@pytest.mark.slow  # 10-15 s a method
@pytest.mark.parametrize("inference", ["svi", "mc-dropout", "concrete-dropout"])
def test_one_hidden_layer_mean_field_and_dropout_cannot_raise_the_gap_variance(inference):
    """Foong et al. (2020, Thm 1): for a single-hidden-layer ReLU net under a mean-field Gaussian or an
    MC dropout posterior, the variance of f at a point between two inputs is at most the sum of the
    variances at those inputs.  The fitted draws obey it (so their gap sd is at most sqrt(2) x the
    edge sd, and the issue's 2x gap criterion is out of reach for these two methods at depth 1)."""
    result = sine_fit(inference)
    f = result.predict(torch.tensor([[SINE_GAP[0]], [0.0], [SINE_GAP[1]]]))["epistemic_sd"].to_numpy() ** 2
    assert f[1] <= f[0] + f[2]
    assert gap_report(result).check.ratio < 2.0


@pytest.mark.slow
@pytest.mark.filterwarnings("default::pyro_bdl.ConvergenceWarning")  # slow, not yet run with the warning as an error: shown, not hidden
@pytest.mark.parametrize("inference", sorted(IN_BETWEEN))
def test_in_between_settings_are_uncertain_in_the_gap(inference):
    """The settings ``describe`` recommends for in-between uncertainty, on ``sine``: the gap sd is at least
    twice the in-data sd, the predictive mean follows the curve where the data lie, and the truth in the gap
    lies within the widened band (on a family of other gap problems: tests/data/test_gap_problems.py)."""
    entry = IN_BETWEEN[inference]
    check = gap_report(sine_fit(inference, options=entry["options"], **entry["settings"])).check
    # measured (seed 0, ensemble): gap ratio 5.00, RMSE 0.017 (benchmarks/RESULTS.md)
    assert check.ratio >= 2.0
    assert check.rmse < 0.1
    assert check.gap_z < 2.0


# --------------------------------------------------------------------------- digits: accuracy, calibration, OOD

@pytest.fixture(scope="module")
def digits():
    train, test = digits_split()
    return train, test, digits_ood(test, "noise")


@pytest.fixture(scope="module")
def map_auroc(digits):
    train, test, noise = digits
    fit = pyro_bdl.fit("bnn-classifier", train, inference="map", progress=False, seed=0)
    return auroc(fit.predict(test)["entropy"], fit.predict(noise)["entropy"])  # measured 0.45


# measured (acc, ECE, AUROC vs noise images): svi .969/.039/.98, mc-dropout .980/.024/.73, ensemble .978/.014/.88,
# concrete-dropout .982/.015/.68 (benchmarks/results/dropout_variants.md)
@pytest.mark.slow  # the defaults on the digits: 15-45 s a method
@pytest.mark.parametrize("inference", ["svi", "mc-dropout", "ensemble", "concrete-dropout"])
def test_digits_accuracy_calibration_and_ood(inference, digits, map_auroc):
    train, test, noise = digits
    fit = pyro_bdl.fit("bnn-classifier", train, inference=inference, progress=False, seed=0)
    _, row = classification_report(fit, test, {"noise": noise})
    assert row["accuracy"] >= 0.95
    assert row["ECE"] < 0.05
    assert row["AUROC noise (entropy)"] > map_auroc


# --------------------------------------------------------------------------- slow: NUTS, the gold standard

#: The samplers' run on the 1-50-1 net: one long chain, compiled potential.
SAMPLER_RUN = {"samples": 300, "warmup": 400, "chains": 1, "jit": True}


def sine_100() -> pyro_bdl.Dataset:
    """100 of the sine points (both intervals: the rows are in random order), the issue's size for NUTS."""
    data = pyro_bdl.load("sine")
    return pyro_bdl.Dataset("sine-100", data.X[:100], data.y[:100], data.feature_names, data.target_name)


@pytest.mark.slow  # about 19 minutes
@pytest.mark.filterwarnings("default::pyro_bdl.ConvergenceWarning")  # slow, not yet run with the warning as an error: shown, not hidden
def test_hmc_is_uncertain_in_the_gap():
    """HMC (trajectory length pi/2, adapted step size and diagonal mass) on the same net and points as NUTS
    below: the gap sd at least twice the in-data sd, the mean on the curve where the data are."""
    check = gap_report(pyro_bdl.fit("bnn-regressor", sine_100(), inference="hmc", progress=False, seed=0,
                                    **SAMPLER_RUN)).check
    assert check.ratio >= 2.0  # measured 4.59
    assert check.rmse < 0.05  # measured 0.012


@pytest.mark.slow
@pytest.mark.filterwarnings("default::pyro_bdl.ConvergenceWarning")  # slow, not yet run with the warning as an error: shown, not hidden
def test_nuts_gold_standard_on_the_small_network():
    """NUTS on the 1-50-1 net with 100 of the sine points (the issue's size), one long chain (12-14 min),
    fitted once for both of its checks (one test, so that no two test workers fit it):

    * NUTS is uncertain in the gap (gap sd >= 2x the in-data sd);
    * SVI agrees with it: SVI's predictive mean lies within 2 NUTS predictive sds of NUTS's where the
      data are, and its predictive sd is nowhere more than 3x narrower than NUTS's (the issue's criterion).
    """
    small = sine_100()
    nuts = pyro_bdl.fit("bnn-regressor", small, inference="nuts", progress=False, seed=0, **SAMPLER_RUN)
    gold = gap_report(nuts)
    assert gold.check.ratio >= 2.0, "NUTS is not uncertain in the gap"

    svi = pyro_bdl.fit("bnn-regressor", small, inference="svi", progress=False, seed=0)
    a, b = gold.table, gap_report(svi).table
    gap = np.abs(a["mean"].to_numpy() - b["mean"].to_numpy()) / a["sd"].to_numpy()
    assert np.mean(gap[gold.inside]) < 2.0, "SVI's mean is off NUTS's where the data are"
    assert np.all(b["sd"].to_numpy() > a["sd"].to_numpy() / 3), "SVI's sd is more than 3x too narrow"
