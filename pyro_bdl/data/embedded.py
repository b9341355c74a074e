"""The embedded data sets and :func:`load` (an embedded name or a CSV path), and the data of the networks.

* ``linear``, ``diabetes``, ``coin``, ``coin-few``: the linear models' (:data:`EMBEDDED` lists all).
* ``sine`` (embedded): 200 noisy points of a smooth curve with an empty interval
  :data:`SINE_GAP` in the middle; :func:`sine_grid` spans beyond the data for plots.
* ``moons`` (embedded): two interleaved half circles, a binary classifier's 2-D problem.
* ``co2`` (embedded): the Mauna Loa CO2 series 1958-2001, monthly, for extrapolation.
* ``digits`` (embedded): scikit-learn's 8x8 digits; :func:`digits_split` gives a fixed
  stratified train/test split and :func:`digits_ood` out-of-distribution inputs.

The UCI benchmark folders are read by :mod:`pyro_bdl.data.uci`, image files by :mod:`pyro_bdl.data.images`.

Example
-------
>>> from pyro_bdl.data.embedded import SINE_GAP, digits_ood, digits_split, sine_grid
>>> from pyro_bdl.data.embedded import load
>>> sine = load("sine")
>>> sine.X.shape, sine.y.shape, SINE_GAP
(torch.Size([200, 1]), torch.Size([200]), (-0.4, 0.4))
>>> bool(((sine.X > SINE_GAP[0]) & (sine.X < SINE_GAP[1])).any())
False
>>> sine_grid(50).shape
torch.Size([50, 1])
>>> train, test = digits_split()
>>> len(train), len(test), train.X.shape[1]
(1347, 450, 64)
>>> digits_ood(test, "inverted").X.shape, digits_ood(test, "inverted").y is None
(torch.Size([450, 64]), True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch

from pyro_bdl.data.gap import GapProblem, gap_regions, gap_sd_ratio
from pyro_bdl.data.images import is_image_file, load_images
from pyro_bdl.data.table import DataError, Dataset, from_frame, load_csv

__all__ = [
    "EMBEDDED",
    "load",
    "SINE_GAP",
    "SINE_RANGE",
    "SINE_NOISE",
    "SINE_PROBLEM",
    "sine_curve",
    "sine_frame",
    "sine_grid",
    "sine_regions",
    "sine_gap_ratio",
    "DIGITS_OOD_KINDS",
    "digits_frame",
    "digits01_frame",
    "digits01_semi_frame",
    "digits_split",
    "split_dataset",
    "digits_ood",
]


# --------------------------------------------------------------------------- sine with a gap

#: The empty interval of the ``sine`` inputs: no x lies strictly inside it.
SINE_GAP: tuple[float, float] = (-0.4, 0.4)
#: The data's input range: x lies in [-1, -0.4] U [0.4, 1].
SINE_RANGE: tuple[float, float] = (-1.0, 1.0)
#: The sd of the additive Gaussian noise.
SINE_NOISE: float = 0.05


def sine_curve(x):
    """The noise-free curve ``f(x) = x + 0.3 sin(pi x) + 0.3 sin(2 pi x)``: Blundell et al.'s shape
    stretched over [-1, 1] (half their frequencies, so a 1-50-1 network can follow it).

    Works on tensors and numpy arrays of any shape.
    """
    sin = torch.sin if isinstance(x, torch.Tensor) else np.sin
    return x + 0.3 * sin(math.pi * x) + 0.3 * sin(2 * math.pi * x)


def sine_frame() -> pd.DataFrame:
    """The embedded ``sine`` table: 200 rows, columns ``x`` and ``y = f(x) + N(0, SINE_NOISE^2)``.

    100 inputs uniform on [-1, -0.4] and 100 on [0.4, 1] (fixed seed, rows in random order).
    """
    rng = np.random.default_rng(20150520)
    lo, hi = SINE_GAP
    x = np.concatenate([rng.uniform(SINE_RANGE[0], lo, 100), rng.uniform(hi, SINE_RANGE[1], 100)])
    x = x[rng.permutation(x.size)].astype(np.float32)
    y = sine_curve(x.astype(np.float64)) + SINE_NOISE * rng.normal(size=x.size)
    return pd.DataFrame({"x": x, "y": y})


#: ``sine`` as a :class:`~pyro_bdl.data.gap.GapProblem` (the same data: tests/data/test_gap_problems.py), for
#: :func:`pyro_bdl.bench.gap.gap_report` and the generated family of other gap problems.
SINE_PROBLEM = GapProblem("sine", sine_curve, SINE_GAP, SINE_NOISE, 200, 20150520, SINE_RANGE)


def sine_grid(n: int = 200) -> torch.Tensor:
    """``n`` evenly spaced inputs on [-1.5, 1.5] (beyond the data on both sides), shape (n, 1)."""
    if int(n) < 2:
        raise ValueError(f"sine_grid needs n >= 2, got {n}")
    return torch.linspace(-1.5, 1.5, int(n)).unsqueeze(1)


def sine_regions(x) -> tuple[np.ndarray, np.ndarray]:
    """Where the ``sine`` uncertainty checks look, as boolean masks over 1-D inputs ``x`` (a tensor or array):
    ``inside``, where the data lie away from their outer ends (0.4 < |x| < 0.95), and ``gap``, the middle of
    the empty interval (|x| < 0.25).  The gap ratio is the mean predictive sd over ``gap`` divided by
    that over ``inside``.

    >>> inside, gap = sine_regions(np.array([-1.2, -0.6, 0.0, 0.3, 0.9]))
    >>> inside.tolist(), gap.tolist()
    ([False, True, False, False, True], [False, False, True, False, False])
    """
    return gap_regions(x, SINE_RANGE, SINE_GAP)


def sine_gap_ratio(x, sd) -> float:
    """The in-between uncertainty check on ``sine``: mean predictive ``sd`` over the ``gap`` region of
    :func:`sine_regions` divided by its mean over ``inside`` (``x``, ``sd``: 1-D, same length).

    >>> sine_gap_ratio(np.array([-0.6, 0.0, 0.6]), np.array([0.1, 0.4, 0.3]))
    2.0
    """
    return gap_sd_ratio(sd, *sine_regions(x))


# --------------------------------------------------------------------------- digits

#: The kinds of out-of-distribution inputs :func:`digits_ood` makes.
DIGITS_OOD_KINDS = ("rotated", "noise", "inverted")


def digits_frame() -> pd.DataFrame:
    """scikit-learn's digits as a table: ``pixel_0_0`` ... ``pixel_7_7`` (0..16) and ``target`` (0..9)."""
    from sklearn.datasets import load_digits

    return load_digits(as_frame=True).frame.copy()


