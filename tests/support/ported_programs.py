"""A second set of programs ported from Pyro's and NumPyro's examples (issue 53), written as their files write
them, with generated data where the original cannot be shipped: shared by tests/test_ported_programs.py.

====================================  ===========================================================================
program                               what it exercises
====================================  ===========================================================================
lkj (Pyro examples/lkj.py)            float64 data (``y.double()``), an ``LKJCholesky`` correlation factor
funnel (NumPyro examples/funnel.py)   a density with no observed site, centred and non-centred
two_observed (a toy mixture's form)   two observed sites per row, for LOO over rows
DigitsMLP (Pyro's PyroModule idiom)   a tanh MLP with N(0, 1) ``PyroSample`` weights: a point start at 0 is a saddle
gp (NumPyro examples/gp.py)           LogNormal(0, 10) hyperpriors, whose mean e^50 no kernel matrix survives
====================================  ===========================================================================
"""

from __future__ import annotations

import itertools

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer import config_enumerate
from pyro.infer.reparam import LocScaleReparam
from pyro.ops.indexing import Vindex
from torch.distributions import constraints
from pyro.nn import PyroModule, PyroSample
from torch import nn

from support.pyro_example_models import Example

# ----------------------------------------------------------------------------------------------------------
# Pyro examples/lkj.py: theta ~ HalfCauchy(1) (d), L_omega ~ LKJCholesky(d, 1), y_n ~ MVN(0, diag(sqrt theta) L_omega),
# y passed as float64 as the example does (``y = ... .double()``).
# ----------------------------------------------------------------------------------------------------------

def lkj_data(seed: int = 0, n: int = 100, d: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale_tril = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.8, 0.0], [-0.3, 0.2, 0.9]])[:d, :d]
    return (torch.randn(n, d, generator=g) @ scale_tril.T).double()


def lkj(y):
    d, n = y.shape[1], y.shape[0]
    options = dict(dtype=y.dtype, device=y.device)
    theta = pyro.sample("theta", dist.HalfCauchy(torch.ones(d, **options)).to_event(1))
    eta = torch.ones((), **options)
    L_omega = pyro.sample("L_omega", dist.LKJCholesky(d, eta))
    L_Omega = torch.mm(torch.diag(theta.sqrt()), L_omega)
    mu = torch.zeros(d, **options)
    with pyro.plate("observations", n):
        pyro.sample("obs", dist.MultivariateNormal(mu, scale_tril=L_Omega), obs=y)


# ----------------------------------------------------------------------------------------------------------
# NumPyro examples/funnel.py: Neal's funnel, y ~ N(0, 3), x ~ N(0, exp(y / 2)), no data at all; the
# non-centred form through LocScaleReparam(0.0), as the example's ``reparam_model``.
# ----------------------------------------------------------------------------------------------------------

def funnel(dim: int = 10):
    y = pyro.sample("y", dist.Normal(0.0, 3.0))
    pyro.sample("x", dist.Normal(torch.zeros(dim - 1), torch.exp(y / 2)).to_event(1))


def funnel_noncentred(dim: int = 10):
    with pyro.poutine.reparam(config={"x": LocScaleReparam(0.0)}):
        funnel(dim)


# ----------------------------------------------------------------------------------------------------------
# Two observed sites per row, as Pyro's examples/toy_mixture_model_discrete_enumeration.py observes A and C of each
# row: here a height h_n ~ N(mu, 1) and a flag c_n ~ Bernoulli(sigmoid(beta)).
# ----------------------------------------------------------------------------------------------------------

def two_observed_data(seed: int = 5, n: int = 40) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"h": torch.randn(n, generator=g) + 1.0, "c": (torch.rand(n, generator=g) < 0.7).float()}


def two_observed(h, c):
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    beta = pyro.sample("beta", dist.Normal(0.0, 2.0))
    with pyro.plate("rows", len(h)):
        pyro.sample("height", dist.Normal(mu, 1.0), obs=h)
        pyro.sample("flag", dist.Bernoulli(logits=beta), obs=c)


