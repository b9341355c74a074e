r"""The variational autoencoder (Kingma & Welling 2014): a deep generative model with amortised inference.

.. math::

    z_i \sim \mathcal N(0, I_L), \qquad x_i \mid z_i \sim p(x \mid f_\theta(z_i)), \qquad i = 1, \dots, n,

with :math:`f_\theta` the decoder network and, per pixel :math:`d`, the likelihood

* ``bernoulli`` (default): :math:`x_{id} \sim \mathrm{Bernoulli}(\mathrm{sigmoid}(f_\theta(z_i)_d))` on [0, 1]
  pixels (a grey pixel counts as a fraction of a success, as in Pyro's VAE tutorial);
* ``continuous-bernoulli``: :math:`\mathcal{CB}(\mathrm{sigmoid}(f_\theta(z_i)_d))`, the normalised density on
  [0, 1] (Loaiza-Ganem & Cunningham 2019);
* ``gaussian``: :math:`\mathcal N(f_\theta(z_i)_d, s_d^2)` with learned sds :math:`s_d \ge 10^{-2}`.

Inference is amortised: one encoder network :math:`g_\phi` gives every row its posterior approximation
:math:`q_\phi(z_i \mid x_i) = \mathcal N(\mu_\phi(x_i), \mathrm{diag}\, \sigma^2_\phi(x_i))`, and
:math:`(\theta, \phi)` maximise the ELBO

.. math::

    \mathcal L = \sum_i \mathbb E_{q_\phi(z_i \mid x_i)} \log p_\theta(x_i \mid z_i)
      - \beta\, \mathrm{KL}(q_\phi(z_i \mid x_i) \,\|\, p(z_i)) \;\le\; \sum_i \log p_\theta(x_i),

estimated on minibatches of B rows scaled by n / B (``kl_scale`` is :math:`\beta`, 1 for the ELBO, applied
with ``poutine.scale`` on z in the model and the guide, times ``anneal``: the KL warm-up factor that
``svi-amortised``'s setting ``kl_warmup`` raises from near 0 to 1 over its first epochs), or the
importance-weighted bound (IWAE, Burda et al. 2016) :math:`\sum_i \mathbb E \log \frac1K \sum_k w_{ik}` with
:math:`w_{ik} = p_\theta(x_i, z_{ik}) / q_\phi(z_{ik} \mid x_i)`, :math:`z_{ik} \sim q_\phi(z \mid x_i)`, tighter as
K grows.  The marginal likelihood of a row is estimated by importance sampling from q,

.. math::

    \log \hat p_\theta(x_i) = \log \frac1K \sum_{k=1}^K w_{ik},

which is reported beside the ELBO per row: their gap is how far the bound lies below the marginal likelihood.
New images come from the prior: :math:`z \sim \mathcal N(0, I)`, :math:`x \sim p(x \mid f_\theta(z))`.

Example
-------
>>> import torch, pyro
>>> x = torch.rand(6, 64)
>>> tr = pyro.poutine.trace(vae).get_trace(x, data_dim=64, latent_dim=2, hidden=(8,))
>>> tr.nodes["z"]["value"].shape, tr.nodes["x"]["fn"].event_shape
(torch.Size([6, 2]), torch.Size([64]))
>>> vae(n=3, data_dim=64, latent_dim=2, hidden=(8,)).shape  # simulated images
torch.Size([3, 64])
"""

from __future__ import annotations

import functools

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.util import is_validation_enabled
from torch.distributions import constraints

from pyro_bdl.data.table import DataError
from pyro_bdl.inference import Domain
from pyro_bdl.nn.image_networks import ARCHS, decoder, encoder, registered
from pyro_bdl.nn.layers import hidden_widths
from pyro_bdl.posterior import amortised
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, Task, choice, register

__all__ = ["vae", "encoder_guide", "LIKELIHOODS", "check_pixels", "pixel_likelihood"]

LIKELIHOODS = ("bernoulli", "continuous-bernoulli", "gaussian")
#: The smallest pixel sd of the Gaussian likelihood: a constant pixel (an image's border) would otherwise
#: drive its sd, and log p(x), to infinity.
MIN_PIXEL_SD = 1e-2


def pixel_likelihood(out: torch.Tensor, likelihood: str, sd=None):
    """p(x | f(z)) for decoder outputs ``out`` (..., D): one event of D pixels."""
    if likelihood == "bernoulli":  # on [0, 1] pixels: not a density of grey values, hence no support check
        return dist.Bernoulli(logits=out, validate_args=False).to_event(1)
    if likelihood == "continuous-bernoulli":
        return dist.ContinuousBernoulli(logits=out).to_event(1)
    return dist.Normal(out, sd).to_event(1)