def digits01_frame() -> pd.DataFrame:
    """The digits with pixels on [0, 1] (pixel / 16), for models of images (the embedded ``digits-01``)."""
    frame = digits_frame()
    pixels = [c for c in frame.columns if c != "target"]
    frame[pixels] = frame[pixels] / 16.0
    return frame


def digits01_semi_frame(per_class: int = 10, seed: int = 0) -> pd.DataFrame:
    """``digits-01`` with the labels of ``per_class`` rows of each class kept (chosen with ``seed``) and the
    others replaced by -1 (unknown), for the semi-supervised VAE (the embedded ``digits-01-semi``)."""
    frame = digits01_frame()
    rng = np.random.default_rng(seed)
    keep = np.concatenate([rng.permutation(np.flatnonzero(frame["target"].to_numpy() == c))[:per_class]
                           for c in range(10)])
    labels = np.full(len(frame), -1)
    labels[keep] = frame["target"].to_numpy()[keep]
    frame["target"] = labels
    return frame


def moons_frame(n: int = 200, noise: float = 0.2, seed: int = 0) -> pd.DataFrame:
    """The embedded ``moons`` table: ``n`` rows of scikit-learn's two interleaved half circles (``make_moons``,
    Gaussian noise of sd ``noise``, fixed ``seed``), columns ``x1``, ``x2`` and the label ``y`` (0 or 1)."""
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=n, noise=noise, random_state=seed)
    return pd.DataFrame({"x1": X[:, 0].astype(np.float32), "x2": X[:, 1].astype(np.float32), "y": y})