def one_observed(h, c):
    """``two_observed`` without the flag's model: its flags are not predicted (a worse model of the rows)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
    with pyro.plate("rows", len(h)):
        pyro.sample("height", dist.Normal(mu, 1.0), obs=h)
        pyro.sample("flag", dist.Bernoulli(0.5), obs=c)


# ----------------------------------------------------------------------------------------------------------
# A PyroModule MLP as Pyro's Bayesian-regression tutorial writes its layers: PyroModule[nn.Linear] with N(0, 1)
# PyroSample weights, tanh hidden units, a categorical likelihood over the digits' ten classes.
# ----------------------------------------------------------------------------------------------------------

def _layer(n_in: int, n_out: int):
    layer = PyroModule[nn.Linear](n_in, n_out)
    layer.weight = PyroSample(dist.Normal(0.0, 1.0).expand([n_out, n_in]).to_event(2))
    layer.bias = PyroSample(dist.Normal(0.0, 1.0).expand([n_out]).to_event(1))
    return layer


class DigitsMLP(PyroModule):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.fc1, self.fc2 = _layer(64, hidden), _layer(hidden, 10)

    def forward(self, x, y=None):
        logits = self.fc2(torch.tanh(self.fc1(x)))
        with pyro.plate("data", x.shape[0]):
            return pyro.sample("obs", dist.Categorical(logits=logits), obs=y)


#: The point fits of DigitsMLP that tests/test_ported_programs.py holds to Pyro's AutoDelta on the same settings
#: (benchmarks/pyro_autodelta_reference.py, tests/support/fixtures/digits_autodelta_reference.json)
DIGITS_MAP = {"hidden": 16, "steps": 300, "lr": 0.05}


def digits_data(rows: int = 600) -> tuple[dict, dict]:
    """(train, test) of scikit-learn's digits scaled to [0, 1]: the first ``rows`` rows and the 500 after them."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
    return {"x": X[:rows], "y": y[:rows]}, {"x": X[rows:rows + 500], "y": y[rows:rows + 500]}


# ----------------------------------------------------------------------------------------------------------
# NumPyro examples/gp.py: an RBF-kernel GP regression with LogNormal(0, 10) hyperpriors (kernel variance, its
# lengthscale, the noise) and the outputs a MultivariateNormal over the n points, on the example's generated data.
# ----------------------------------------------------------------------------------------------------------

def gp_data(seed: int = 0, n: int = 25) -> dict:
    g = torch.Generator().manual_seed(seed)
    X = torch.linspace(-1.0, 1.0, n)
    Y = torch.sin(X * 6.0) * 0.5 + (X * 6.0 - 2.0) * 0.02 + 0.1 * torch.randn(n, generator=g)
    return {"X": X, "Y": Y}


def _rbf(X, Z, var, length, noise, jitter=1.0e-6, include_noise=True):
    deltaXsq = ((X[:, None] - Z) / length) ** 2.0
    k = var * torch.exp(-0.5 * deltaXsq)
    if include_noise:
        k = k + (noise + jitter) * torch.eye(X.shape[0])
    return k


def gp(X, Y):
    var = pyro.sample("kernel_var", dist.LogNormal(0.0, 10.0))
    noise = pyro.sample("kernel_noise", dist.LogNormal(0.0, 10.0))
    length = pyro.sample("kernel_length", dist.LogNormal(0.0, 10.0))
    k = _rbf(X, X, var, length, noise)
    pyro.sample("Y", dist.MultivariateNormal(torch.zeros(X.shape[0]), covariance_matrix=k), obs=Y)


# ----------------------------------------------------------------------------------------------------------
# NumPyro examples/ucbadmit.py: the UC Berkeley admissions of 1973 (Bickel et al. 1975), six departments by
# sex, a varying-intercept, varying-slope binomial GLMM with an LKJ correlation, non-centred (``z``).
# ----------------------------------------------------------------------------------------------------------
#: (department, male, applications, admitted): the published table (Bickel, Hammel & O'Connell 1975)
UCBADMIT = [(0, 1, 825, 512), (0, 0, 108, 89), (1, 1, 560, 353), (1, 0, 25, 17), (2, 1, 325, 120),
            (2, 0, 593, 202), (3, 1, 417, 138), (3, 0, 375, 131), (4, 1, 191, 53), (4, 0, 393, 94),
            (5, 1, 373, 22), (5, 0, 341, 24)]


