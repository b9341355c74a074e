r"""Acquisition functions: how much a label at each unlabelled row is worth, read off the posterior's draws.

Classification, from the class probabilities of :math:`S` posterior draws, ``probs`` (S, n, C), with the
predictive :math:`\bar p_{ic} = \frac1S \sum_s p_{sic}` (Gal, Islam & Ghahramani 2017, Sec. 3):

* ``entropy`` (max entropy): :math:`\mathbb H[y_i \mid x_i, D] = -\sum_c \bar p_{ic} \log \bar p_{ic}`, the total
  uncertainty, aleatoric and epistemic together;
* ``bald`` (Houlsby et al. 2011): the mutual information between the label and the parameters,
  :math:`\mathbb I[y_i; \theta \mid x_i, D] = \mathbb H[\bar p_i] - \frac1S \sum_s \mathbb H[p_{si}]`: high where
  the draws disagree with each other, each confident (epistemic uncertainty only);
* ``variation-ratios``: :math:`1 - \max_c \bar f_{ic}`, with :math:`\bar f_{ic}` the fraction of draws whose most
  probable class is :math:`c`;
* ``mean-std``: the class-probability sd over draws, averaged over classes, :math:`\frac1C \sum_c
  \operatorname{sd}_s(p_{sic})` (Kampffmeyer et al. 2016).

Regression, from each draw's predictive mean ``mean`` (S, n) and variance ``variance`` (S, n):

* ``variance`` (max predictive variance): :math:`\operatorname{Var}_s[\mu_{si}] + \frac1S\sum_s\sigma^2_{si}`,
  total; ``epistemic-variance``: :math:`\operatorname{Var}_s[\mu_{si}]`, the parameters' share alone.

``random`` scores every row alike: the baseline every acquisition is judged against.

Picking a batch of ``k`` by the top ``k`` scores (``top``, Gal et al.'s choice) takes near-duplicates together: ten
copies of the most informative image score the same, and the second copy teaches nothing once the first is
labelled.  ``stochastic`` (Kirsch, Farquhar et al. 2023, power acquisition) samples the batch without replacement
with probability proportional to :math:`\text{score}^\beta` (by the Gumbel-top-k trick): as cheap as the top ``k``,
it spreads the batch over the high-scoring region, which they found as good as BatchBALD at a fraction of its cost.

Example
-------
>>> import numpy as np
>>> confident_disagreeing = np.array([[[0.99, 0.01]], [[0.01, 0.99]]])   # two draws, one row, two classes
>>> unsure_agreeing = np.array([[[0.5, 0.5]], [[0.5, 0.5]]])
>>> probs = np.concatenate([confident_disagreeing, unsure_agreeing], axis=1)   # (S=2, n=2, C=2)
>>> score("bald", probs=probs).round(3), score("entropy", probs=probs).round(3)
(array([0.637, 0.   ]), array([0.693, 0.693]))
>>> pick_batch(np.array([0.1, 0.9, 0.5, 0.8]), 2, mode="top", rng=np.random.default_rng(0))
array([1, 3])
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLASSIFICATION", "REGRESSION", "ACQUISITIONS", "BATCH_MODES", "score", "pick_batch"]

#: Probabilities below this are taken as this inside logarithms (an exact 0 times log 0 is 0).
_TINY = 1e-12


def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy over the last axis."""
    return -(p * np.log(np.clip(p, _TINY, 1.0))).sum(-1)


def _entropy_of_mean(probs):
    return _entropy(probs.mean(0))


def _bald(probs):
    # H[mean] - mean H >= 0 by concavity; clipped at 0 against rounding
    return np.maximum(_entropy(probs.mean(0)) - _entropy(probs).mean(0), 0.0)


def _variation_ratios(probs):
    votes = probs.argmax(-1)  # (S, n)
    classes = probs.shape[-1]
    counts = np.stack([(votes == c).sum(0) for c in range(classes)], axis=-1)  # (n, C)
    return 1.0 - counts.max(-1) / probs.shape[0]


def _mean_std(probs):
    return probs.std(0).mean(-1)


def _total_variance(mean, variance, latent=None):
    return mean.var(0) + variance.mean(0)


