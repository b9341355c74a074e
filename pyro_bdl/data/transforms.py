r"""Standardisation, as one transform wrapped around a model.

Networks are fitted in standardised units: :class:`Standardizer` holds the per-column mean and sd of the
training inputs (and the mean and sd of a regression target), and :class:`StandardizedModel` wraps the model
so that it takes data in the data's own units, standardises them on the way in, and maps each observed
site's distribution back on the way out:

.. math::

    y = m_y + s_y\,\tilde y, \qquad p(y \mid x, \theta) = \tilde p\big((y - m_y)/s_y \,\big|\,
    (x - m_x)/s_x, \theta\big) / s_y .

So draws of ``y``, its predictive moments and its pointwise log-likelihood (hence ArviZ's LOO and
``az.compare`` against a model fitted in the data's units) are all in the data's units; the latent variables
(weights, a noise sd ``sigma``) stay in the standardised units the network works in.

Example
-------
>>> import torch, pyro, pyro.distributions as dist
>>> def model(X, y=None):
...     w = pyro.sample("w", dist.Normal(0.0, 1.0))
...     with pyro.plate("data", len(X)):
...         return pyro.sample("y", dist.Normal(w * X[:, 0], 0.1), obs=y)
>>> X = torch.tensor([[0.0], [2.0]]); y = torch.tensor([10.0, 30.0])
>>> st = Standardizer.fit(X, y)
>>> wrapped = StandardizedModel(model, st, features="X", target="y", sites=("y",))
>>> tr = pyro.poutine.trace(pyro.poutine.condition(wrapped, {"w": torch.tensor(1.0)})).get_trace(X=X, y=y)
>>> tr.nodes["y"]["value"].tolist(), tr.nodes["y"]["fn"].mean.tolist()  # the data's units
([10.0, 30.0], [10.0, 30.0])
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pyro.distributions as dist
import torch
from pyro.poutine.messenger import Messenger

from pyro_bdl.data.table import DataError, Dataset

__all__ = ["Standardizer", "StandardizedModel"]




def _as_2d(X: torch.Tensor, what: str) -> torch.Tensor:
    X = torch.as_tensor(X)
    if X.dim() != 2:
        raise DataError(f"{what} must have shape (n, d), got {tuple(X.shape)}")
    return X


@dataclass
class Standardizer:
    """Per-column mean and sd of training inputs ``X`` (d,) and of the target ``y`` (scalars).

    Fit it on the training data only, then apply it to training and test data alike.  A constant
    column (sd 0, e.g. columns 8 and 11 of UCI naval) gets sd 1, so it is centred, not divided
    by zero.  ``y_mean``/``y_sd`` are None when fitted without a target (classification).

    >>> X = torch.tensor([[1.0, 5.0], [3.0, 5.0]])
    >>> s = Standardizer.fit(X, torch.tensor([10.0, 20.0]))
    >>> s.transform_X(X)
    tensor([[-1.,  0.],
            [ 1.,  0.]])
    >>> s.x_sd.tolist(), s.y_mean, s.y_sd, round(s.log_density_shift(), 4)
    ([1.0, 1.0], 15.0, 5.0, -1.6094)
    >>> Standardizer.from_dict(s.to_dict()) == s
    True
    """

    x_mean: torch.Tensor
    x_sd: torch.Tensor
    y_mean: float | None = None
    y_sd: float | None = None

    @classmethod
    def fit(cls, X: torch.Tensor, y: torch.Tensor | None = None, x_reference: torch.Tensor | None = None
            ) -> Standardizer:
        """Mean and (population) sd of each column of ``X`` (n, d), and of ``y`` (n,) if given; the columns' from
        ``x_reference`` (n', d) instead where given (inputs known beyond the training rows: a pool's)."""
        X = _as_2d(X, "X")
        if x_reference is not None:
            own, reference = cls.fit(X, y), cls.fit(_as_2d(x_reference, "x_reference").to(X))
            if reference.x_mean.shape != own.x_mean.shape:
                raise DataError(f"x_reference has {len(reference.x_mean)} columns, X {len(own.x_mean)}")
            return cls(reference.x_mean, reference.x_sd, own.y_mean, own.y_sd)
        if X.shape[0] == 0:
            raise DataError("cannot fit a Standardizer on 0 rows")
        x = X.detach().to(torch.float64)
        if not torch.isfinite(x).all():
            raise DataError(f"X holds {int((~torch.isfinite(x)).sum())} NaN or infinite value(s)")
        x_mean = x.mean(0)
        x_sd = x.std(0, unbiased=False)
        # exactly constant columns get sd 1 (tested on max == min, not on a rounding-noisy sd)
        x_sd = torch.where(x.amax(0) == x.amin(0), torch.ones_like(x_sd), x_sd)
        y_mean = y_sd = None
        if y is not None:
            t = torch.as_tensor(y).detach().to(torch.float64)
            if t.shape != (X.shape[0],):
                raise DataError(f"y must have shape ({X.shape[0]},) to match X, got {tuple(t.shape)}")
            if not torch.isfinite(t).all():
                raise DataError(f"y holds {int((~torch.isfinite(t)).sum())} NaN or infinite value(s)")
            y_mean = float(t.mean())
            y_sd = 1.0 if float(t.max()) == float(t.min()) else float(t.std(unbiased=False))
        return cls(x_mean, x_sd, y_mean, y_sd)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Standardizer):
            return NotImplemented
        return (
            torch.equal(self.x_mean, other.x_mean)
            and torch.equal(self.x_sd, other.x_sd)
            and self.y_mean == other.y_mean
            and self.y_sd == other.y_sd
        )

    def _need_y(self) -> None:
        if self.y_mean is None or self.y_sd is None:
            raise DataError("this Standardizer was fitted without a target y; it cannot transform targets")

    def transform_X(self, X: torch.Tensor) -> torch.Tensor:
        """``(X - mean) / sd`` column by column: (n, d) -> (n, d), in X's dtype."""
        X = _as_2d(X, "X")
        if X.shape[1] != self.x_mean.shape[0]:
            raise DataError(
                f"X has {X.shape[1]} column(s) but the Standardizer was fitted on {self.x_mean.shape[0]}"
            )
        return (X - self.x_mean.to(X.dtype)) / self.x_sd.to(X.dtype)

    def transform_y(self, y: torch.Tensor) -> torch.Tensor:
        """``(y - y_mean) / y_sd``: any shape in, same shape out."""
        self._need_y()
        return (y - self.y_mean) / self.y_sd

    def inverse_y_mean(self, m: torch.Tensor) -> torch.Tensor:
        """A mean (or a draw, a quantile) in standardised units back to original units: ``m * y_sd + y_mean``."""
        self._need_y()
        return m * self.y_sd + self.y_mean

    def inverse_y_sd(self, s: torch.Tensor) -> torch.Tensor:
        """A standard deviation (or an RMSE) in standardised units back to original units: ``s * y_sd``."""
        self._need_y()
        return s * self.y_sd

    def log_density_shift(self) -> float:
        """``-log(y_sd)``: add it to a log-likelihood per point in standardised units to get original units."""
        self._need_y()
        return -math.log(self.y_sd)

    def transform(self, ds: Dataset) -> Dataset:
        """A :class:`Dataset` with standardised ``X`` (and ``y``, when fitted with a target)."""
        y = ds.y
        if y is not None and self.y_mean is not None:
            y = self.transform_y(y)
        return Dataset(ds.name, self.transform_X(ds.X), y, list(ds.feature_names), ds.target_name)

    def to_dict(self) -> dict:
        """Plain lists and floats (JSON-ready, e.g. for NetCDF attributes)."""
        return {
            "x_mean": [float(v) for v in self.x_mean.tolist()],
            "x_sd": [float(v) for v in self.x_sd.tolist()],
            "y_mean": self.y_mean,
            "y_sd": self.y_sd,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Standardizer:
        """The inverse of :meth:`to_dict`."""
        missing = [k for k in ("x_mean", "x_sd") if k not in d]
        if missing:
            raise DataError(f"Standardizer dict lacks {', '.join(missing)}")
        x_mean = torch.tensor(d["x_mean"], dtype=torch.float64)
        x_sd = torch.tensor(d["x_sd"], dtype=torch.float64)
        if x_mean.dim() != 1 or x_mean.shape != x_sd.shape:
            raise DataError(
                f"Standardizer dict: x_mean and x_sd must be lists of equal length, got "
                f"{tuple(x_mean.shape)} and {tuple(x_sd.shape)}"
            )
        if (x_sd <= 0).any():
            raise DataError("Standardizer dict: every x_sd must be positive")
        y_mean, y_sd = d.get("y_mean"), d.get("y_sd")
        if (y_mean is None) != (y_sd is None):
            raise DataError("Standardizer dict: y_mean and y_sd must both be given or both be None")
        if y_sd is not None and not y_sd > 0:
            raise DataError(f"Standardizer dict: y_sd must be positive, got {y_sd}")
        return cls(x_mean, x_sd, None if y_mean is None else float(y_mean), None if y_sd is None else float(y_sd))


def _affine(fn, loc: float, scale: float):
    """The distribution of ``loc + scale * Y`` for ``Y ~ fn`` (a Normal stays a Normal)."""
    if isinstance(fn, dist.Normal):
        return dist.Normal(fn.loc * scale + loc, fn.scale * scale)
    return dist.TransformedDistribution(fn, [dist.transforms.AffineTransform(loc, scale)])


class _ToDataUnits(Messenger):
    """Maps the distribution (and an observed value) of the named sites from standardised to data units."""

    def __init__(self, sites, loc: float, scale: float):
        super().__init__()
        self.sites, self.loc, self.scale = frozenset(sites), loc, scale

    def _pyro_sample(self, msg) -> None:
        if msg["name"] in self.sites:
            msg["fn"] = _affine(msg["fn"], self.loc, self.scale)
            if msg["is_observed"]:
                msg["value"] = msg["value"] * self.scale + self.loc


class StandardizedModel:
    """``model`` fitted in standardised units, called with data in the data's units.

    ``features`` / ``target``: the model's arguments for the feature matrix and the target (either None);
    ``sites``: the observed sites whose values are the target, mapped back to the data's units when the
    standardizer has a target (regression).  Other arguments pass through.
    """

    def __init__(self, model, standardizer: Standardizer, features: str | None, target: str | None, sites=()):
        self.model, self.standardizer = model, standardizer
        self.features, self.target, self.sites = features, target, tuple(sites)
        functools.update_wrapper(self, getattr(model, "func", model), updated=())

    def with_sites(self, sites) -> StandardizedModel:
        """The same transform with ``sites`` as the observed sites mapped back to the data's units."""
        return StandardizedModel(self.model, self.standardizer, self.features, self.target, sites)

    @property
    def scales_target(self) -> bool:
        return self.target is not None and self.standardizer.y_mean is not None

    def standardize(self, data: dict) -> dict:
        """The model's arguments in standardised units (what the inner model sees)."""
        data = dict(data)
        if self.features is not None and data.get(self.features) is not None:
            data[self.features] = self.standardizer.transform_X(data[self.features])
        if self.scales_target and data.get(self.target) is not None:
            data[self.target] = self.standardizer.transform_y(data[self.target])
        return data

    def __call__(self, **data):
        inner = self.standardize(data)
        if not self.scales_target:
            return self.model(**inner)
        st = self.standardizer
        with _ToDataUnits(self.sites, st.y_mean, st.y_sd):
            return self.model(**inner)