def ucbadmit_data() -> dict:
    table = torch.tensor(UCBADMIT)
    return {"dept": table[:, 0], "male": table[:, 1].float(), "applications": table[:, 2].float(),
            "admit": table[:, 3].float()}


def glmm(dept, male, applications, admit=None):
    v_mu = pyro.sample("v_mu", dist.Normal(0.0, torch.tensor([4.0, 1.0])).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(torch.ones(2)).to_event(1))
    L_Rho = pyro.sample("L_Rho", dist.LKJCholesky(2, concentration=torch.tensor(2.0)))
    scale_tril = sigma[..., None] * L_Rho
    num_dept = int(dept.max()) + 1
    z = pyro.sample("z", dist.Normal(torch.zeros(num_dept, 2), 1.0).to_event(2))
    v = (scale_tril @ z.T).T
    logits = v_mu[0] + v[dept, 0] + (v_mu[1] + v[dept, 1]) * male
    with pyro.plate("obs", len(dept)):
        pyro.sample("admit", dist.Binomial(applications, logits=logits), obs=admit)


# ----------------------------------------------------------------------------------------------------------
# NumPyro examples/annotation.py: Dawid & Skene (1979), the true class of each item enumerated; annotator 0
# labels every item twice (the example's first annotator labels three times), generated annotations.
# ----------------------------------------------------------------------------------------------------------

def annotation_data(seed: int = 6, items: int = 40, classes: int = 3) -> dict:
    """``positions`` (5,) the annotator of each position, ``annotations`` (items, 5) class labels (int64)."""
    g = torch.Generator().manual_seed(seed)
    positions = torch.tensor([0, 0, 1, 2, 3])
    accuracy = torch.tensor([0.85, 0.75, 0.7, 0.9])
    truth = torch.multinomial(torch.tensor([0.5, 0.3, 0.2]), items, replacement=True, generator=g)
    right = torch.rand(items, len(positions), generator=g) < accuracy[positions]
    other = (truth[:, None] + torch.randint(1, classes, (items, len(positions)), generator=g)) % classes
    return {"positions": positions, "annotations": torch.where(right, truth[:, None], other)}


def dawid_skene(positions, annotations):
    num_annotators = int(positions.max()) + 1
    num_classes = int(annotations.max()) + 1
    num_items, num_positions = annotations.shape
    with pyro.plate("annotator", num_annotators, dim=-2):
        with pyro.plate("class", num_classes):
            beta = pyro.sample("beta", dist.Dirichlet(torch.ones(num_classes)))
    pi = pyro.sample("pi", dist.Dirichlet(torch.ones(num_classes)))
    with pyro.plate("item", num_items, dim=-2):
        c = pyro.sample("c", dist.Categorical(pi), infer={"enumerate": "parallel"})
        with pyro.plate("position", num_positions):
            pyro.sample("y", dist.Categorical(Vindex(beta)[positions, c, :]), obs=annotations)


def dawid_skene_relabel(draws: dict) -> dict:
    """The draws with the true classes relabelled in every draw by the permutation that puts the most of the
    annotators' mass on the diagonal (beta (..., annotators, classes, classes): a true class k's row moved to the
    observed label it is read as): the label-invariant posterior (the classes' labels are a symmetry of the prior)."""
    beta, pi = draws["beta"], draws["pi"]
    classes = pi.shape[-1]
    perms = np.array(list(itertools.permutations(range(classes))))  # (P, classes)
    # score[..., p] = sum_a sum_k beta[..., a, perms[p, k], k]
    score = np.stack([beta[..., :, perm, np.arange(classes)].sum((-1, -2)) for perm in perms], -1)
    best = perms[score.argmax(-1)]  # (..., classes)
    pi = np.take_along_axis(pi, best, axis=-1)
    beta = np.take_along_axis(beta, best[..., None, :, None], axis=-2)
    return {**draws, "pi": pi, "beta": beta}