def co2_frame() -> pd.DataFrame:
    """The embedded ``co2`` table: the Mauna Loa atmospheric CO2 series, 521 monthly means (ppm) of the weekly flask
    samples of 1958-2001 (Keeling & Whorf 2004; public domain, the copy ``statsmodels.datasets.co2`` ships),
    columns ``year`` (the month's middle, decimal) and ``co2``: the extrapolation problem of Gal & Ghahramani
    (2016)."""
    from importlib.resources import files

    with files("pyro_bdl.data").joinpath("co2_monthly.csv").open() as handle:
        return pd.read_csv(handle, comment="#")


def split_dataset(ds: Dataset, test_fraction: float = 0.25, seed: int = 0, stratify: bool = False
                  ) -> tuple[Dataset, Dataset]:
    """A fixed random split of ``ds`` into (train, test); ``stratify`` keeps the class proportions."""
    from sklearn.model_selection import train_test_split

    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    rows = np.arange(len(ds))
    try:
        train, test = train_test_split(rows, test_size=float(test_fraction), random_state=int(seed),
                                       stratify=ds.y.numpy() if stratify else None)
    except ValueError as exc:
        raise ValueError(f"cannot split {ds.name} with test_fraction={test_fraction}: {exc}") from None
    train, test = torch.as_tensor(np.sort(train)), torch.as_tensor(np.sort(test))

    def part(idx, label):
        y = None if ds.y is None else ds.y[idx]
        return Dataset(f"{ds.name}-{label}", ds.X[idx], y, list(ds.feature_names), ds.target_name)

    return part(train, "train"), part(test, "test")


def digits_split(test_fraction: float = 0.25, seed: int = 0) -> tuple[Dataset, Dataset]:
    """A fixed stratified split of the digits: (train, test), each with X (n, 64) and y (n,).

    ``y`` holds the labels 0..9 as float32, as :func:`load` gives them (``y.long()``
    for indexing).  The defaults give 1347 training and 450 test rows.
    """
    return split_dataset(from_frame(digits_frame(), "target", name="digits"), test_fraction, seed, stratify=True)


def digits_ood(test: Dataset, kind: str, seed: int = 0) -> Dataset:
    """Out-of-distribution inputs made from the images of ``test`` (X (n, 64)): a Dataset with y None.

    ``kind``: ``"rotated"`` (each 8x8 image turned 90 degrees anticlockwise), ``"noise"`` (n
    images of independent uniform integer pixels 0..16, from ``seed``), or ``"inverted"``
    (16 - pixel).  Values stay in 0..16, and the feature names are the test set's.
    """
    if kind not in DIGITS_OOD_KINDS:
        raise ValueError(f"unknown OOD kind {kind!r}; choose one of: {', '.join(DIGITS_OOD_KINDS)}")
    X = test.X
    if X.dim() != 2 or X.shape[1] != 64:
        raise DataError(f"{test.name}: digits_ood needs 8x8 images as X of shape (n, 64), got {tuple(X.shape)}")
    n = X.shape[0]
    if kind == "rotated":
        out = torch.rot90(X.reshape(n, 8, 8), k=1, dims=(1, 2)).reshape(n, 64)
    elif kind == "noise":
        rng = np.random.default_rng(seed)
        out = torch.as_tensor(rng.integers(0, 17, size=(n, 64)), dtype=X.dtype)
    else:
        out = 16 - X
    return Dataset(f"{test.name}-ood-{kind}", out.contiguous(), None, list(test.feature_names), None)


# --------------------------------------------------------------------------- UCI benchmark


# --------------------------------------------------------------------------- the embedded table


