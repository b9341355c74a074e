"""Acquisition functions (pyro_bdl.posterior.acquisition): each score against its definition on draws whose answer
is known by hand, and the batch pickers."""

from __future__ import annotations

import numpy as np
import pytest

from pyro_bdl.posterior.acquisition import ACQUISITIONS, CLASSIFICATION, pick_batch, score


def _draws(rows):
    """probs (S, n, C) from a list over rows of lists over draws of probability vectors."""
    return np.stack([np.asarray(r, dtype=float) for r in rows], axis=1)


def test_bald_is_the_disagreement_between_confident_draws():
    agree_sure = [[0.9, 0.1]] * 4
    agree_unsure = [[0.5, 0.5]] * 4
    disagree = [[0.9, 0.1], [0.1, 0.9], [0.9, 0.1], [0.1, 0.9]]
    probs = _draws([agree_sure, agree_unsure, disagree])
    bald, entropy = score("bald", probs=probs), score("entropy", probs=probs)
    h = lambda p: -sum(q * np.log(q) for q in p if q > 0)  # noqa: E731
    assert bald[:2] == pytest.approx([0.0, 0.0], abs=1e-12)  # draws that agree: nothing to learn about theta
    assert bald[2] == pytest.approx(np.log(2) - h([0.9, 0.1]))  # H[mean] - mean H
    assert entropy == pytest.approx([h([0.9, 0.1]), np.log(2), np.log(2)])
    # max entropy cannot tell the unsure-but-agreeing row from the disagreeing one; BALD can
    assert entropy[1] == pytest.approx(entropy[2]) and bald[2] > bald[1] + 0.3


def test_variation_ratios_and_mean_std():
    votes = [[0.6, 0.4], [0.6, 0.4], [0.6, 0.4], [0.3, 0.7]]  # three votes for class 0 of four
    probs = _draws([votes])
    assert score("variation-ratios", probs=probs) == pytest.approx([0.25])
    assert score("mean-std", probs=probs) == pytest.approx([np.std([0.6, 0.6, 0.6, 0.3])])


def test_regression_variance_splits_into_its_parts():
    mean = np.array([[0.0, 1.0], [2.0, 1.0]])  # (S=2, n=2): the draws disagree on row 0 only
    variance = np.array([[0.5, 0.5], [1.5, 0.5]])
    assert score("epistemic-variance", mean=mean, variance=variance) == pytest.approx([1.0, 0.0])
    assert score("variance", mean=mean, variance=variance) == pytest.approx([1.0 + 1.0, 0.5])


def test_bad_requests_are_named():
    probs = np.full((2, 3, 2), 0.5)
    with pytest.raises(ValueError, match="unknown acquisition 'bold'"):
        score("bold", probs=probs)
    with pytest.raises(ValueError, match="is for regression"):
        score("variance", probs=probs)
    with pytest.raises(ValueError, match="is for classification"):
        score("bald", mean=np.zeros((2, 3)), variance=np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\(draws, rows, classes\)"):
        score("bald", probs=np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="batch size"):
        pick_batch(np.ones(3), 4)
    with pytest.raises(ValueError, match="unknown batch mode"):
        pick_batch(np.ones(3), 1, mode="greedy")
    assert set(CLASSIFICATION) < set(ACQUISITIONS) and "random" in ACQUISITIONS


def test_top_batch_takes_the_best_and_breaks_ties_at_random():
    assert pick_batch(np.array([0.2, 0.9, 0.1, 0.7]), 2, rng=np.random.default_rng(0)).tolist() == [1, 3]
    firsts = {int(pick_batch(np.ones(4), 1, rng=np.random.default_rng(s))[0]) for s in range(40)}
    assert firsts == {0, 1, 2, 3}  # equal scores: every row can come first (40 tries miss one with prob 4 * .75^40)


def test_stochastic_batch_draws_in_proportion_to_the_score():
    rng = np.random.default_rng(1)
    trials = 4000
    first = np.array([pick_batch(np.array([1.0, 3.0]), 1, mode="stochastic", rng=rng)[0] for _ in range(trials)])
    share = float(np.mean(first == 1))
    assert abs(share - 0.75) < 4 * np.sqrt(0.75 * 0.25 / trials)  # binomial sd of the share, four of them
    both = pick_batch(np.array([1.0, 3.0, 2.0]), 3, mode="stochastic", rng=rng)
    assert sorted(both.tolist()) == [0, 1, 2]  # without replacement
