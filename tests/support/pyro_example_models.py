"""Pyro's own example and tutorial models, written as Pyro writes them, with their data in the forms a Pyro user
has it: shared by tests/test_pyro_examples.py and by benchmarks/pyro_examples_reference.py (which runs Pyro's
``MCMC(NUTS(model))`` on each to make tests/support/fixtures/pyro_examples_reference.json).

Each model keeps the signature, argument names and idioms of the Pyro file it follows (named in
:data:`EXAMPLES`); they are short rewrites, not copies.  Data are either the published numbers (eight schools:
Rubin 1981; baseball: Efron & Morris 1975, first 45 at-bats; pumps: Gaver & O'Muircheartaigh 1987) or generated
with a fixed seed where the original cannot be shipped (the ruggedness CSV) or does not exist.

Data forms exercised (what ``pyro_bdl.fit(model, data)`` is given; the reference script turns every form into
Pyro's ``mcmc.run(*args, **kwargs)`` with :func:`as_pyro_call`):

====================================  =================================================================
example                               data form
====================================  =================================================================
eight_schools_mcmc                    dict whose keys include ``model`` (a callable): the argument of
                                      ``conditioned_model(model, sigma, y)``
eight_schools_mcmc_positional         positional tuple ``(model, sigma, y)``, as ``mcmc.run(model,
                                      data.sigma, data.y)`` in examples/eight_schools/mcmc.py
eight_schools_centered / _noncentered dict with a Python int (``J``) beside tensors
fully_pooled, partially_pooled        positional tuple ``(at_bats, hits)``, as ``mcmc.run(at_bats, hits)``
not_pooled, ..._with_logit            dict of tensors ``{"at_bats": ..., "hits": ...}``
ruggedness                            dict of float tensors
bayesian_regression_module            dict of tensors, the model a PyroModule instance
horseshoe                             dict of NumPy float64 arrays (as from ``df.values``)
hierarchical_logistic                 dict with an integer (int64) index tensor beside float tensors
pumps                                 dict of tensors; a ``pyro.deterministic`` site
poisson_regression                    positional tuple of tensors ``(X, counts)``
gmm                                   dict ``{"data": tensor}``; ``@config_enumerate`` discrete site
====================================  =================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import config_enumerate
from pyro.infer.reparam import LocScaleReparam
from pyro.nn import PyroModule, PyroSample
from torch import nn

# ----------------------------------------------------------------------------------------------------------
# 1. examples/eight_schools/mcmc.py and data.py: the non-centred model, without plates, observed through
#    poutine.condition in conditioned_model(model, sigma, y) -- its first argument is named ``model``.
# ----------------------------------------------------------------------------------------------------------
J = 8
y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
sigma = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools_model(sigma):
    """examples/eight_schools/mcmc.py's ``model(sigma)``: eta (8,), mu (1,), tau (1,); obs (8,) unobserved here."""
    eta = pyro.sample("eta", dist.Normal(torch.zeros(J), torch.ones(J)))
    mu = pyro.sample("mu", dist.Normal(torch.zeros(1), 10 * torch.ones(1)))
    tau = pyro.sample("tau", dist.HalfCauchy(scale=25 * torch.ones(1)))

    theta = mu + tau * eta

    return pyro.sample("obs", dist.Normal(theta, sigma))


def conditioned_model(model, sigma, y):
    """examples/eight_schools/mcmc.py's ``conditioned_model``: ``model`` conditioned on ``obs = y``."""
    return poutine.condition(model, data={"obs": y})(sigma)


