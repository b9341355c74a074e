r"""Gaussian process regression, the latent function marginalised.

.. math::

    f \sim \mathcal{GP}(m, k_\theta), \qquad y_i = f(x_i) + \varepsilon_i, \quad \varepsilon_i \sim \mathcal N(0,
    \sigma^2) \quad\Longrightarrow\quad y \mid \theta, \sigma \sim \mathcal N\big(m \mathbf 1,\ K_\theta + \sigma^2
    I\big), \quad K_\theta = k_\theta(X, X),

with :math:`k_\theta` one of :mod:`pyro_bdl.nn.kernels` (``rbf``, ``matern12``/``32``/``52``, ``rq``,
``periodic``, ``linear``, the network kernels ``arccos`` and ``arcsin``, their sums and products; one lengthscale
per input) and the mean :math:`m` the training targets' mean (``mean="constant"``) or 0.  Hyperparameters under
weakly informative priors in the data's own units (the scale of the training data, as the other regressors'
standardised units; every value is reported in the data's units):

.. math::

    \ell_d \sim \mathrm{LogNormal}(\log s_{x_d}\sqrt D, 1), \quad v \sim \mathrm{LogNormal}(\log s_y^2, 1), \quad
    \sigma \sim \mathrm{HalfNormal}(s_y), \quad p \sim \mathrm{LogNormal}(\log \bar s_x, 1), \quad
    \alpha,\ \ell_{\rm periodic},\ b \sim \mathrm{LogNormal}(0, 1),

:math:`s` the training data's sds, :math:`D` the number of inputs (so that two typical rows are about one
lengthscale apart, :math:`r^2 \approx 2`, however many inputs; without the :math:`\sqrt D` 64 pixels put every pair
of digits at :math:`k \approx e^{-64}`, where no gradient moves the fit) (a linear kernel's offset as :math:`v`; the network kernels' weight scales
:math:`\ell_d` at the inputs' root mean square).  Every hyperparameter can be fixed (``fixed="lengthscale=0.5,
noise=0.1"``, ``noise=0.1``).

**Large data** (``approximation``; chosen by the number of rows when not named, with a message saying so): M
``inducing`` inputs :math:`Z` (learned by the optimisation-based methods, started at k-means centres) and the
whitened inducing values :math:`v = L_z^{-1} f(Z) \sim \mathcal N(0, I)`, :math:`f_i \mid v \sim \mathcal
N(a_i^\top v, g_i)` (:mod:`pyro_bdl.nn.sparse_gp`).  ``collapsed`` (Titsias 2009) replaces the marginal likelihood
by :math:`\log\mathcal N(y; m, A^\top A + \sigma^2 I) - \sum_i g_i / 2\sigma^2` (every row at every step);
``svgp`` (Hensman et al. 2013) keeps :math:`v` as a latent site, the guide's :math:`q(v)` its posterior, and each
row enters through :math:`\mathbb E_{f_i \mid v} \log \mathcal N(y_i; f_i, \sigma^2) = \log\mathcal N(y_i;
a_i^\top v, \sigma^2) - g_i / 2\sigma^2`, in minibatches (``batch_size``); linear and Gaussian in :math:`v`,
it is conjugate to it, and ``svi`` steps :math:`q(v)` by natural gradients (:mod:`pyro_bdl.inference.natural_gradient`).

The predictive at new rows conditions on the training rows (:mod:`pyro_bdl.nn.gaussian_process`):
:math:`f_* \mid y \sim \mathcal N(m + k_*^\top K^{-1}(y - m),\ k_{**} - k_*^\top K^{-1} k_*)`, the first part of
its variance epistemic, :math:`\sigma^2` aleatoric; at the training rows themselves it is each row's leave-one-out
predictive :math:`y_i \mid y_{-i}`, whose densities are the pointwise log-likelihood ArviZ's LOO takes for a model
whose rows do not factorise (Bürkner et al. 2021).

Example
-------
>>> import torch, pyro_bdl
>>> _ = torch.manual_seed(0); X = torch.linspace(-1, 1, 20)[:, None]; y = torch.sin(3 * X[:, 0]) + 0.1 * torch.randn(20)
>>> fit = pyro_bdl.fit("gp", {"X": X, "y": y}, inference="map", steps=500, lr=0.05, progress=False)
>>> table = fit.predict(torch.tensor([[0.0], [3.0]]))
>>> bool(table["epistemic_sd"][1] > table["epistemic_sd"][0])   # far from the data: unsure of f
True
"""