# ----------------------------------------------------------------------------------------------------------
# Pyro examples/capture_recapture/cjs.py, model_1: a Cormack-Jolly-Seber model, the alive states z_t summed out by
# ``pyro.markov`` enumeration; a generated capture history in the dippers' shape (the example downloads its CSV).
# ----------------------------------------------------------------------------------------------------------

def capture_data(seed: int = 7, animals: int = 60, occasions: int = 6, phi: float = 0.7, rho: float = 0.75) -> dict:
    """``capture_history`` (animals, occasions) 0/1 float: each animal first caught at a uniform occasion, then
    alive with probability phi a step and recaptured with probability rho while alive."""
    g = torch.Generator().manual_seed(seed)
    history = torch.zeros(animals, occasions)
    first = torch.randint(0, occasions - 1, (animals,), generator=g)
    for n in range(animals):
        alive = True
        history[n, first[n]] = 1.0
        for t in range(int(first[n]) + 1, occasions):
            alive = alive and bool(torch.rand((), generator=g) < phi)
            history[n, t] = float(alive and bool(torch.rand((), generator=g) < rho))
    return {"capture_history": history}


def capture_recapture(capture_history):
    N, T = capture_history.shape
    phi = pyro.sample("phi", dist.Uniform(0.0, 1.0))  # survival probability
    rho = pyro.sample("rho", dist.Uniform(0.0, 1.0))  # recapture probability
    with pyro.plate("animals", N, dim=-1):
        z = torch.ones(N)
        first_capture_mask = torch.zeros(N).bool()
        for t in pyro.markov(range(T)):
            with poutine.mask(mask=first_capture_mask):
                mu_z_t = first_capture_mask.float() * phi * z + (1 - first_capture_mask.float())
                z = pyro.sample(f"z_{t}", dist.Bernoulli(mu_z_t), infer={"enumerate": "parallel"})
                mu_y_t = rho * z
                pyro.sample(f"y_{t}", dist.Bernoulli(mu_y_t), obs=capture_history[:, t])
            first_capture_mask |= capture_history[:, t].bool()


# ----------------------------------------------------------------------------------------------------------
# NumPyro examples/stochastic_volatility.py: a Gaussian random walk of log volatilities s_t with step sigma,
# Student-t returns; generated returns (the example downloads S&P 500 data).  As written the walk is centred;
# the same posterior non-centred (s = sigma cumsum eps) is what a reference run samples.
# ----------------------------------------------------------------------------------------------------------

def volatility_data(seed: int = 8, steps: int = 60, sigma: float = 0.15) -> dict:
    g = torch.Generator().manual_seed(seed)
    s = torch.cumsum(sigma * torch.randn(steps, generator=g), 0) - 4.0
    return {"returns": torch.exp(s) * torch.randn(steps, generator=g)}