# ----------------------------------------------------------------------------------------------------------
# 2-3. Eight schools in keyword form, model(J, sigma, y=None) (the form of Pyro's and NumPyro's MCMC tests and
#      NumPyro's README), centred, and non-centred by Pyro's reparameterisation handler.
# ----------------------------------------------------------------------------------------------------------
def eight_schools_centered(J, sigma, y=None):
    """Centred eight schools: theta (J,) ~ N(mu, tau); obs (J,) ~ N(theta, sigma)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(5.0))
    with pyro.plate("J", J):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("obs", dist.Normal(theta, sigma), obs=y)


#: The same model non-centred the way Pyro's reparam docs do it: a latent ``theta_decentered`` and a
#: deterministic ``theta`` (the same posterior of mu, tau and theta as the centred one).
eight_schools_noncentered = poutine.reparam(eight_schools_centered, config={"theta": LocScaleReparam(centered=0.0)})


# ----------------------------------------------------------------------------------------------------------
# 4-7. examples/baseball.py: the four models, with Efron & Morris (1975): 18 players, hits in their first 45
#      at-bats of the 1970 season.
# ----------------------------------------------------------------------------------------------------------
PLAYERS = ["Roberto Clemente", "Frank Robinson", "Frank Howard", "Jay Johnstone", "Ken Berry", "Jim Spencer",
           "Don Kessinger", "Luis Alvarado", "Ron Santo", "Ron Swoboda", "Rico Petrocelli", "Ellie Rodriguez",
           "George Scott", "Del Unser", "Billy Williams", "Bert Campaneris", "Thurman Munson", "Max Alvis"]
HITS_45 = [18, 17, 16, 15, 14, 14, 13, 12, 11, 11, 10, 10, 10, 10, 10, 9, 8, 7]


def baseball_data() -> tuple[torch.Tensor, torch.Tensor]:
    """``(at_bats, hits)``, float tensors (18,), as examples/baseball.py's ``train[:, 0], train[:, 1]``."""
    train = torch.tensor([[45, h] for h in HITS_45], dtype=torch.float)
    return train[:, 0], train[:, 1]


def fully_pooled(at_bats, hits):
    """One success probability phi ~ U(0, 1) for all players; hits ~ Binomial(at_bats, phi)."""
    phi_prior = dist.Uniform(at_bats.new_tensor(0), at_bats.new_tensor(1))
    phi = pyro.sample("phi", phi_prior)
    return pyro.sample("obs", dist.Binomial(at_bats, phi), obs=hits)


def not_pooled(at_bats, hits):
    """phi (players,) ~ U(0, 1) independently."""
    num_players = at_bats.shape[0]
    with pyro.plate("num_players", num_players):
        phi_prior = dist.Uniform(at_bats.new_tensor(0), at_bats.new_tensor(1))
        phi = pyro.sample("phi", phi_prior)
        return pyro.sample("obs", dist.Binomial(at_bats, phi), obs=hits)


def partially_pooled(at_bats, hits):
    """phi (players,) ~ Beta(m kappa, (1 - m) kappa), m ~ U(0, 1), kappa ~ Pareto(1, 1.5)."""
    num_players = at_bats.shape[0]
    m = pyro.sample("m", dist.Uniform(at_bats.new_tensor(0), at_bats.new_tensor(1)))
    kappa = pyro.sample("kappa", dist.Pareto(at_bats.new_tensor(1), at_bats.new_tensor(1.5)))
    with pyro.plate("num_players", num_players):
        phi_prior = dist.Beta(m * kappa, (1 - m) * kappa)
        phi = pyro.sample("phi", phi_prior)
        return pyro.sample("obs", dist.Binomial(at_bats, phi), obs=hits)


def partially_pooled_with_logit(at_bats, hits):
    """alpha (players,) ~ N(loc, scale), loc ~ N(-1, 1), scale ~ HalfCauchy(1); hits ~ Binomial(logits=alpha)."""
    num_players = at_bats.shape[0]
    loc = pyro.sample("loc", dist.Normal(at_bats.new_tensor(-1), at_bats.new_tensor(1)))
    scale = pyro.sample("scale", dist.HalfCauchy(scale=at_bats.new_tensor(1)))
    with pyro.plate("num_players", num_players):
        alpha = pyro.sample("alpha", dist.Normal(loc, scale))
        return pyro.sample("obs", dist.Binomial(at_bats, logits=alpha), obs=hits)