from __future__ import annotations

import functools

import pyro
import pyro.distributions as dist
import torch

from pyro_bdl.data.table import check_has_features
from pyro_bdl.inference import Domain
from pyro_bdl.inference.base import as_flag
from pyro_bdl.nn.gaussian_process import (GaussianProcessMarginal, GaussianProcessPredictive,
                                          leave_one_out_moments, predictive_moments, say_jitter, stable_cholesky)
from pyro_bdl.nn.gp_hyperparameters import (double, fixed_option, kernel_option, parse_fixed, rows_batch,
                                            sample_hyperparameters)
from pyro_bdl.nn.kernels import parse_kernel
from pyro_bdl.nn.sparse_gp import (CollapsedBound, ExpectedLogLikelihood, LinearGaussianLink,
                                   collapsed_leave_one_out_moments,
                                   collapsed_predictive_moments, inducing_start, whitened_projection)
from pyro_bdl.models.gp.sizes import (APPROXIMATIONS, AUTO_COLLAPSED_ROWS, AUTO_EXACT_ROWS, INDUCING_POINTS,
                                      check_method, choose_approximation)
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, choice, register

__all__ = ["gp", "exact_log_evidence"]

def gp(X: torch.Tensor, y: torch.Tensor | None = None, kernel: str = "rbf", noise: float | None = None,
       mean: str = "constant", fixed=None, approximation: str = "exact", inducing: int = INDUCING_POINTS,
       learn_inducing: bool = True, batch_size: int | None = None, train: tuple | None = None):
    """Gaussian process regression.  ``X``: (n, d); ``y``: (n,) or None; ``train``: the training rows ``(X, y)``
    the predictive conditions on (None while fitting: then ``X``, ``y`` are the training rows); ``approximation``:
    ``exact``, ``collapsed`` or ``svgp`` with ``inducing`` points (``batch_size``: the svgp's minibatch).  Returns y
    (n,) (or the minibatch's)."""
    k = parse_kernel(kernel)
    X_train, y_train = train if train is not None else (X, y)
    values = sample_hyperparameters(k, X_train, y_train, noise, parse_fixed(fixed))
    h = double(values)
    m = y_train.double().mean() if mean == "constant" and y_train is not None else X.new_zeros((), dtype=torch.float64)
    if approximation not in APPROXIMATIONS:
        raise ValueError(f"unknown approximation {approximation!r}; choose one of: {', '.join(APPROXIMATIONS)}")
    if approximation == "exact":
        return _exact(k, h, values, m, X, y, train)
    if batch_size is not None and approximation != "svgp":
        raise ValueError(f"batch_size (minibatches) needs approximation='svgp': the {approximation} GP uses every "
                         f"row at every step")
    # the inducing inputs, learned by the optimisation-based methods unless held at their start (as a sampler holds them)
    Z = pyro.param("inducing_inputs", lambda: inducing_start(X_train, int(inducing)))
    Z = Z if learn_inducing else Z.detach()
    if approximation == "collapsed":
        return _collapsed(k, h, values, m, X, y, Z.double(), train)
    return _svgp(k, h, values, m, X, y, Z.double(), batch_size, train)


def _noisy_matrix(k, h, Xt):
    return k.matrix(Xt, Xt, h) + h["noise"][..., None, None] ** 2 * torch.eye(len(Xt), dtype=torch.float64,
                                                                             device=Xt.device)


def _predictive_site(X, y, mu, latent, noise_var, batch):
    """The rows' predictive ``y ~ N(mu, latent + sigma^2)``, ``latent`` its epistemic part."""
    var = latent + noise_var[..., None]
    if len(batch) and batch[-1] == 1:  # draws laid left of the rows' plate: (draws, 1) -> (draws,) then the rows
        mu, var, latent = (t.reshape(batch[:-1] + t.shape[-1:]) for t in (mu, var, latent))
    with pyro.plate("data", X.shape[0]):
        return pyro.sample("y", GaussianProcessPredictive(mu.to(X.dtype), var.sqrt().to(X.dtype), latent.to(X.dtype)),
                           obs=y)


