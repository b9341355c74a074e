r"""The semi-supervised VAE (Kingma, Rezende, Mohamed & Welling 2014, model M2): labels as a partly observed latent.

.. math::

    y_i \sim \mathrm{Categorical}(1/C), \qquad z_i \sim \mathcal N(0, I_L), \qquad
    x_i \mid y_i, z_i \sim \mathrm{Bernoulli}(\mathrm{sigmoid}(f_\theta(z_i, y_i))) \text{ per pixel},

(``likelihood``: ``bernoulli``, ``continuous-bernoulli`` or ``gaussian``, :math:`\mathcal N(f_\theta(z_i, y_i), s^2)`
with a learned sd per feature, for real-valued features), with :math:`y_i` observed for the labelled rows (label :math:`\ge 0`) and latent for the others (label -1).
Inference is amortised by two networks: the classifier :math:`q_\phi(y \mid x) = \mathrm{Categorical}
(\mathrm{softmax}(g_\phi(x)))` and :math:`q_\phi(z \mid x, y) = \mathcal N(\mu_\phi(x, y), \mathrm{diag}\,
\sigma^2_\phi(x, y))`.  The objective is the ELBO of the labelled rows, :math:`\log p(x, y) \ge
\mathbb E_{q(z \mid x, y)} \log \frac{p(x \mid y, z) p(y) p(z)}{q(z \mid x, y)}`, plus that of the unlabelled rows,
where :math:`y` is summed out exactly (enumerated: ``TraceEnum_ELBO``),

.. math::

    \log p(x) \ge \sum_{c=1}^C q_\phi(c \mid x) \Big( \mathbb E_{q(z \mid x, c)}
    \log \frac{p(x \mid c, z) p(c) p(z)}{q(z \mid x, c)} - \log q_\phi(c \mid x) \Big),

plus the paper's auxiliary classification term (its Eq. 9) :math:`\alpha\, \frac{1}{n_l} \sum_{\text{labelled}}
\log q_\phi(y_i \mid x_i)`, the mean over the :math:`n_l` labelled rows, with :math:`\alpha = ` ``aux_weight``
:math:`\times\, n` (the paper: 0.1 n; the default here 10 n), so that the classifier also learns from the labels
directly.  Labelled and unlabelled rows are two plates, each subsampled to ``batch_size`` rows and scaled to its size.

The unlabelled rows' bound is largest at :math:`q_\phi(c \mid x) \propto \exp \mathrm{ELBO}_c(x)`
(:func:`class_elbos`), the model's own posterior over the label; where that posterior agrees with the labels less
often than a classifier of the labelled rows does (MNIST with 100 labels: 0.1 to 0.7 against 0.75), the bound pulls
q(y | x) away from the labels, and a heavy classification term is what keeps it there (benchmarks/RESULTS.md,
"Semi-supervised VAE").  The fit answers with :math:`q_\phi(y \mid x)`: class probabilities per row.

**M1+M2** (the paper's best model): M2 with ``likelihood="gaussian"`` on the codes of a VAE (M1) fitted first on
all the images, labelled or not; a code is the mean of M1's :math:`q(z_1 \mid x)`
(:func:`pyro_bdl.posterior.amortised.codes`, on the units :func:`~pyro_bdl.posterior.amortised.active_units`
keeps), and a new image is classified by :math:`q_\phi(y \mid z_1)` at its
code.  The two stages, as ``benchmarks/ss_vae_curve.py`` runs them (units whose means do not vary, the VAE's
inactive ones, left out)::

    m1 = pyro_bdl.fit("vae", images, inference="svi", options={"latent_dim": 50, "hidden": (600, 600)},
                      kl_warmup=20)                     # KL annealed over 20 epochs: better codes
    units = active_units(m1, semi)                      # the units M1 uses
    train_codes = codes(m1, semi, units)                # labels kept, -1 where unknown
    m2 = pyro_bdl.fit("ss-vae", train_codes, inference="svi",
                      options={"likelihood": "gaussian", "hidden": (500,), "latent_dim": 50})
    m2.predict(codes(m1, test, units).X)                # q(y | z1) per test image

Example
-------
>>> import torch, pyro
>>> x, y = torch.rand(6, 64), torch.tensor([0, 1, -1, -1, 2, -1])
>>> tr = pyro.poutine.trace(ss_vae).get_trace(x, y, num_classes=3, latent_dim=2, hidden=(8,))
>>> tr.nodes["x_labelled"]["value"].shape, tr.nodes["y_unlabelled"]["value"].shape
(torch.Size([3, 64]), torch.Size([3]))
"""

from __future__ import annotations

import functools
import math

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro import poutine
from torch.distributions import constraints

from pyro_bdl.data.table import DataError
from pyro_bdl.inference import Domain
from pyro_bdl.models.vae import LIKELIHOODS, MIN_PIXEL_SD, check_pixels, pixel_likelihood
from pyro_bdl.nn.image_networks import classifier, decoder, encoder, registered
from pyro_bdl.nn.layers import hidden_widths
from pyro_bdl.posterior import amortised
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, Task, choice, register