def _linear() -> pd.DataFrame:
    """100 rows of y = X w + b + noise with w = (1.5, -2, 0.5), b = 0.3, sigma = 0.5."""
    rng = np.random.default_rng(20261122)
    X = rng.normal(size=(100, 3))
    y = X @ np.array([1.5, -2.0, 0.5]) + 0.3 + 0.5 * rng.normal(size=100)
    df = pd.DataFrame(X, columns=["x1", "x2", "x3"])
    df["y"] = y
    return df


def _tosses(n: int, p: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"y": (rng.random(n) < p).astype(float)})


def _diabetes() -> pd.DataFrame:
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(as_frame=True)
    df = bunch.frame.copy()
    # Features ship centred and scaled; the target (disease progression) is standardised so
    # that the unit priors of the linear models are sensible.
    t = df.pop("target")
    df["progression"] = (t - t.mean()) / t.std()
    return df


@dataclass(frozen=True)
class Embedded:
    make: Callable[[], pd.DataFrame]
    target: str
    doc: str


EMBEDDED: dict[str, Embedded] = {
    "linear": Embedded(_linear, "y", "100 rows, 3 features, y = Xw + b + N(0, 0.5^2) (generated, fixed seed)"),
    "diabetes": Embedded(
        _diabetes, "progression", "scikit-learn's diabetes data: 442 rows, 10 features, standardised target"
    ),
    "coin": Embedded(lambda: _tosses(30, 0.3, 7), "y", "30 tosses of a coin with P(heads) = 0.3 (generated)"),
    "coin-few": Embedded(
        lambda: pd.DataFrame({"y": [1.0, 1.0, 1.0]}), "y", "3 tosses, all heads: where MLE and MAP are overconfident"
    ),
    "sine": Embedded(
        sine_frame,
        "y",
        f"200 rows, y = x + 0.3 sin(pi x) + 0.3 sin(2 pi x) + N(0, {SINE_NOISE:g}^2), x in [{SINE_RANGE[0]:g}, "
        f"{SINE_GAP[0]:g}] U [{SINE_GAP[1]:g}, {SINE_RANGE[1]:g}] (empty gap in the middle; generated, fixed seed)",
    ),
    "moons": Embedded(moons_frame, "y", "200 rows of two interleaved half circles, 2 features, labels 0/1, noise "
                                        "sd 0.2 (scikit-learn's make_moons, fixed seed)"),
    "co2": Embedded(co2_frame, "co2", "the Mauna Loa CO2 series: 521 monthly means (ppm) 1958-2001, the input the "
                                      "decimal year (Keeling & Whorf 2004, public domain)"),
    "digits": Embedded(
        digits_frame,
        "target",
        "scikit-learn's 8x8 digits: 1797 rows, 64 pixels (0..16), labels 0..9; "
        "fixed stratified train/test split via pyro_bdl.data.embedded.digits_split",
    ),
    "digits-01": Embedded(digits01_frame, "target", "the digits with pixels scaled to [0, 1] (pixel / 16), for the VAE"),
    "digits-01-semi": Embedded(digits01_semi_frame, "target",
                               "digits-01 with 10 labels per class kept, the others -1 (unknown): for the semi-supervised VAE"),
}


def load(source: str | Path, target: str | None = None, needs_target: bool = True,
         missing_target: float | None = None) -> Dataset:
    """An embedded data set by name, an image file (IDX or NPZ: :func:`pyro_bdl.data.images.load_images`) or a CSV file
    by path.  A CSV file needs ``target`` for a model that has one (``needs_target``); without it every column is a
    feature.  ``missing_target``: what an empty target cell stands for (:func:`~pyro_bdl.data.table.from_frame`)."""
    if isinstance(source, str) and source in EMBEDDED:
        emb = EMBEDDED[source]
        if target is not None and target != emb.target:
            raise DataError(f"embedded data set '{source}' has target '{emb.target}', not '{target}'")
        return from_frame(emb.make(), emb.target, name=source)
    if is_image_file(source):
        return load_images(source)
    if target is None and needs_target:
        raise DataError(f"{source}: a CSV file needs a target column (--target)")
    return load_csv(source, target, missing_target=missing_target)
