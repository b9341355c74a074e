r"""Gaussian process classification with inducing points (the sparse variational GP of Hensman et al. 2015).

.. math::

    f_c \sim \mathcal{GP}(0, k_\theta)\ \ (c = 1 \dots L), \qquad y_i \sim \mathrm{Bernoulli}\big(\mathrm{sigmoid}
    (f_1(x_i))\big) \ \ (L = 1) \quad\text{or}\quad y_i \sim \mathrm{Categorical}\big(\mathrm{softmax}(f_1(x_i),
    \dots, f_C(x_i))\big)\ \ (L = C),

the latent functions independent under one kernel :math:`k_\theta` (:mod:`pyro_bdl.nn.kernels`; its
hyperparameters under the gp regressor's data-scaled priors, the variance in logit units,
:math:`\mathrm{LogNormal}(0, 1)`).  With M ``inducing`` inputs :math:`Z` (learned, started at k-means centres) and
whitened inducing values :math:`v_c = L_z^{-1} f_c(Z) \sim \mathcal N(0, I_M)`, each row's latent value is
:math:`f_{ci} \mid v \sim \mathcal N(a_i^\top v_c, g_i)` (:mod:`pyro_bdl.nn.sparse_gp`), and the rows enter the
fit through :math:`\mathbb E_{f_i \mid v} \log p(y_i \mid f_i)` (Gauss-Hermite for the Bernoulli, Monte Carlo for
the categorical), in minibatches (``batch_size``): ``svi`` with the guide's :math:`q(v)` is the bound of Hensman,
Matthews & Ghahramani (2015); ``map`` its point estimate; ``nuts`` samples :math:`v` and :math:`\theta` (their
MCMC for variationally sparse GPs).  The predictive integrates :math:`f_i \mid v`: :math:`p(y_* = c) = \mathbb
E[\mathrm{softmax}(f_*)_c]`.

Example
-------
>>> import torch, pyro_bdl
>>> fit = pyro_bdl.fit("gp-classifier", "moons", inference="svi", steps=800, lr=0.05, samples=50,
...                    options={"inducing": 16}, progress=False)
>>> table = fit.predict(torch.tensor([[0.0, 1.0], [1.0, -0.5]]))   # a point on the upper moon, one on the lower
>>> [int(c) for c in table["pred"]]
[0, 1]
"""

from __future__ import annotations

import functools

import pyro
import pyro.distributions as dist
import torch

from pyro_bdl.data.table import check_has_features
from pyro_bdl.inference import Domain
from pyro_bdl.inference.base import as_flag
from pyro_bdl.models.gp.sizes import INDUCING_POINTS
from pyro_bdl.models.networks import check_labels, num_classes as classes_of_labels
from pyro_bdl.nn.gp_hyperparameters import fixed_option, kernel_option, parse_fixed, rows_batch, sample_hyperparameters
from pyro_bdl.nn.kernels import parse_kernel
from pyro_bdl.nn.sparse_gp import ExpectedLogLikelihood, inducing_start, latent_class_probabilities, whitened_projection
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, Task, register

__all__ = ["gp_classifier", "LIKELIHOODS"]

LIKELIHOODS = ("bernoulli", "categorical")