__all__ = ["ss_vae", "ss_guide", "class_elbos"]


def _with_label(t: torch.Tensor, y: torch.Tensor, C: int) -> torch.Tensor:
    """``[t, onehot(y)]`` on the last dimension, broadcast over the leading ones (an enumerated y is (C, 1))."""
    onehot = F.one_hot(y, C).to(t.dtype)
    lead = torch.broadcast_shapes(t.shape[:-1], onehot.shape[:-1])
    return torch.cat([t.expand(lead + t.shape[-1:]), onehot.expand(lead + onehot.shape[-1:])], -1)


def _feature_sd(x, likelihood):
    """The Gaussian likelihood's learned sd per feature (None for the pixel likelihoods)."""
    if likelihood != "gaussian":
        return None
    return pyro.param("ss_vae.feature_sd", lambda: torch.full(x.shape[-1:], 0.5, device=x.device, dtype=x.dtype),
                      constraint=constraints.greater_than(MIN_PIXEL_SD))


def _split(y, n):
    """Row indices of the labelled (y >= 0) and unlabelled (y = -1, or no y) rows."""
    if y is None:
        return torch.zeros(0, dtype=torch.long), torch.arange(n)
    return (y >= 0).nonzero().squeeze(-1), (y < 0).nonzero().squeeze(-1)


def _batch(size, batch_size):
    return None if batch_size is None or batch_size >= size else batch_size


def ss_vae(x, y=None, num_classes=None, latent_dim=10, hidden=(200,), aux_weight=10.0, likelihood="bernoulli",
           batch_size=None):
    """M2. ``x``: (n, D) pixels in [0, 1] (or real features with ``likelihood="gaussian"``); ``y``: (n,) labels
    0..C-1, -1 where unknown (None: all unknown)."""
    check_pixels(x, likelihood)
    C, D, hidden = int(num_classes), x.shape[1], hidden_widths(hidden)
    decode = registered("ss_vae.decoder", decoder, latent_dim + C, D, hidden, "mlp", device=x.device)
    sd = _feature_sd(x, likelihood)
    classify = registered("ss_vae.classifier", classifier, D, C, hidden, device=x.device)
    labelled, unlabelled = _split(y, x.shape[0])
    prior_y = dist.Categorical(logits=torch.zeros(C, device=x.device))
    prior_z = dist.Normal(torch.zeros(latent_dim, device=x.device), 1.0).to_event(1)
    if len(labelled):
        with pyro.plate("labelled", len(labelled), subsample_size=_batch(len(labelled), batch_size)) as i:
            xl, yl = x[labelled[i]], y[labelled[i]].long()
            # y_i ~ Cat(1/C) observed, z_i ~ N(0, I), x_i | y_i, z_i ~ Bernoulli(sigmoid(f(z_i, y_i)))
            pyro.sample("y_labelled", prior_y, obs=yl)
            z = pyro.sample("z_labelled", prior_z)
            pyro.sample("x_labelled", pixel_likelihood(decode(_with_label(z, yl, C)), likelihood, sd), obs=xl)
            # the auxiliary classification term: alpha / n_l log q(y_i | x_i), alpha = aux_weight * n
            with poutine.scale(scale=aux_weight * x.shape[0] / len(labelled)):
                pyro.sample("y_aux", dist.Categorical(logits=classify(xl)), obs=yl)
    if len(unlabelled):
        with pyro.plate("unlabelled", len(unlabelled), subsample_size=_batch(len(unlabelled), batch_size)) as j:
            xu = x[unlabelled[j]]
            # y_i ~ Cat(1/C) latent (summed out), z_i ~ N(0, I), x_i | y_i, z_i as above
            yu = pyro.sample("y_unlabelled", prior_y)
            z = pyro.sample("z_unlabelled", prior_z)
            pyro.sample("x_unlabelled", pixel_likelihood(decode(_with_label(z, yu, C)), likelihood, sd), obs=xu)


def ss_guide(x, y=None, num_classes=None, latent_dim=10, hidden=(200,), aux_weight=10.0, likelihood="bernoulli",
             batch_size=None):
    """q(y | x) (the classifier, enumerated where y is unknown) and q(z | x, y)."""
    C, D, hidden = int(num_classes), x.shape[1], hidden_widths(hidden)
    encode = registered("ss_vae.encoder", encoder, D + C, latent_dim, hidden, "mlp", device=x.device)
    classify = registered("ss_vae.classifier", classifier, D, C, hidden, device=x.device)
    labelled, unlabelled = _split(y, x.shape[0])
    if len(labelled):
        with pyro.plate("labelled", len(labelled), subsample_size=_batch(len(labelled), batch_size)) as i:
            xl, yl = x[labelled[i]], y[labelled[i]].long()
            pyro.sample("z_labelled", dist.Normal(*encode(_with_label(xl, yl, C))).to_event(1))
    if len(unlabelled):
        with pyro.plate("unlabelled", len(unlabelled), subsample_size=_batch(len(unlabelled), batch_size)) as j:
            xu = x[unlabelled[j]]
            yu = pyro.sample("y_unlabelled", dist.Categorical(logits=classify(xu)), infer={"enumerate": "parallel"})
            pyro.sample("z_unlabelled", dist.Normal(*encode(_with_label(xu, yu, C))).to_event(1))


