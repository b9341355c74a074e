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

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.reparam import LocScaleReparam
from pyro.nn import PyroModule, PyroSample
from torch import nn

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