def _epistemic_variance(mean, variance, latent=None):
    # the spread of the draws' means, and the part of each draw's variance that is uncertainty about the function
    # (a Gaussian process's latent variance: under map its one draw holds all of it)
    return mean.var(0) + (0.0 if latent is None else latent.mean(0))


#: Classification acquisitions: name -> function of ``probs`` (S, n, C) giving scores (n,).
CLASSIFICATION = {"bald": _bald, "entropy": _entropy_of_mean, "variation-ratios": _variation_ratios,
                  "mean-std": _mean_std}
#: Regression acquisitions: name -> function of ``mean``, ``variance`` (S, n) and the latent variance (S, n) or None,
#: giving scores (n,).
REGRESSION = {"variance": _total_variance, "epistemic-variance": _epistemic_variance}
#: Every acquisition's name; ``random`` suits both tasks.
ACQUISITIONS = sorted(CLASSIFICATION) + sorted(REGRESSION) + ["random"]
#: Ways to take a batch from the scores.
BATCH_MODES = ("top", "stochastic")


def score(name: str, probs=None, mean=None, variance=None, rng: np.random.Generator | None = None,
          latent_variance=None) -> np.ndarray:
    """The acquisition ``name`` at each row: ``probs`` (S, n, C) for a classifier, ``mean`` and ``variance``
    (S, n) for a regression, with ``latent_variance`` (S, n) the part of ``variance`` that is epistemic where the
    likelihood declares one (a Gaussian process's); ``random``: uniform scores from ``rng``.  Returns (n,); higher is
    more worth labelling."""
    if name not in ACQUISITIONS:
        raise ValueError(f"unknown acquisition '{name}'; choose one of {', '.join(ACQUISITIONS)}")
    if probs is not None:
        probs = np.asarray(probs, dtype=float)
        if probs.ndim != 3:
            raise ValueError(f"probs must be (draws, rows, classes), got shape {probs.shape}")
        rows = probs.shape[1]
    elif mean is not None and variance is not None:
        mean, variance = np.asarray(mean, dtype=float), np.asarray(variance, dtype=float)
        if mean.ndim != 2 or mean.shape != variance.shape:
            raise ValueError(f"mean and variance must both be (draws, rows), got {mean.shape} and {variance.shape}")
        rows = mean.shape[1]
    else:
        raise ValueError("score needs probs (a classifier's draws) or mean and variance (a regression's)")
    if name == "random":
        return (rng or np.random.default_rng()).random(rows)
    if probs is not None:
        if name not in CLASSIFICATION:
            raise ValueError(f"acquisition '{name}' is for regression; a classifier takes one of "
                             f"{', '.join(sorted(CLASSIFICATION))} or random")
        return CLASSIFICATION[name](probs)
    if name not in REGRESSION:
        raise ValueError(f"acquisition '{name}' is for classification; a regression takes one of "
                         f"{', '.join(sorted(REGRESSION))} or random")
    latent = None if latent_variance is None else np.asarray(latent_variance, dtype=float).reshape(mean.shape)
    return REGRESSION[name](mean, variance, latent)


def pick_batch(scores, size: int, mode: str = "top", rng: np.random.Generator | None = None,
               beta: float = 1.0) -> np.ndarray:
    """Positions of ``size`` rows to label, from ``scores`` (n,): the ``top`` scores (ties broken at random), or a
    ``stochastic`` draw without replacement with probability proportional to ``score ** beta``."""
    scores = np.asarray(scores, dtype=float)
    if mode not in BATCH_MODES:
        raise ValueError(f"unknown batch mode '{mode}'; choose one of {', '.join(BATCH_MODES)}")
    if not 1 <= size <= len(scores):
        raise ValueError(f"batch size must be between 1 and the {len(scores)} unlabelled rows, got {size}")
    rng = rng or np.random.default_rng()
    if mode == "top":
        keys = scores + 1e-12 * rng.random(len(scores))  # ties (e.g. random's equal scores) at random
    else:  # Gumbel-top-k: the first k of a draw without replacement proportional to score ** beta
        keys = beta * np.log(np.clip(scores, _TINY, None)) + rng.gumbel(size=len(scores))
    return np.argsort(-keys, kind="stable")[:size]  # best first