# ----------------------------------------------------------------------------------------------------------
# 8-9. The Bayesian regression tutorial (tutorial/source/bayesian_regression.ipynb and intro_long.ipynb): log GDP
#      against ruggedness and Africa, as a plain function and as a PyroModule.  The tutorial's CSV cannot be
#      downloaded here: a stand-in of the same size and shape, generated with a fixed seed.
# ----------------------------------------------------------------------------------------------------------
def rugged_data(seed: int = 0, n: int = 170) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(is_cont_africa, ruggedness, log_gdp)``, float tensors (170,): Africa 0/1 with probability 0.3,
    ruggedness 6 Beta(1.2, 4) (in [0, 6], right-skewed), log GDP = 9.2 - 1.9 A - 0.2 R + 0.4 A R + N(0, 0.95^2)."""
    rng = np.random.default_rng(seed)
    africa = (rng.random(n) < 0.3).astype(np.float64)
    rugged = 6.0 * rng.beta(1.2, 4.0, size=n)
    log_gdp = 9.2 - 1.9 * africa - 0.2 * rugged + 0.4 * africa * rugged + 0.95 * rng.normal(size=n)
    return tuple(torch.tensor(v, dtype=torch.float) for v in (africa, rugged, log_gdp))


def ruggedness_model(is_cont_africa, ruggedness, log_gdp=None):
    """The tutorial's ``model(is_cont_africa, ruggedness, log_gdp=None)``: a, bA, bR, bAR, sigma ~ U(0, 10)."""
    a = pyro.sample("a", dist.Normal(0.0, 10.0))
    b_a = pyro.sample("bA", dist.Normal(0.0, 1.0))
    b_r = pyro.sample("bR", dist.Normal(0.0, 1.0))
    b_ar = pyro.sample("bAR", dist.Normal(0.0, 1.0))
    sigma = pyro.sample("sigma", dist.Uniform(0.0, 10.0))

    mean = a + b_a * is_cont_africa + b_r * ruggedness + b_ar * is_cont_africa * ruggedness

    with pyro.plate("data", len(ruggedness)):
        return pyro.sample("obs", dist.Normal(mean, sigma), obs=log_gdp)


class BayesianRegression(PyroModule):
    """The tutorial's PyroModule regression: ``linear.weight`` (out, in) ~ N(0, 1), ``linear.bias`` (out,)
    ~ N(0, 10^2) by PyroSample; ``forward(x, y=None)`` with x (N, in), y (N,)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = PyroModule[nn.Linear](in_features, out_features)
        self.linear.weight = PyroSample(dist.Normal(0.0, 1.0).expand([out_features, in_features]).to_event(2))
        self.linear.bias = PyroSample(dist.Normal(0.0, 10.0).expand([out_features]).to_event(1))

    def forward(self, x, y=None):
        sigma = pyro.sample("sigma", dist.Uniform(0.0, 10.0))
        mean = self.linear(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(mean, sigma), obs=y)
        return mean


def module_regression_data(seed: int = 0) -> dict:
    """The tutorial's ``x_data`` (170, 3): Africa, ruggedness and their product; ``y_data`` (170,)."""
    africa, rugged, log_gdp = rugged_data(seed)
    return {"x": torch.stack([africa, rugged, africa * rugged], dim=-1), "y": log_gdp}