def _exact(k, h, values, m, X, y, train):
    """y ~ N(m, K + sigma^2 I) on the training rows; the exact predictive (LOO at the training rows) else."""
    X_train, y_train = train if train is not None else (X, y)
    Xt = X_train.double()
    K = _noisy_matrix(k, h, Xt)
    # while fitting, a point whose matrix cannot be factorised has no density (a sampler rejects it); predicting
    # from the fitted values, it is an error that says what to change
    if train is None:  # the training rows: their marginal likelihood, its gradient in closed form
        with torch.no_grad():
            L, jitter = stable_cholesky(K, strict=False)
        say_jitter(jitter, h["noise"], K.diagonal(dim1=-2, dim2=-1).mean(-1))
        K = K + jitter[..., None, None] * torch.eye(len(Xt), dtype=torch.float64, device=X.device)
        return pyro.sample("y", GaussianProcessMarginal(m.expand(K.shape[:-1]), K, L, X.dtype), obs=y)
    L, jitter = stable_cholesky(K)
    say_jitter(jitter, h["noise"], K.diagonal(dim1=-2, dim2=-1).mean(-1))
    resid = y_train.double() - m
    noise_var = h["noise"] ** 2
    if y is not None and X.shape == X_train.shape and torch.equal(X, X_train):  # each training row from the others
        mu, var = leave_one_out_moments(L, resid, m)
        latent = (var - noise_var[..., None]).clamp_min(0.0)
    else:
        Xs = X.double()
        mu, latent = predictive_moments(L, k.matrix(Xt, Xs, h), k.diagonal(Xs, h), resid, m)
    return _predictive_site(X, y, mu, latent, noise_var, rows_batch(values, k))


def _collapsed(k, h, values, m, X, y, Z, train):
    """Titsias's collapsed bound on the training rows; its optimal predictive at new rows, and at the training rows
    each row's leave-one-out predictive under the bound's Nyström model."""
    X_train, y_train = train if train is not None else (X, y)
    Xt, noise_var = X_train.double(), h["noise"] ** 2
    K_zz = k.matrix(Z, Z, h)
    A, gap = whitened_projection(K_zz, k.matrix(Z, Xt, h), k.diagonal(Xt, h))
    if train is None:
        return pyro.sample("y", CollapsedBound(m.expand(gap.shape), A, gap, noise_var, X.dtype), obs=y)
    resid = y_train.double() - m
    if y is not None and X.shape == X_train.shape and torch.equal(X, X_train):  # each training row from the others
        mu, var = collapsed_leave_one_out_moments(A, noise_var, resid, m)
        return _predictive_site(X, y, mu, (var - noise_var[..., None]).clamp_min(0.0), noise_var,
                                rows_batch(values, k))
    Xs = X.double()
    A_star, _ = whitened_projection(K_zz, k.matrix(Z, Xs, h), k.diagonal(Xs, h))
    mu, latent = collapsed_predictive_moments(A, noise_var, resid, A_star, k.diagonal(Xs, h), m)
    return _predictive_site(X, y, mu, latent, noise_var, rows_batch(values, k))


def _svgp(k, h, values, m, X, y, Z, batch_size, train):
    """v ~ N(0, I) the whitened inducing values; each row's f_i | v ~ N(a_i^T v, g_i); while fitting, y_i enters
    through E[log p(y_i | f_i)] (Hensman et al. 2013), on a minibatch of ``batch_size`` rows scaled to them all."""
    v = pyro.sample("inducing_values", dist.Normal(X.new_zeros(()), 1.0).expand([len(Z)]).to_event(1)).double()
    K_zz = k.matrix(Z, Z, h)
    batch = rows_batch(values, k, v.shape[:-1])
    if train is not None:  # the predictive at any rows: f_i | v, then the noise
        Xs = X.double()
        A, gap = whitened_projection(K_zz, k.matrix(Z, Xs, h), k.diagonal(Xs, h))
        mu = m + (A * v.unsqueeze(-1)).sum(-2)
        return _predictive_site(X, y, mu, gap, h["noise"] ** 2, batch)
    with pyro.plate("data", X.shape[0], subsample_size=batch_size) as idx:
        Xb = X[idx].double()
        A, gap = whitened_projection(K_zz, k.matrix(Z, Xb, h), k.diagonal(Xb, h))
        mu = m + (A * v.unsqueeze(-1)).sum(-2)
        if len(batch) and batch[-1] == 1:  # vectorised particles: (particles, 1, B) -> (particles, B)
            mu, gap = (t.reshape(batch[:-1] + t.shape[-1:]) for t in (mu, gap))
        # the rows' density is Gaussian and linear in v: what natural gradients for q(v) read
        link = None if y is None else LinearGaussianLink("inducing_values", A, y[idx].double() - m,
                                                         h["noise"] ** 2)
        return pyro.sample("y", ExpectedLogLikelihood("normal", mu, gap, h["noise"], X.dtype, link),
                           obs=None if y is None else y[idx])