@torch.no_grad()
def class_elbos(x: torch.Tensor, num_classes, latent_dim=10, hidden=(200,), likelihood="bernoulli", draws: int = 10,
                seed: int = 0, **options) -> torch.Tensor:
    """ELBO_c(x) = E_{q(z | x, c)} log p(x | c, z) + log p(c) - KL(q(z | x, c) || p(z)) per row and class, (n, C),
    the reconstruction term averaged over ``draws`` draws, with the networks in Pyro's param store (a fit's:
    ``with fit.own_params(): class_elbos(x, **fit.model.keywords)``).  The unlabelled rows' bound is largest at
    q(c | x) proportional to exp ELBO_c(x): the model's own posterior over the label, which the classifier is
    pulled towards (benchmarks/RESULTS.md, "Semi-supervised VAE").

    >>> pyro.clear_param_store()  # fresh networks
    >>> class_elbos(torch.rand(5, 64), num_classes=3, latent_dim=2, hidden=(8,)).shape
    torch.Size([5, 3])
    """
    C, L, hidden, D = int(num_classes), int(latent_dim), hidden_widths(hidden), x.shape[1]
    g = torch.Generator().manual_seed(seed)
    encode = registered("ss_vae.encoder", encoder, D + C, L, hidden, "mlp", device=x.device)
    decode = registered("ss_vae.decoder", decoder, L + C, D, hidden, "mlp", device=x.device)
    sd, out = _feature_sd(x, likelihood), []
    for c in range(C):
        y = torch.full((x.shape[0],), c, device=x.device)
        loc, scale = encode(_with_label(x, y, C))
        z = loc + scale * torch.randn((draws,) + loc.shape, generator=g).to(loc)
        log_lik = pixel_likelihood(decode(_with_label(z, y, C)), likelihood, sd).log_prob(x)
        kl = (0.5 * (loc**2 + scale**2 - 1) - scale.log()).sum(-1)
        out.append(log_lik.mean(0) - kl - math.log(C))
    return torch.stack(out, -1)


def _check(dataset) -> None:
    y = dataset.y
    if not torch.equal(y, y.round()) or bool((y < -1).any()):
        raise DataError(f"{dataset.name}: labels must be 0, 1, ... or -1 (unknown)")
    if not bool((y >= 0).any()):
        raise DataError(f"{dataset.name}: no labelled row (labels >= 0)")


register(ModelSpec(
    name="ss-vae",
    model=ss_vae,
    summary="semi-supervised VAE (M2): labels observed where known, enumerated where not; q(y | x) classifies",
    options={
        "num_classes": Option(None, "number of classes (default: from the labels)", int, domain=Domain(int, 2)),
        "latent_dim": Option(10, "latent dimension L", int, domain=Domain(int, 1)),
        "hidden": Option((200,), "hidden layer widths of the three networks", hidden_widths),
        # 10, not the paper's 0.1: MNIST 8k with 100 labels 0.750 against 0.626, the digits 0.900 against
        # 0.878 / 0.872 (benchmarks/RESULTS.md, "Semi-supervised VAE")
        "aux_weight": Option(10.0, "alpha / n, the weight of the classification term (the paper: 0.1)",
                             domain=Domain(float, 0, open_low=True, finite=True)),
        "likelihood": Option("bernoulli", f"p(x | y, z): one of {', '.join(LIKELIHOODS)} (gaussian: real features, "
                             "e.g. a VAE's codes for M1+M2)", choice("likelihood", LIKELIHOODS)),
    },
    default_data="digits-01-semi",
    data=DataContract(
        features="x",
        target="y",
        missing_target=-1.0,  # an empty label cell is an unknown label, as -1 is
        local_latents=("z_labelled", "z_unlabelled", "y_unlabelled"),
        task=Task.SEMI_SUPERVISED,
        check=_check,
        infer_options=lambda dataset: {"num_classes": int(dataset.y.max()) + 1},
    ),
    inference=InferenceChoices(
        traits=frozenset({"amortised"}),
        guides={"encoder": lambda model: functools.partial(ss_guide, **model.keywords)},
        default_guides={"svi-amortised": "encoder"},
        # y is summed out where unknown; no validation rows: the few labels all train (and the per-row ELBO of two
        # plates is not one number per row)
        method_defaults={"svi-amortised": {"elbo": "enum", "validation": 0.0, "epochs": 100}},
    ),
    hooks=PostFit(
        evaluate=amortised.evaluate_classifier,
        predict=amortised.predict_classes,
    ),
))