class GaussianRandomWalk(dist.TorchDistribution):
    """NumPyro's ``GaussianRandomWalk(scale, num_steps)``, which Pyro lacks, as a user writes it: x_t = x_{t-1} +
    scale eps_t from x_0 = 0, event shape (num_steps,)."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.real_vector

    def __init__(self, scale, num_steps: int, validate_args=None):
        self.scale, self.num_steps = torch.as_tensor(scale), num_steps
        super().__init__(self.scale.shape, torch.Size([num_steps]), validate_args=validate_args)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        steps = torch.randn(shape, dtype=self.scale.dtype, device=self.scale.device)
        return torch.cumsum(steps * self.scale[..., None], -1)

    def log_prob(self, value):
        steps = torch.diff(value, dim=-1, prepend=torch.zeros_like(value[..., :1]))
        return dist.Normal(0.0, self.scale[..., None]).log_prob(steps).sum(-1)

    def expand(self, batch_shape, _instance=None):
        return GaussianRandomWalk(self.scale.expand(batch_shape), self.num_steps)


def stochastic_volatility(returns):
    step_size = pyro.sample("sigma", dist.Exponential(50.0))
    s = pyro.sample("s", GaussianRandomWalk(scale=step_size, num_steps=returns.shape[0]))
    nu = pyro.sample("nu", dist.Exponential(0.1))
    return pyro.sample("r", dist.StudentT(df=nu, loc=0.0, scale=torch.exp(s)).to_event(1), obs=returns)


def stochastic_volatility_noncentred(returns):
    """The same posterior: s = sigma cumsum(eps), eps ~ N(0, 1) (a GaussianRandomWalk's steps, scaled)."""
    step_size = pyro.sample("sigma", dist.Exponential(50.0))
    eps = pyro.sample("eps", dist.Normal(torch.zeros(returns.shape[0]), 1.0).to_event(1))
    s = pyro.deterministic("s", step_size * torch.cumsum(eps, -1), event_dim=1)
    nu = pyro.sample("nu", dist.Exponential(0.1))
    return pyro.sample("r", dist.StudentT(df=nu, loc=0.0, scale=torch.exp(s)).to_event(1), obs=returns)


# ----------------------------------------------------------------------------------------------------------
# Pyro examples/toy_mixture_model_discrete_enumeration.py: (A) -> [B] -> (C), A and C observed Bernoullis of each
# row, B a hidden Bernoulli chosen by A and choosing C, summed out.  Only p(A) and p(C | A) are identified (B's label
# and the split between p(B | A) and p(C | B) are not): those are compared (:func:`toy_mixture_identified`).
# ----------------------------------------------------------------------------------------------------------

def toy_mixture_data(seed: int = 9, rows: int = 200) -> dict:
    g = torch.Generator().manual_seed(seed)
    a = (torch.rand(rows, generator=g) < 0.3).float()
    b = (torch.rand(rows, generator=g) < torch.where(a > 0, 0.8, 0.2)).float()
    c = (torch.rand(rows, generator=g) < torch.where(b > 0, 0.9, 0.15)).float()
    return {"data_a": a, "data_c": c}


@config_enumerate
def toy_mixture(data_a, data_c):
    p_a = pyro.sample("p_a", dist.Beta(1.0, 1.0))
    p_b = pyro.sample("p_b", dist.Beta(torch.ones(2), torch.ones(2)).to_event(1))
    p_c = pyro.sample("p_c", dist.Beta(torch.ones(2), torch.ones(2)).to_event(1))
    with pyro.plate("data", data_a.shape[0]):
        a = pyro.sample("A", dist.Bernoulli(p_a), obs=data_a)
        b = pyro.sample("B", dist.Bernoulli(Vindex(p_b)[a.long()]))
        pyro.sample("C", dist.Bernoulli(Vindex(p_c)[b.long()]), obs=data_c)


def toy_mixture_identified(draws: dict) -> dict:
    """The draws with ``p_c_given_a`` (..., 2): p(C = 1 | A = a) = p_b[a] p_c[1] + (1 - p_b[a]) p_c[0]."""
    p_b, p_c = draws["p_b"], draws["p_c"]
    return {**draws, "p_c_given_a": p_b * p_c[..., 1:] + (1 - p_b) * p_c[..., :1]}


# ----------------------------------------------------------------------------------------------------------
# Pyro examples/hmm.py, model_1: a hidden Markov model of binary tones, the hidden states enumerated along
# ``pyro.markov`` within a sequential plate of sequences; two generated sequences of two tones.
# ----------------------------------------------------------------------------------------------------------

def hmm_data(seed: int = 10, sequences: int = 2, length: int = 15) -> dict:
    g = torch.Generator().manual_seed(seed)
    stay, emit = 0.85, torch.tensor([[0.9, 0.2], [0.15, 0.8]])
    out = torch.zeros(sequences, length, 2)
    for i in range(sequences):
        x = 0
        for t in range(length):
            x = x if bool(torch.rand((), generator=g) < stay) else 1 - x
            out[i, t] = (torch.rand(2, generator=g) < emit[x]).float()
    return {"sequences": out, "lengths": torch.full((sequences,), length)}


def hmm(sequences, lengths, hidden_dim: int = 2):
    num_sequences, max_length, data_dim = sequences.shape
    probs_x = pyro.sample("probs_x", dist.Dirichlet(0.9 * torch.eye(hidden_dim) + 0.1).to_event(1))
    probs_y = pyro.sample("probs_y", dist.Beta(0.1, 0.9).expand([hidden_dim, data_dim]).to_event(2))
    tones_plate = pyro.plate("tones", data_dim, dim=-1)
    for i in pyro.plate("sequences", len(sequences)):
        length = int(lengths[i])
        sequence = sequences[i, :length]
        x = 0
        for t in pyro.markov(range(length)):
            x = pyro.sample(f"x_{i}_{t}", dist.Categorical(probs_x[x]), infer={"enumerate": "parallel"})
            with tones_plate:
                pyro.sample(f"y_{i}_{t}", dist.Bernoulli(probs_y[x.squeeze(-1)]), obs=sequence[t])


def hmm_relabel(draws: dict) -> dict:
    """The states ordered by their first tone's probability in every draw (probs_x's rows and columns, probs_y's
    rows): the label-invariant posterior."""
    order = np.argsort(draws["probs_y"][..., 0], axis=-1)  # (..., hidden)
    probs_y = np.take_along_axis(draws["probs_y"], order[..., None], axis=-2)
    probs_x = np.take_along_axis(draws["probs_x"], order[..., None], axis=-2)
    probs_x = np.take_along_axis(probs_x, order[..., None, :], axis=-1)
    return {**draws, "probs_x": probs_x, "probs_y": probs_y}


# ----------------------------------------------------------------------------------------------------------
# The programs with their data and how Pyro's reference run samples them (benchmarks/pyro_examples_reference.py
# --set ported writes tests/support/fixtures/ported_programs_reference.json).
# ----------------------------------------------------------------------------------------------------------
PORTED = {e.name: e for e in [
    Example("lkj", lkj, lambda: {"y": lkj_data()}, "Pyro examples/lkj.py",
            compare=("theta", "L_omega")),
    Example("funnel_noncentred", funnel_noncentred, dict, "NumPyro examples/funnel.py (reparam_model)",
            derived=("x",)),
    # the centred funnel biases every NUTS run: its reference is the non-centred run (the same density)
    Example("funnel", funnel, dict, "NumPyro examples/funnel.py", reference="funnel_noncentred",
            compare=("y", "x")),
    Example("gp", gp, gp_data, "NumPyro examples/gp.py"),
    Example("two_observed", two_observed, two_observed_data, "toy mixture's two observed sites"),
    Example("ucbadmit", glmm, ucbadmit_data, "NumPyro examples/ucbadmit.py", compare=("v_mu", "sigma", "z"),
            nuts={"jit_compile": True, "ignore_jit_warnings": True}),
    # the chains of Pyro's NUTS find the classes in different orders (r_hat 1.95): compared relabelled
    Example("dawid_skene", dawid_skene, annotation_data, "NumPyro examples/annotation.py",
            relabel=dawid_skene_relabel, nuts={"max_plate_nesting": 2}),
    Example("capture_recapture", capture_recapture, capture_data, "Pyro examples/capture_recapture/cjs.py",
            nuts={"max_plate_nesting": 1}),
    # as written the walk is centred, a funnel in sigma: the reference samples the same posterior non-centred
    Example("stochastic_volatility", stochastic_volatility, volatility_data,
            "NumPyro examples/stochastic_volatility.py", compare=("sigma", "s", "nu"),
            reference_model=stochastic_volatility_noncentred, nuts={"jit_compile": True, "ignore_jit_warnings": True}),
    Example("toy_mixture", toy_mixture, toy_mixture_data,
            "Pyro examples/toy_mixture_model_discrete_enumeration.py", compare=("p_a", "p_c_given_a"),
            relabel=toy_mixture_identified, nuts={"max_plate_nesting": 1}),
    Example("hmm", hmm, hmm_data, "Pyro examples/hmm.py (model_1)", relabel=hmm_relabel,
            nuts={"max_plate_nesting": 1, "jit_compile": True, "ignore_jit_warnings": True}),
]}