def exact_log_evidence(X, y, kernel: str = "rbf", noise=None, mean: str = "constant", fixed=None, approximation=None,
                       inducing=None) -> float:
    """``log p(y | X)`` (natural log, float64) at fixed hyperparameters: the marginal likelihood of the exact GP
    (whatever ``approximation`` the fit used: the sparse bounds lie below it).  With any of them
    inferred the evidence integrates over them and has no closed form: a ``ValueError`` naming the free ones."""
    k = parse_kernel(kernel)
    given = set(parse_fixed(fixed)) | ({"noise"} if noise is not None else set())
    free = [h.name for h in k.hypers if h.name not in given] + ([] if noise is not None else ["noise"])
    if free:
        raise ValueError(f"the gp evidence is closed-form only with every hyperparameter fixed; free here: "
                         f"{', '.join(free)} (fix them with fixed=... and noise=..., or estimate the evidence with a "
                         f"method that records one, e.g. laplace)")
    with torch.no_grad():
        trace = pyro.poutine.trace(gp).get_trace(X.double(), y.double(), kernel=kernel, noise=noise, mean=mean,
                                                 fixed=fixed)
    return float(trace.nodes["y"]["fn"].log_prob(y.double()))


def predictive_model(model, data: dict):
    """What the draws predict through: the program conditioned on the training rows."""
    return functools.partial(model, train=(data["X"], data["y"]))


SPEC = register(
    ModelSpec(
        name="gp",
        model=gp,
        summary="Gaussian process regression (exact; kernels rbf, matern, rq, periodic, linear, arccos, arcsin, + and *)",
        options={
            "kernel": Option("rbf", "the covariance function: a kernel name, or names joined by + and * "
                                    "(e.g. rbf*periodic+linear)", kernel_option),
            "noise": Option(None, "a fixed noise sd (the target's units); omit to infer it", float,
                            domain=Domain(float, 0, open_low=True, finite=True)),
            "mean": Option("constant", "the prior mean: the training targets' mean (constant) or zero",
                           choice("mean", ("constant", "zero"))),
            "fixed": Option(None, "fixed hyperparameters, name=value pairs (e.g. 'lengthscale=0.5,variance=2')",
                            fixed_option),
            "approximation": Option(None, f"exact, collapsed (Titsias's bound) or svgp (minibatches); omit to choose "
                                          f"by rows (exact up to {AUTO_EXACT_ROWS:,}, collapsed up to "
                                          f"{AUTO_COLLAPSED_ROWS:,})", choice("approximation", APPROXIMATIONS)),
            "inducing": Option(INDUCING_POINTS, "inducing points of the sparse approximations", int,
                               domain=Domain(int, 1)),
            "learn_inducing": Option(True, "learn the inducing inputs (false: hold them at their k-means start)",
                                     as_flag),
        },
        default_data="sine",
        data=DataContract(check=check_has_features, infer_options=choose_approximation, check_method=check_method),
        # svi's guide: one Gaussian over the hyperparameters and the svgp's whitened inducing values, whose posterior
        # is correlated (Hensman et al.'s q(u) has a full covariance)
        inference=InferenceChoices(traits=frozenset({"continuous", "low-dimensional"}), default_guides={"svi": "mvn"}),
        hooks=PostFit(predictive_model=predictive_model, exact_evidence=exact_log_evidence, point_epistemic=True),
        notes=("Large data: up to 50,000 rows the collapsed bound under map (--inference map) is the fast and accurate "
               "choice (its held-out log-likelihood the exact GP's within its standard error in the tests); svgp under "
               "svi (minibatches, --batch-size) steps its q(v) by natural gradients (--set natural_gradient=0.1, the "
               "default; off: Adam, which converges far more slowly); --set jit=true compiles the ELBO and turns them "
               "off.  map and mle take "
               "--set restarts=N (prior draws as the other starts) for a multimodal marginal likelihood (periods, "
               "lengthscales).  benchmarks/RESULTS.md, \"Gaussian processes, second part\"."),
    )
)