# ----------------------------------------------------------------------------------------------------------
# 10. Horseshoe regression, written as NumPyro's examples/horseshoe_regression.py writes it (no plates; Pyro
#     has no horseshoe example of its own), with NumPy data.
# ----------------------------------------------------------------------------------------------------------
def horseshoe_data(seed: int = 1, n: int = 60, d: int = 6) -> dict:
    """``X`` (60, 6), ``Y`` (60,) as NumPy float64: two of six coefficients non-zero (2, -1.5), noise 0.5."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    beta = np.array([2.0, -1.5] + [0.0] * (d - 2))
    return {"X": X, "Y": X @ beta + 0.5 * rng.normal(size=n)}


def horseshoe_regression(X, Y):
    """lambdas (D,), tau (1,) ~ HalfCauchy(1); unscaled_betas (D,) ~ N(0, 1); betas = tau lambdas unscaled_betas
    (deterministic); prec_obs ~ Gamma(3, 1); Y ~ N(X betas, prec_obs^-1/2)."""
    D_X = X.shape[1]
    lambdas = pyro.sample("lambdas", dist.HalfCauchy(torch.ones(D_X)))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.ones(1)))
    unscaled_betas = pyro.sample("unscaled_betas", dist.Normal(0.0, torch.ones(D_X)))
    scaled_betas = pyro.deterministic("betas", tau * lambdas * unscaled_betas)
    mean_function = X @ scaled_betas
    prec_obs = pyro.sample("prec_obs", dist.Gamma(3.0, 1.0))
    sigma_obs = 1.0 / torch.sqrt(prec_obs)
    pyro.sample("Y", dist.Normal(mean_function, sigma_obs), obs=Y)


# ----------------------------------------------------------------------------------------------------------
# 11. A hierarchical logistic regression (varying intercepts), in the idioms of Pyro's examples: plates, an
#     integer index tensor, ``.expand(...).to_event(1)``.
# ----------------------------------------------------------------------------------------------------------
def logistic_data(seed: int = 2, groups: int = 8, per_group: int = 80) -> dict:
    """``x`` (640, 2) float, ``group`` (640,) int64 in 0..7, ``y`` (640,) 0/1 float: intercepts N(-0.3, 1), slopes
    (1.0, -0.7).  80 observations a group pin each intercept to about 0.25 against a spread of 1 between groups: the
    centred form suits these data (with 40 a group in 6 groups, Pyro's NUTS diverged 196 times in 4000 draws)."""
    rng = np.random.default_rng(seed)
    n = groups * per_group
    x = rng.normal(size=(n, 2))
    group = np.repeat(np.arange(groups), per_group)
    alpha = -0.3 + 1.0 * rng.normal(size=groups)
    logits = alpha[group] + x @ np.array([1.0, -0.7])
    y = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(np.float64)
    return {"x": torch.tensor(x, dtype=torch.float), "group": torch.tensor(group),
            "y": torch.tensor(y, dtype=torch.float)}


def hierarchical_logistic(x, group, y=None):
    """alpha (groups,) ~ N(mu_alpha, sigma_alpha); beta (2,) ~ N(0, 1); y ~ Bernoulli(logits=alpha[group] + x beta)."""
    num_groups = int(group.max()) + 1
    mu_alpha = pyro.sample("mu_alpha", dist.Normal(0.0, 2.0))
    sigma_alpha = pyro.sample("sigma_alpha", dist.HalfNormal(1.0))
    beta = pyro.sample("beta", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("groups", num_groups):
        alpha = pyro.sample("alpha", dist.Normal(mu_alpha, sigma_alpha))
    with pyro.plate("data", x.shape[0]):
        return pyro.sample("obs", dist.Bernoulli(logits=alpha[group] + x @ beta), obs=y)


# ----------------------------------------------------------------------------------------------------------
# 12. Gamma-Poisson: the BUGS "pumps" model (Gaver & O'Muircheartaigh 1987), with pyro.deterministic.
# ----------------------------------------------------------------------------------------------------------
PUMP_HOURS = [94.3, 15.7, 62.9, 126.0, 5.24, 31.4, 1.05, 1.05, 2.1, 10.5]  # thousands of hours
PUMP_FAILURES = [5.0, 1.0, 5.0, 14.0, 3.0, 19.0, 1.0, 1.0, 4.0, 22.0]


def pumps(t, x=None):
    """theta (10,) ~ Gamma(alpha, beta), alpha ~ Exp(1), beta ~ Gamma(0.1, 1); x ~ Poisson(theta t);
    ``expected`` = theta t (deterministic)."""
    alpha = pyro.sample("alpha", dist.Exponential(1.0))
    beta = pyro.sample("beta", dist.Gamma(0.1, 1.0))
    with pyro.plate("pumps", len(t)):
        theta = pyro.sample("theta", dist.Gamma(alpha, beta))
        rate = pyro.deterministic("expected", theta * t)
        return pyro.sample("x", dist.Poisson(rate), obs=x)


# ----------------------------------------------------------------------------------------------------------
# 13. A Poisson GLM (log link).
# ----------------------------------------------------------------------------------------------------------
def poisson_data(seed: int = 3, n: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, counts)``: X (100, 3) ~ N(0, 1), counts (100,) float ~ Poisson(exp(1 + X (0.5, -0.3, 0.2)))."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    counts = rng.poisson(np.exp(1.0 + X @ np.array([0.5, -0.3, 0.2])))
    return torch.tensor(X, dtype=torch.float), torch.tensor(counts, dtype=torch.float)


def poisson_regression(X, counts=None):
    """intercept ~ N(0, 5^2); coef (3,) ~ N(0, 1); counts ~ Poisson(exp(intercept + X coef))."""
    intercept = pyro.sample("intercept", dist.Normal(0.0, 5.0))
    coef = pyro.sample("coef", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    with pyro.plate("data", X.shape[0]):
        return pyro.sample("counts", dist.Poisson(torch.exp(intercept + X @ coef)), obs=counts)


# ----------------------------------------------------------------------------------------------------------
# 14. tutorial/source/gmm.ipynb: a mixture of K = 2 Gaussians with a shared scale, the assignments enumerated.
#     The tutorial's five points give a posterior with several modes besides the label swap; 100 points from two
#     separated clusters keep it to the label swap, which :func:`gmm_relabel` removes.
# ----------------------------------------------------------------------------------------------------------
K = 2


@config_enumerate
def gmm(data):
    """weights (K,) ~ Dirichlet(0.5), scale ~ LogNormal(0, 2), locs (K,) ~ N(0, 10^2); assignment enumerated."""
    weights = pyro.sample("weights", dist.Dirichlet(0.5 * torch.ones(K)))
    scale = pyro.sample("scale", dist.LogNormal(0.0, 2.0))
    with pyro.plate("components", K):
        locs = pyro.sample("locs", dist.Normal(0.0, 10.0))

    with pyro.plate("data", len(data)):
        assignment = pyro.sample("assignment", dist.Categorical(weights))
        pyro.sample("obs", dist.Normal(locs[assignment], scale), obs=data)


def gmm_data(seed: int = 4, n: int = 100) -> torch.Tensor:
    """(100,) points: 35 % from N(-2, 1), 65 % from N(3, 1)."""
    rng = np.random.default_rng(seed)
    first = rng.random(n) < 0.35
    return torch.tensor(np.where(first, -2.0, 3.0) + rng.normal(size=n), dtype=torch.float)


def gmm_relabel(draws: dict) -> dict:
    """The draws with the components ordered by their locs in every draw (arrays (..., K)): the label-invariant
    posterior, the same for every chain whichever labelling it found."""
    order = np.argsort(draws["locs"], axis=-1)
    out = dict(draws)
    for site in ("locs", "weights"):
        out[site] = np.take_along_axis(draws[site], order, axis=-1)
    return out


# ----------------------------------------------------------------------------------------------------------
# The examples, their data as the user passes them, and how Pyro's reference run calls them.
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Example:
    """One example: ``model`` as Pyro writes it, ``data()`` in the form a user passes to ``pyro_bdl.fit``,
    ``source`` the Pyro file it follows, ``reference`` the name of its entry in the reference file (examples that
    differ only in their data's form share one), ``compare`` the sites compared with the reference (None: all
    the reference holds), ``relabel`` a map of draws to a label-invariant form (mixtures), ``nuts`` extra
    arguments of Pyro's NUTS for the reference run, ``derived`` sites that are functions of the latents but that
    Pyro's ``site_is_deterministic`` does not flag (a reparameterisation handler's rebuilt site), recorded too,
    ``reference_model`` the model Pyro's reference run samples instead of ``model``: the same posterior
    non-centred, where ``model``'s funnel makes every NUTS run diverge and so biases it."""

    name: str
    model: Callable
    data: Callable[[], object]
    source: str
    reference: str = ""
    compare: tuple | None = None
    relabel: Callable | None = None
    nuts: dict = field(default_factory=dict)
    derived: tuple = ()
    reference_model: Callable | None = None

    @property
    def reference_name(self) -> str:
        return self.reference or self.name


def _schools_keyword() -> dict:
    return {"J": J, "sigma": sigma, "y": y}


def _baseball_dict() -> dict:
    at_bats, hits = baseball_data()
    return {"at_bats": at_bats, "hits": hits}


def _pumps() -> dict:
    return {"t": torch.tensor(PUMP_HOURS), "x": torch.tensor(PUMP_FAILURES)}


EXAMPLES = {e.name: e for e in [
    Example("eight_schools_mcmc", conditioned_model, lambda: {"model": eight_schools_model, "sigma": sigma, "y": y},
            "examples/eight_schools/mcmc.py"),
    Example("eight_schools_mcmc_positional", conditioned_model, lambda: (eight_schools_model, sigma, y),
            "examples/eight_schools/mcmc.py", reference="eight_schools_mcmc"),
    # the centred funnel biases every NUTS run: its reference is the non-centred model's run (the same posterior)
    Example("eight_schools_centered", eight_schools_centered, _schools_keyword,
            "keyword eight schools (Pyro/NumPyro MCMC tests)", reference="eight_schools_noncentered",
            compare=("mu", "tau", "theta")),
    Example("eight_schools_noncentered", eight_schools_noncentered, _schools_keyword,
            "keyword eight schools + poutine.reparam(LocScaleReparam)", derived=("theta",)),
    Example("fully_pooled", fully_pooled, baseball_data, "examples/baseball.py"),
    Example("not_pooled", not_pooled, _baseball_dict, "examples/baseball.py"),
    # kappa's posterior has a Pareto tail (~ kappa^-2.5: the likelihood tends to the fully pooled one as kappa grows),
    # so no variance: its sample mean has no sd / sqrt(ESS) error; m and phi are compared
    Example("partially_pooled", partially_pooled, baseball_data, "examples/baseball.py", compare=("m", "phi")),
    # as written (centred), Pyro's NUTS diverged 39 times in 4000 draws (r_hat 1.045): the scale's posterior piles
    # up near 0, a funnel; the reference samples the same posterior non-centred
    Example("partially_pooled_with_logit", partially_pooled_with_logit, _baseball_dict, "examples/baseball.py",
            compare=("loc", "scale", "alpha"), derived=("alpha",),
            reference_model=poutine.reparam(partially_pooled_with_logit,
                                            config={"alpha": LocScaleReparam(centered=0.0)})),
    Example("ruggedness", ruggedness_model, lambda: dict(zip(("is_cont_africa", "ruggedness", "log_gdp"),
                                                             rugged_data())),
            "tutorial/source/bayesian_regression.ipynb (part II) / intro_long.ipynb"),
    Example("bayesian_regression_module", BayesianRegression(3, 1), module_regression_data,
            "tutorial/source/bayesian_regression.ipynb (PyroModule)"),
    # lambdas and tau have half-Cauchy tails that the likelihood damps only to infinite variance: their sample
    # means have no sd / sqrt(ESS) error to test against, so the coefficients and the noise are compared
    # Pyro's NUTS needs trees of ~1000 steps here (0.5 s an iteration with its JIT): its reference run is short
    Example("horseshoe", horseshoe_regression, horseshoe_data, "NumPyro examples/horseshoe_regression.py",
            compare=("betas", "prec_obs"), nuts={"jit_compile": True, "ignore_jit_warnings": True}),
    Example("hierarchical_logistic", hierarchical_logistic, logistic_data, "Pyro idioms (no single file)"),
    Example("pumps", pumps, _pumps, "BUGS pumps (Gamma-Poisson)"),
    Example("poisson_regression", poisson_regression, poisson_data, "Pyro idioms (no single file)"),
    Example("gmm", gmm, lambda: {"data": gmm_data()}, "tutorial/source/gmm.ipynb", relabel=gmm_relabel,
            nuts={"max_plate_nesting": 1}),
]}


def as_pyro_call(data) -> tuple[tuple, dict]:
    """``(args, kwargs)`` for Pyro's ``mcmc.run(*args, **kwargs)`` from a data form of :data:`EXAMPLES`: a tuple is
    positional, a dict by keyword; NumPy float arrays become tensors of torch's default dtype (Pyro itself takes
    only tensors), integer arrays int64 tensors."""
    def convert(value):
        if isinstance(value, np.ndarray):
            return torch.tensor(value, dtype=torch.get_default_dtype() if value.dtype.kind == "f" else torch.long)
        return value

    if isinstance(data, tuple):
        return tuple(convert(v) for v in data), {}
    if isinstance(data, dict):
        return (), {k: convert(v) for k, v in data.items()}
    return (convert(data),), {}