def gp_classifier(X: torch.Tensor, y: torch.Tensor | None = None, num_classes: int | None = None, kernel: str = "rbf",
                  likelihood: str | None = None, inducing: int = INDUCING_POINTS, learn_inducing: bool = True,
                  fixed=None, batch_size: int | None = None, predictive: bool = False):
    """GP classification.  ``X``: (n, d); ``y``: (n,) labels in [0, num_classes) or None; ``likelihood``:
    ``bernoulli`` (two classes, one latent function) or ``categorical`` (one per class; None: bernoulli for two
    classes); ``predictive``: the rows' predictive class probabilities instead of the bound's data term.  Returns y
    (n,) (or the minibatch's)."""
    if num_classes is None:
        raise ValueError("gp_classifier needs num_classes")
    C = int(num_classes)
    likelihood = likelihood or ("bernoulli" if C == 2 else "categorical")
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"unknown likelihood {likelihood!r}; choose one of: {', '.join(LIKELIHOODS)}")
    if likelihood == "bernoulli" and C != 2:
        raise ValueError(f"the bernoulli likelihood is for two classes; the labels have {C}: use categorical")
    k = parse_kernel(kernel)
    values = sample_hyperparameters(k, X, None, None, parse_fixed(fixed), with_noise=False)
    h = {name: t.double() for name, t in values.items()}
    Z = pyro.param("inducing_inputs", lambda: inducing_start(X, int(inducing)))
    Z = (Z if learn_inducing else Z.detach()).double()  # learned unless held at the k-means start
    latents = 1 if likelihood == "bernoulli" else C
    v = pyro.sample("inducing_values", dist.Normal(X.new_zeros(()), 1.0).expand([latents, len(Z)]).to_event(2))
    K_zz = k.matrix(Z, Z, h)
    batch = rows_batch(values, k, v.shape[:-2])
    with pyro.plate("data", X.shape[0], subsample_size=None if predictive else batch_size) as idx:
        Xb = X[idx].double()
        A, gap = whitened_projection(K_zz, k.matrix(Z, Xb, h), k.diagonal(Xb, h))  # (..., M, B), (..., B)
        f_loc = (v.double().unsqueeze(-1) * A.unsqueeze(-3)).sum(-2).transpose(-1, -2)  # (..., B, L)
        f_var = gap.unsqueeze(-1).expand(f_loc.shape)
        if len(batch) and batch[-1] == 1:  # draws laid left of the rows' plate: (draws, 1) -> (draws,) then the rows
            f_loc, f_var = (t.reshape(batch[:-1] + t.shape[-2:]) for t in (f_loc, f_var))
        if likelihood == "bernoulli":
            f_loc, f_var = f_loc[..., 0], f_var[..., 0]
        obs = None if y is None else y[idx]
        if predictive:
            probs = latent_class_probabilities(likelihood, f_loc, f_var).to(X.dtype)
            return pyro.sample("y", dist.Categorical(probs=probs), obs=None if obs is None else obs.long())
        return pyro.sample("y", ExpectedLogLikelihood(likelihood, f_loc, f_var, None, X.dtype), obs=obs)


def _likelihood(text: str) -> str:
    if text not in LIKELIHOODS:
        raise ValueError(f"unknown likelihood {text!r}; choose one of: {', '.join(LIKELIHOODS)}")
    return text


def _check(dataset) -> None:
    check_has_features(dataset)
    check_labels(dataset)


def predictive_model(model, data: dict):
    """What the draws predict through: the rows' class probabilities, the latent values integrated out."""
    return functools.partial(model, predictive=True)


SPEC = register(
    ModelSpec(
        name="gp-classifier",
        model=gp_classifier,
        summary="Gaussian process classification (Bernoulli or categorical), sparse variational with inducing points",
        options={
            "num_classes": Option(None, "number of classes (default: from the labels)", int, domain=Domain(int, 2)),
            "kernel": Option("rbf", "the covariance function of each latent function (e.g. rbf, matern52, rbf+linear)",
                             kernel_option),
            "likelihood": Option(None, "bernoulli (two classes) or categorical; omit: bernoulli for two classes",
                                 _likelihood),
            "inducing": Option(INDUCING_POINTS, "inducing points", int, domain=Domain(int, 1)),
            "learn_inducing": Option(True, "learn the inducing inputs (false: hold them at their k-means start)",
                                     as_flag),
            "fixed": Option(None, "fixed kernel hyperparameters, name=value pairs (e.g. 'lengthscale=0.5')",
                            fixed_option),
        },
        default_data="moons",
        data=DataContract(task=Task.CLASSIFICATION, check=_check, infer_options=classes_of_labels),
        inference=InferenceChoices(traits=frozenset({"continuous", "low-dimensional"}), default_guides={"svi": "mvn"},
                                   # nuts samples the whitened inducing values too: 510 s on the embedded moons on
                                   # the 2-core dev machine (2026-12-02), where svi takes seconds
                                   default_method="svi"),
        hooks=PostFit(predictive_model=predictive_model),
    )
)