def check_pixels(x, likelihood: str) -> None:
    """A clear error for an unknown likelihood, or pixels outside [0, 1] under a Bernoulli one (validation on)."""
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"unknown likelihood '{likelihood}'; choose one of: {', '.join(LIKELIHOODS)}")
    if x is not None and likelihood != "gaussian" and is_validation_enabled():
        bad = (x < 0) | (x > 1)
        if bool(bad.any()):
            raise DataError(f"the {likelihood} likelihood needs pixels in [0, 1]; {int(bad.sum())} value(s) lie outside "
                            f"(from {float(x.min()):g} to {float(x.max()):g}): scale the images, or use likelihood=gaussian")


def vae(x=None, n=None, data_dim=None, latent_dim=10, hidden=(200,), likelihood="bernoulli", arch="mlp",
        kl_scale=1.0, batch_size=None, anneal=1.0):
    """The VAE. ``x``: (n, D) flattened images, or None to simulate ``n`` of ``data_dim`` pixels. Returns x."""
    check_pixels(x, likelihood)
    n, data_dim = (x.shape[0], x.shape[1]) if x is not None else (n, data_dim)
    decode = registered("vae.decoder", decoder, latent_dim, data_dim, hidden_widths(hidden), arch,
                        device=None if x is None else x.device)
    sd, device = None, next(decode.parameters()).device
    if likelihood == "gaussian":
        sd = pyro.param("vae.pixel_sd", lambda: torch.full((data_dim,), 0.5, device=device),
                        constraint=constraints.greater_than(MIN_PIXEL_SD))
    with pyro.plate("data", n, subsample_size=batch_size):
        with poutine.scale(scale=kl_scale * anneal):  # beta (times the warm-up factor): the weight of the KL term
            # z_i ~ N(0, I_L)
            z = pyro.sample("z", dist.Normal(torch.zeros(latent_dim, device=device), 1.0).to_event(1))
        # x_i | z_i ~ p(x | f_theta(z_i))   (pyro.subsample: the minibatch's rows of x)
        obs = None if x is None else pyro.subsample(x, event_dim=1)
        return pyro.sample("x", pixel_likelihood(decode(z), likelihood, sd), obs=obs)


def encoder_guide(x=None, n=None, data_dim=None, latent_dim=10, hidden=(200,), likelihood="bernoulli", arch="mlp",
                  kl_scale=1.0, batch_size=None, anneal=1.0):
    """q(z_i | x_i) = N(mu(x_i), diag sigma^2(x_i)): the encoder network, amortised over the rows."""
    encode = registered("vae.encoder", encoder, x.shape[1], latent_dim, hidden_widths(hidden), arch, device=x.device)
    with pyro.plate("data", x.shape[0], subsample_size=batch_size):
        loc, scale = encode(pyro.subsample(x, event_dim=1))
        with poutine.scale(scale=kl_scale * anneal):
            pyro.sample("z", dist.Normal(loc, scale).to_event(1))


SPEC = register(ModelSpec(
    name="vae",
    model=vae,
    summary="variational autoencoder p(x | f(z)) p(z), amortised q(z | x); ELBO and IS log p(x) per image",
    options={
        "latent_dim": Option(10, "latent dimension L", int, domain=Domain(int, 1)),
        "hidden": Option((200,), "hidden layer widths of the encoder and decoder, e.g. 400 or 400,200", hidden_widths),
        "likelihood": Option("bernoulli", f"one of {', '.join(LIKELIHOODS)}", choice("likelihood", LIKELIHOODS)),
        "arch": Option("mlp", f"one of {', '.join(ARCHS)} (conv: square images, side a multiple of 4)",
                       choice("arch", ARCHS)),
        "kl_scale": Option(1.0, "beta, the weight of the KL term (1: the ELBO)", domain=Domain(float, 0, finite=True)),
        "data_dim": Option(None, "pixels per image (default: from the data)", int, domain=Domain(int, 1)),
    },
    default_data="digits-01",
    data=DataContract(
        features="x",
        target=None,
        size="n",
        local_latents=("z",),
        task=Task.DENSITY,
        infer_options=lambda dataset: {"data_dim": int(dataset.X.shape[1])},
    ),
    inference=InferenceChoices(
        traits=frozenset({"amortised"}),
        guides={"encoder": lambda model: functools.partial(encoder_guide, **model.keywords)},
        default_guides={"svi-amortised": "encoder"},
        # 3e-3: within 0.4 nats of the best test log p(x) of {1e-3, 3e-3, 1e-2} on digits and a family of other sets
        # (1e-2, the digits' best, loses 3.5 nats on 1,000 MNIST images): benchmarks/RESULTS.md, "VAE defaults"
        method_defaults={"svi-amortised": {"lr": 3e-3}},
    ),
    hooks=PostFit(
        report=amortised.report,
        evaluate=amortised.evaluate,
        predict=amortised.predict,
        plots=amortised.plots,
    ),
))
