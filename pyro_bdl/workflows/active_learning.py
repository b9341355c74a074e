r"""Active learning: fit, ask the posterior which unlabelled rows are worth a label, label them, fit again.

Pool-based, as in Gal, Islam & Ghahramani (2017): a pool of rows whose inputs are known and whose labels are not
(they are revealed only when a row is acquired: read from the pool's own target column, which stands in for the
annotator, or asked of ``oracle(rows)``); a few labelled rows to start from; then ``rounds`` times

1. fit the model on the labelled rows (any method whose predictive has draws: ``mc-dropout``, ``ensemble``, ``svi``,
   ``laplace-ggn``, ``nuts`` on small nets; the inputs standardised by the whole pool's columns, which are known,
   not by the handful of labelled rows);
2. score every unlabelled row by an acquisition of the posterior's draws (:mod:`pyro_bdl.posterior.acquisition`:
   BALD, max entropy, variation ratios, mean std; predictive variance for regression; random as the baseline);
3. acquire a batch: the top scores, or a stochastic batch that spreads over the high-scoring rows
   (``batch_mode``), and reveal their labels.

Each round's fit is judged on ``test`` (accuracy, NLL, ECE; or RMSE, log-likelihood), and each round is kept in
``checkpoint`` as it ends: a run interrupted (Ctrl-C) resumes after the last finished round.  Every round's fit
starts afresh by default: warm-starting from the last round's weights generalises worse for networks (Ash & Adams
2020), so ``warm_start=True`` (the last posterior mean as the starting point, for methods that take one) is an
option, not the default.

Example
-------
>>> import pyro_bdl
>>> from pyro_bdl.data.embedded import split_dataset
>>> pool, test = split_dataset(pyro_bdl.load("linear"), 0.3)
>>> run = active_learning("blr", pool, "importance", "variance", test=test, initial=4, batch=2, rounds=2,
...                       options={"noise": 0.5}, samples=500, progress=False)  # settings go to each fit
>>> run.history[["round", "labelled"]].values.tolist()
[[0, 4], [1, 6], [2, 8]]
>>> sorted(run.history.columns[2:5])   # the held-out metrics of each round's fit
['coverage_94', 'rmse', 'test_ll']
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from pyro.infer.autoguide import init_to_value
from tqdm.auto import tqdm

from pyro_bdl.data.checks import DataWarning
from pyro_bdl.data.embedded import EMBEDDED
from pyro_bdl.data.table import DataError, Dataset
from pyro_bdl.data.task import Task
from pyro_bdl.fit import fit
from pyro_bdl.inference.base import ConvergenceWarning
from pyro_bdl.inference import METHODS
from pyro_bdl.inference.parallel.pool import run_jobs
from pyro_bdl.posterior.acquisition import ACQUISITIONS, BATCH_MODES, CLASSIFICATION, REGRESSION, pick_batch, score
from pyro_bdl.posterior.evaluation import evaluate_fit
from pyro_bdl.registry import ModelSpec, spec_of
from pyro_bdl.storage.checkpoint import fingerprint
from pyro_bdl.storage.run_log import RunLog

__all__ = ["active_learning", "compare_acquisitions", "ActiveLearningResult", "labels_to_reach",
           "plot_learning_curves", "HIGHER_IS_BETTER"]

#: Whether a larger value of a held-out metric is better (the learning curves' and ``labels_to_reach``'s sense).
HIGHER_IS_BETTER = {"accuracy": True, "test_ll": True, "coverage_94": True, "rmse": False, "ece": False,
                    "brier": False}


@dataclass
class ActiveLearningResult:
    """One active-learning run.

    Attributes
    ----------
    history : one row per round: ``round``, ``labelled`` (rows labelled when the round's fit ran), the held-out
        metrics of that fit (``accuracy``, ``test_ll``, ``ece``, ...; none without a test set), ``fit_seconds``,
        ``score_seconds``, and ``acquisition`` and ``seed``.
    order : pool positions of the labelled rows, in the order they were labelled (the initial rows first), (m,).
    labels : their labels, as revealed, (m,).
    fit : the last round's :class:`~pyro_bdl.result.FitResult`.
    """

    history: pd.DataFrame
    order: np.ndarray
    labels: np.ndarray
    fit: object

    def labels_to_reach(self, metric: str, value: float) -> int | None:
        """The labelled count at the first round whose ``metric`` reaches ``value`` (None: never)."""
        return labels_to_reach(self.history, metric, value)

    def plot(self, metric: str | None = None, ax=None):
        """This run's learning curve (``metric`` against labelled rows)."""
        return plot_learning_curves(self.history, metric, ax=ax)


def active_learning(model: str | Callable, pool, inference: str = "mc-dropout", acquisition: str = "bald", *,
                    test=None, target: str | None = None, initial: int | Sequence[int] = 20, batch: int = 10,
                    rounds: int = 10, oracle: Callable | None = None, balanced: bool = True, batch_mode: str = "top",
                    warm_start: bool = False, seed: int = 0, checkpoint: str | Path | None = None,
                    progress: bool = True, options: dict | None = None, **settings) -> ActiveLearningResult:
    """Pool-based active learning (the module's docstring says how).

    Parameters
    ----------
    model : a zoo model name that predicts a target from features (``bnn-classifier``, ``bnn-regressor``, ...) or a
        Pyro program over ``X`` (n, d) and ``y`` (n,).
    pool : the rows to choose from: a :class:`~pyro_bdl.data.table.Dataset`, a CSV path (``target``: its label
        column, kept hidden until a row is acquired) or a DataFrame; without labels, ``oracle`` gives them.
    inference : a method whose predictive has draws (default ``mc-dropout``).
    acquisition : one of :data:`~pyro_bdl.posterior.acquisition.ACQUISITIONS`.
    test : held-out rows with labels (same forms as ``pool``) on which every round's fit is judged.
    initial : how many rows to label first (chosen at random; for a classifier with a labelled pool and
        ``balanced``, as evenly over the classes as they allow, as Gal et al. started), or their pool positions.
    batch, rounds : rows acquired per round, and the number of rounds (fits: ``rounds + 1``).
    oracle : ``oracle(positions) -> labels`` for the pool's rows at those positions (an array (k,)), asked once per
        acquired batch; default: the pool's target column.
    batch_mode : ``top`` (the highest scores) or ``stochastic`` (sampled in proportion to the scores).
    warm_start : start each fit at the last one's posterior mean (methods that start from a point).
    seed : the run's seed (the initial rows, every fit's seed, random scores and stochastic batches).
    checkpoint : a run log (:mod:`pyro_bdl.storage.run_log`) keeping the labels revealed and the finished rounds;
        a run of the same settings resumes from it (a file of another run is refused); it is deleted when the run
        ends.
    **settings : the method's settings (``steps``, ``samples``, ...), as :func:`~pyro_bdl.fit.fit` takes them.

    Returns
    -------
    ActiveLearningResult
    """
    spec = spec_of(model)
    pool, test = _as_dataset(spec, pool, target, "pool"), (None if test is None else
                                                         _as_dataset(spec, test, target, "test"))
    _check_acquisition(acquisition, spec)
    _check_run(inference, acquisition, batch_mode, pool, test, oracle, initial, batch, rounds, spec)
    rng = np.random.default_rng(seed)
    first = int(initial) if isinstance(initial, (int, np.integer)) else [int(i) for i in initial]
    state = _State(checkpoint, _fingerprint(spec or model, pool, inference, acquisition, first, batch,
                                                   rounds, batch_mode, warm_start, seed, options, settings))
    if not state.order:
        first = _initial_rows(pool, initial, balanced and _classifier(spec), rng)
        state.keep(first, _labels(pool, oracle, first))
    last, said = None, []
    bar = tqdm(total=rounds + 1, initial=len(state.rows), desc=f"active learning ({acquisition})",
               disable=not progress)
    for r in range(len(state.rows), rounds + 1):
        rng = np.random.default_rng([seed, r])  # each round's draws its own: a resumed run makes the same choices
        start = time.perf_counter()
        last = _fit_round(spec or model, pool, state, inference, seed, r, options, settings,
                          last if warm_start else None)
        row = {"round": r, "labelled": len(state.order), **_judge(last, test),
               "fit_seconds": time.perf_counter() - start, "warnings": len(last.warnings)}
        said.extend(last.warnings)
        chosen = []
        if r < rounds:
            start = time.perf_counter()
            chosen = _acquire(last, pool, state, acquisition, batch, batch_mode, rng)
            row["score_seconds"] = time.perf_counter() - start
        state.keep(chosen, _labels(pool, oracle, chosen) if len(chosen) else [], row)
        bar.update()
        bar.set_postfix({k: f"{v:.3g}" for k, v in row.items() if k in HIGHER_IS_BETTER})
    bar.close()
    if said:  # one warning for the run, not one per round
        warnings.warn(f"active learning ({acquisition}, seed {seed}): {len(said)} warning(s) from the rounds' fits "
                      f"(the history's 'warnings' column counts them per round); the first: {said[0]}",
                      ConvergenceWarning, stacklevel=2)
    if last is None:  # every round was already in the checkpoint: the last fit is made again for the answer
        last = _fit_round(spec or model, pool, state, inference, seed, rounds, options, settings, None)
    state.clear()
    history = pd.DataFrame(state.rows).assign(acquisition=acquisition, seed=seed)
    return ActiveLearningResult(history, np.asarray(state.order), np.asarray(state.labels), last)


def compare_acquisitions(model, pool, inference: str = "mc-dropout", acquisitions: Sequence[str] = ("bald", "random"),
                         seeds: Sequence[int] = (0,), progress: bool = True, workers: int = 1, **kwargs) -> pd.DataFrame:
    """The histories of :func:`active_learning` for every acquisition and seed, one frame (columns ``acquisition``
    and ``seed`` tell them apart): what :func:`plot_learning_curves` draws.  ``workers``: runs side by side in that
    many processes (:func:`~pyro_bdl.inference.parallel.pool.run_jobs`; one torch thread each, no progress bars);
    the histories are the same as one process's.  ``kwargs`` as for :func:`active_learning` (a ``checkpoint`` is
    given per run: ``{acquisition}`` and ``{seed}`` in it are filled in)."""
    spec = spec_of(model)
    for acquisition in acquisitions:  # every name checked before the first run
        _check_acquisition(acquisition, spec)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    checkpoint = kwargs.pop("checkpoint", None)

    def one_run(job: tuple[str, int]) -> pd.DataFrame:
        acquisition, seed = job
        where = None if checkpoint is None else str(checkpoint).format(acquisition=acquisition, seed=seed)
        return active_learning(model, pool, inference, acquisition, seed=seed, checkpoint=where,
                               progress=progress and workers == 1, **kwargs).history

    jobs = [(acquisition, seed) for acquisition in acquisitions for seed in seeds]
    histories = {(h["acquisition"].iloc[0], int(h["seed"].iloc[0])): h for h in run_jobs(one_run, jobs, workers)}
    return pd.concat([histories[job] for job in jobs], ignore_index=True)


def labels_to_reach(history: pd.DataFrame, metric: str, value: float) -> int | None:
    """The labelled count of the first round whose ``metric`` reaches ``value`` (at least, or at most for a metric
    where lower is better: :data:`HIGHER_IS_BETTER`), or None where no round does.  ``history``: one run's."""
    if metric not in history:
        raise KeyError(f"no metric '{metric}' in the history (it has {', '.join(map(str, history.columns))})")
    values = history[metric].to_numpy(dtype=float)
    reached = values >= value if HIGHER_IS_BETTER.get(metric, True) else values <= value
    return int(history["labelled"].to_numpy()[reached.argmax()]) if reached.any() else None


def plot_learning_curves(history: pd.DataFrame, metric: str | None = None, ax=None, band: str = "range"):
    """``metric`` (default: ``accuracy``, else ``test_ll``) against the labelled count, one line per acquisition (the
    mean over seeds) with a band over the seeds (``range``: lowest to highest; ``sd``: mean +- one sd).  ``history``:
    :func:`compare_acquisitions`'s frame or one run's.  Returns the axes."""
    import matplotlib.pyplot as plt

    metric = metric or next(m for m in ("accuracy", "rmse", "test_ll") if m in history)
    if metric not in history:
        raise KeyError(f"no metric '{metric}' in the history: was the run given test data?")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    frame = history if "acquisition" in history else history.assign(acquisition="run")
    for name, runs in frame.groupby("acquisition", sort=False):
        curve = runs.groupby("labelled")[metric]
        x, mean = np.asarray(list(curve.groups)), curve.mean().to_numpy()
        low, high = ((curve.min().to_numpy(), curve.max().to_numpy()) if band == "range" else
                     (mean - curve.std().fillna(0).to_numpy(), mean + curve.std().fillna(0).to_numpy()))
        line, = ax.plot(x, mean, label=f"{name} ({runs['seed'].nunique() if 'seed' in runs else 1} seeds)")
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("labelled rows")
    ax.set_ylabel(metric)
    ax.legend()
    return ax


def _as_dataset(spec: ModelSpec | None, source, target: str | None, what: str) -> Dataset:
    """``source`` (a Dataset, a file or a DataFrame) as a Dataset; its labels may be missing (the oracle gives
    them)."""
    if isinstance(source, Dataset):
        return source
    if spec is None:
        raise TypeError(f"{what}: a model of your own takes a Dataset (X, y) here, not {type(source).__name__}")
    if target is None and isinstance(source, (str, Path, pd.DataFrame)) and not _embedded(source):
        raise DataError(f"{what}: name the label column (target=...); a pool without labels is a Dataset whose y "
                        f"is None, with oracle=...")
    return spec.load_data(source, target)


def _embedded(source) -> bool:
    return isinstance(source, str) and source in EMBEDDED


def _check_acquisition(acquisition: str, spec: ModelSpec | None) -> None:
    """A known acquisition, and for a zoo model one of its task's (a user's model's task shows at the first score)."""
    if acquisition not in ACQUISITIONS:
        raise ValueError(f"unknown acquisition '{acquisition}'; choose one of {', '.join(ACQUISITIONS)}")
    if spec is None or acquisition == "random" or spec.data.task not in (Task.CLASSIFICATION, Task.REGRESSION):
        return
    suits = CLASSIFICATION if spec.data.task is Task.CLASSIFICATION else REGRESSION
    if acquisition not in suits:
        raise ValueError(f"acquisition '{acquisition}' does not suit model '{spec.name}' ({spec.data.task.value}); "
                         f"it takes one of {', '.join(sorted(suits))} or random")


def _check_run(inference, acquisition, batch_mode, pool, test, oracle, initial, batch, rounds, spec=None) -> None:
    """Every setting checked before the first fit."""
    if inference not in METHODS:
        raise ValueError(f"unknown inference '{inference}'; choose one of {', '.join(METHODS)}")
    if batch_mode not in BATCH_MODES:
        raise ValueError(f"unknown batch mode '{batch_mode}'; choose one of {', '.join(BATCH_MODES)}")
    # a point's predictive keeps an epistemic part where the model's does (a Gaussian process's latent variance)
    at_a_point = spec is not None and spec.hooks.point_epistemic and acquisition in REGRESSION
    if acquisition != "random" and METHODS[inference].point_estimate and not at_a_point:
        raise ValueError(f"acquisition '{acquisition}' reads the disagreement of posterior draws; '{inference}' gives "
                         f"a single point (use a method with draws: {', '.join(_with_draws())}; or random)")
    if pool.y is None and oracle is None:
        raise ValueError("the pool has no labels: give oracle=... (a function of pool positions returning labels)")
    if test is not None and test.y is None:
        raise DataError(f"{test.name}: the test rows need labels")
    first = initial if isinstance(initial, (int, np.integer)) else len(initial)
    for name, value, low in (("initial", first, 1), ("batch", batch, 1), ("rounds", rounds, 0)):
        if not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if first + batch * rounds > len(pool):
        raise ValueError(f"initial + batch x rounds = {first + batch * rounds} rows, more than the pool's "
                         f"{len(pool)}")
    if not isinstance(initial, (int, np.integer)):
        positions = np.asarray(initial)
        if len(set(positions.tolist())) != len(positions) or positions.min() < 0 or positions.max() >= len(pool):
            raise ValueError(f"initial positions must be distinct pool positions in 0..{len(pool) - 1}")


def _with_draws() -> list[str]:
    return [name for name, m in METHODS.items() if not m.point_estimate]


def _classifier(spec: ModelSpec | None) -> bool:
    return spec is not None and spec.data.task is Task.CLASSIFICATION


def _initial_rows(pool: Dataset, initial, balanced: bool, rng: np.random.Generator) -> np.ndarray:
    """The first rows to label: given, or ``initial`` at random (balanced over the pool's classes where asked)."""
    if not isinstance(initial, (int, np.integer)):
        return np.asarray(initial, dtype=int)
    if not balanced or pool.y is None:
        return rng.choice(len(pool), initial, replace=False)
    labels = pool.y.cpu().numpy()
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    # one of each class in turn, so the counts differ by at most one (until a rare class runs out)
    turns = [rows[i] for i in range(max(map(len, by_class))) for rows in by_class if i < len(rows)]
    return np.asarray(turns[:initial], dtype=int)


def _labels(pool: Dataset, oracle, positions: np.ndarray) -> np.ndarray:
    """The labels of the pool's rows at ``positions``: the oracle's answer, or the pool's hidden column."""
    if oracle is None:
        return pool.y[torch.as_tensor(positions, device=pool.y.device)].cpu().numpy()
    answer = np.asarray(oracle(np.asarray(positions)), dtype=float).reshape(-1)
    if answer.shape != (len(positions),) or not np.isfinite(answer).all():
        raise ValueError(f"the oracle must return {len(positions)} finite labels for {len(positions)} rows, got "
                         f"{answer.tolist()[:10]}")
    return answer


def _fit_round(model, pool: Dataset, state, inference: str, seed: int, r: int, options, settings, warm):
    """The round's fit on the labelled rows, the inputs standardised by the whole pool's."""
    rows = torch.as_tensor(state.order, device=pool.X.device)
    labels = torch.as_tensor(np.asarray(state.labels), dtype=pool.X.dtype if pool.y is None else pool.y.dtype,
                             device=pool.X.device)
    labelled = Dataset(f"{pool.name} (labelled)", pool.X[rows], labels, pool.feature_names, pool.target_name)
    extra = dict(settings)
    if warm is not None and METHODS[inference].takes_init and warm.samples:
        extra["init_loc_fn"] = init_to_value(values={k: v.mean((0, 1)) for k, v in warm.samples.items()})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit(model, labelled, inference, options=options, seed=seed * 100_003 + r, progress=False,
                     standardize_on=pool.X if isinstance(model, (str, ModelSpec)) else None, **extra)
    # a few labelled rows have constant columns (pixels): expected, not news; the rest is kept for the run's summary
    result.warnings = [str(w.message) for w in caught
                       if not (issubclass(w.category, DataWarning) and "constant" in str(w.message))]
    return result


def _judge(result, test: Dataset | None) -> dict:
    return {} if test is None else {k: v for k, v in evaluate_fit(result, test).items() if k != "test_rows"}


def _acquire(result, pool: Dataset, state, acquisition: str, batch: int, mode: str, rng) -> np.ndarray:
    """Pool positions of the next batch: the unlabelled rows' scores under ``result``'s posterior."""
    free = np.setdiff1d(np.arange(len(pool)), np.asarray(state.order))
    if acquisition == "random":
        scores = rng.random(len(free))
    else:
        pred = result.predictive(Dataset("pool", pool.X[torch.as_tensor(free, device=pool.X.device)], None,
                                         pool.feature_names))
        site = result.likelihood_sites[0]
        if site in pred.probs:
            scores = score(acquisition, probs=pred.probs[site].reshape((-1,) + pred.probs[site].shape[2:]))
        elif pred.gaussian.get(site, False):
            latent = pred.latent_variance.get(site)
            scores = score(acquisition, mean=pred.mean[site].reshape(-1, len(free)),
                           variance=pred.variance[site].reshape(-1, len(free)),
                           latent_variance=None if latent is None else latent.reshape(-1, len(free)))
        else:
            raise ValueError(f"acquisition '{acquisition}' needs a Categorical or Normal likelihood")
    return free[pick_batch(scores, batch, mode, rng)]


def _fingerprint(model, pool: Dataset, *settings) -> str:
    """What a checkpoint must match to be resumed: the model, the pool's inputs and every setting."""
    name = model.name if isinstance(model, ModelSpec) else getattr(model, "__qualname__", "model")
    return fingerprint(model=name, pool=pool.X, settings=list(settings))


class _State:
    """The run so far, kept in a run log (:mod:`pyro_bdl.storage.run_log`): one record for the initial rows (their
    positions and labels), then one per finished round (its row of the history, and the batch it acquired with its
    labels).  The labelled positions and labels are the records' in order, so a resumed run asks the oracle only
    for the batches it had not kept."""

    def __init__(self, path, fingerprint: str):
        self.log = RunLog(path, "active-learning", fingerprint)
        self.order, self.labels, self.rows = [], [], []
        for record in self.log.records:
            self._add(record)

    def _add(self, record: dict) -> None:
        self.order += record["positions"]
        self.labels += record["labels"]
        if record.get("row") is not None:
            self.rows.append(record["row"])

    def keep(self, positions, labels, row: dict | None = None) -> None:
        """Labels revealed at ``positions`` (the initial rows, or a round's batch) and the round's row, kept."""
        record = {"positions": [int(p) for p in positions], "labels": [float(v) for v in labels], "row": row}
        self._add(record)
        self.log.keep(record)

    def clear(self) -> None:
        self.log.clear()
