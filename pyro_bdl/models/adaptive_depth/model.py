r"""A residual network whose depth is a discrete latent variable ("Bayesian control flow").

.. math::

    z_i \sim p(z), \qquad H_0 = \mathrm{relu}(W_0 x_i), \qquad
    H_l = [z_i \ge l]\, F_l(H_{l-1}) + H_{l-1}, \qquad
    y_i \mid x_i, z_i \sim \mathrm{Categorical}(\mathrm{softmax}(A_{z_i} H_{z_i} + a_{z_i})),

for :math:`l = 1, \dots, L` blocks (:mod:`pyro_bdl.models.adaptive_depth.networks`).  One output head after every block gives the
logits of every depth in one forward pass.  The prior prefers shallow nets: ``geometric`` (default)
:math:`p(z = l) \propto (1 - \rho)^{l - 1}` or ``power`` :math:`p(z = l) \propto l^{-\rho}` (:math:`\rho` = 0:
uniform), :math:`\rho` = ``rate``.  With ``depth=global`` one z serves every row: the depth uncertainty network
(DUN, Antoran et al. 2020).

**Training** (``svi-amortised``): the weights maximise the marginal likelihood or a bound on it.

* ``estimator=exact`` (``elbo=enum``): z is summed out, :math:`\sum_i \log \sum_l p(z = l)\, p(y_i \mid x_i, l)`,
  and the posterior of a row's depth is exact, :math:`p(z \mid x, y) \propto p(z)\, p(y \mid x, z)`.  For a global
  depth, DUN's bound :math:`\sum_l q(l) [\log p(l) - \log q(l) + \sum_i \log p(y_i \mid x_i, l)]` with a learned
  :math:`q(z)`, enumerated.
* ``estimator=score`` (``elbo=tracegraph``): an amortised :math:`q_\phi(z \mid x) = \mathrm{Categorical}
  (\mathrm{softmax}(g_\phi(H_1)))`, a small network on the first block's features, trained by REINFORCE
  (score-function gradients, a decaying-average baseline).
* ``estimator=relaxed`` (``elbo=trace``, ``jit=false``): the same guide as a Concrete / relaxed one-hot
  :math:`w \in \Delta^{L-1}` at a temperature annealed from 1 to ``temperature`` (the prior relaxed at
  ``temperature``) and :math:`p(y \mid x, w) = \mathrm{softmax}(\sum_l w_l \log p(\cdot \mid x, l))`, which is
  :math:`p(y \mid x, z)` at a vertex of the simplex: reparameterised, biased by the relaxation.

Two choices make the depth adapt (at the old defaults, rate 0.5 and every head shaping the stream, every input
stopped at block 1; benchmarks/RESULTS.md, "Adaptive depth"): a **warm-up** (option ``warmup``, the first 50
epochs by default: :func:`warming_up`) with a flat prior and a flat :math:`q(z) = 1/L`, whose ELBO
:math:`\sum_i \frac{1}{L} \sum_l \log p(y_i \mid x_i, l)` trains every head on every row, before the exact
marginal likelihood (``estimator=exact``; the other estimators ignore the warm-up); and ``early_heads=detached``:
the heads before the last read :math:`H_l` through a stop-gradient, so only the last head trains the blocks (the
stream is the full-depth network's, and a deeper head is a better one) while the earlier heads learn to read it.

**Prediction.**  With y unknown, :math:`p(y, z \mid x) \propto p(y \mid x, z)\, p(z)`: its marginal over y is the
prior, so a per-example depth is read from the joint.  :math:`\pi(z \mid x)` is :math:`p(z)` (exact),
:math:`q_\phi(z \mid x)` (a guide) or :math:`q(z)` (global); the rules (:mod:`pyro_bdl.models.adaptive_depth.decisions`, option
``rule``): ``mode`` of the joint :math:`\pi(z \mid x)\, p(y \mid x, z)` with exact early exit (of :math:`\pi`
alone when it is learned), ``sample`` :math:`z \sim \pi`, ``threshold`` (the first head at least ``threshold``
confident) and ``marginal`` :math:`p(y \mid x) = \sum_z \pi(z \mid x)\, p(y \mid x, z)` (every block).  Each
reports accuracy, mean depth and multiply-adds per example against the full-depth network.

Example
-------
>>> import torch, pyro
>>> x, y = torch.rand(6, 64), torch.tensor([0, 1, 2, 0, 1, 2])
>>> tr = pyro.poutine.trace(adaptive_depth_resnet).get_trace(x, y, num_classes=3, width=8, blocks=3)
>>> tr.nodes["depth"]["value"].shape, tr.nodes["y"]["fn"].logits.shape
(torch.Size([6]), torch.Size([6, 3]))
"""

from __future__ import annotations

import functools
import math

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine

from pyro_bdl.inference import Domain
from pyro_bdl.models import networks
from pyro_bdl.models.adaptive_depth import plots as depth_plots
from pyro_bdl.models.adaptive_depth import report as depth_report
from pyro_bdl.models.adaptive_depth.decisions import RULES
from pyro_bdl.models.adaptive_depth.networks import depth_prior, guide_network, heads_network
from pyro_bdl.registry import DataContract, InferenceChoices, ModelSpec, Option, PostFit, Task, choice, register

__all__ = ["adaptive_depth_resnet", "depth_guide", "warming_up", "PRIORS", "DEPTHS", "ESTIMATORS", "EARLY_HEADS"]

PRIORS, DEPTHS, ESTIMATORS = ("geometric", "power"), ("per-example", "global"), ("exact", "score", "relaxed")
#: ``early_heads``: the heads before the last read the residual stream through a stop-gradient, or train it too.
EARLY_HEADS = ("detached", "trained")
#: The guide's temperature falls as exp(-ANNEAL * step) from 1 to ``temperature`` (1000 steps: 1 -> 0.37).
ANNEAL = 1e-3
#: The score-function guide's baseline: a decaying average of the downstream cost (Pyro's).
BASELINE = {"use_decaying_avg_baseline": True, "baseline_beta": 0.9}


def _check(prior, rate, depth, estimator, temperature, early_heads="detached") -> None:
    for name, value, choices in (("prior", prior, PRIORS), ("depth", depth, DEPTHS),
                                 ("estimator", estimator, ESTIMATORS), ("early_heads", early_heads, EARLY_HEADS)):
        if value not in choices:
            raise ValueError(f"option '{name}' of model 'adaptive-depth-resnet' must be one of "
                             f"{', '.join(choices)}, got {value!r}")
    if prior == "geometric" and not 0.0 < rate < 1.0:
        raise ValueError(f"the geometric prior's rate must lie in (0, 1), got {rate}")
    if depth == "global" and estimator != "exact":
        raise ValueError(f"estimator '{estimator}' is for a per-example depth; a global depth is enumerated "
                         "(estimator=exact)")


def warming_up(net, x, y, warmup, batch_size, depth, estimator) -> bool:
    """Whether this is a training step of the first ``warmup`` epochs (an exact per-example depth only): a flat prior
    and a flat q(z) there, so every head is trained on every row.  Training steps are the model's calls with labels
    and gradients, counted on its network (``net.steps``: a new network, as a new fit or a loaded one has, counts
    from 0); an epoch is ceil(rows / ``batch_size``) steps."""
    if depth != "per-example" or estimator != "exact" or not float(warmup) > 0 or y is None:
        return False
    rows = x.shape[0]
    per_epoch = 1 if batch_size is None or int(batch_size) >= rows else math.ceil(rows / int(batch_size))
    return torch.is_grad_enabled() and getattr(net, "steps", 0) < float(warmup) * per_epoch


def adaptive_depth_resnet(x, y=None, num_classes=None, width=32, blocks=4, prior="geometric", rate=0.1,
                          depth="per-example", estimator="exact", temperature=0.5, rule="mode", threshold=0.9,
                          early_heads="detached", warmup=0, batch_size=None):
    """``x``: (n, D) inputs; ``y``: (n,) labels 0..C-1 or None (then simulated); ``warmup``: epochs with a flat prior
    (:func:`warming_up`; 0 here, 50 in a fit: the registered default). Returns y."""
    _check(prior, rate, depth, estimator, temperature, early_heads)
    net = heads_network(x, num_classes, width, blocks, early_heads == "detached")
    p_z = depth_prior(blocks, prior, rate, x.device)
    if warming_up(net, x, y, warmup, batch_size, depth, estimator):
        p_z = torch.full_like(p_z, 1.0 / len(p_z))
    if y is not None and torch.is_grad_enabled():
        net.steps = getattr(net, "steps", 0) + 1  # after the guide and the model have read it
    if depth == "global":  # one depth for every row (DUN); its guide enumerates q(z)
        z = pyro.sample("depth", dist.Categorical(p_z))
    with pyro.plate("data", x.shape[0], subsample_size=batch_size):
        logp = torch.log_softmax(net(pyro.subsample(x, event_dim=1)), -1)  # log p(y | x, z = l), (B, L, C)
        if depth == "per-example" and estimator == "relaxed":
            w = pyro.sample("depth", dist.RelaxedOneHotCategorical(torch.tensor(float(temperature)), probs=p_z))
            logits = (w.unsqueeze(-1) * logp).sum(-2)
        else:
            if depth == "per-example":  # z_i ~ p(z), summed out (exact) or drawn by the guide (score)
                z = pyro.sample("depth", dist.Categorical(p_z),
                                infer={"enumerate": "parallel"} if estimator == "exact" else {})
            logits = logp[torch.arange(logp.shape[0], device=logp.device), z]  # the head at depth z + 1 (z counts from 0)
        obs = None if y is None else pyro.subsample(y, event_dim=0).long()
        return pyro.sample("y", dist.Categorical(logits=logits), obs=obs)


def temperature_at(guide_net, final: float) -> float:
    """The relaxed guide's temperature after the training steps it has taken (counted on its network)."""
    return max(float(final), math.exp(-ANNEAL * getattr(guide_net, "steps", 0)))


def depth_guide(x, y=None, num_classes=None, width=32, blocks=4, prior="geometric", rate=0.1, depth="per-example",
                estimator="exact", temperature=0.5, rule="mode", threshold=0.9, early_heads="detached", warmup=0,
                batch_size=None):
    """q(z) for a global depth (enumerated); nothing for ``exact`` (z is summed out in the model), but the flat
    q(z) = 1/L in the warm-up (enumerated); q(z | x) from H_1 for ``score``/``relaxed``."""
    _check(prior, rate, depth, estimator, temperature, early_heads)
    if depth == "global":
        q = pyro.param("adaptive_depth.q_depth", lambda: torch.zeros(int(blocks), device=x.device))
        pyro.sample("depth", dist.Categorical(logits=q), infer={"enumerate": "parallel"})
        return
    with poutine.block():  # the network's step count: is this step in the warm-up?
        warm = warming_up(heads_network(x, num_classes, width, blocks, early_heads == "detached"), x, y, warmup,
                          batch_size, depth, estimator)
    if warm:  # the ELBO is then the mean over l of log p(y | x, l): every head trained on every row
        flat = torch.full((int(blocks),), 1.0 / int(blocks), dtype=x.dtype, device=x.device)
        with pyro.plate("data", x.shape[0], subsample_size=batch_size):
            pyro.sample("depth", dist.Categorical(flat), infer={"enumerate": "parallel"})
        return
    if estimator == "exact":
        return
    with poutine.block():  # the network's features are read, not trained, by the guide
        net = heads_network(x, num_classes, width, blocks, early_heads == "detached")
    guide_net = guide_network(width, blocks, x.device)
    with pyro.plate("data", x.shape[0], subsample_size=batch_size):
        logits = guide_net(net.features(pyro.subsample(x, event_dim=1)).detach())
        if estimator == "score":
            pyro.sample("depth", dist.Categorical(logits=logits), infer={"baseline": BASELINE})
            return
        if torch.jit.is_tracing():
            raise ValueError("estimator 'relaxed' anneals its temperature at every step: train with jit=false")
        if torch.is_grad_enabled():
            guide_net.steps = getattr(guide_net, "steps", 0) + 1
        t = torch.tensor(temperature_at(guide_net, temperature))
        pyro.sample("depth", dist.RelaxedOneHotCategorical(t, logits=logits))


register(ModelSpec(
    name="adaptive-depth-resnet",
    model=adaptive_depth_resnet,
    summary="residual network whose depth z is latent (per example, or one global: DUN); heads after every block",
    options={
        "num_classes": Option(None, "number of classes (default: from the labels)", int, domain=Domain(int, 2)),
        "width": Option(32, "width W of the residual stream", int, domain=Domain(int, 1)),
        "blocks": Option(4, "number L of residual blocks (the largest depth)", int, domain=Domain(int, 1)),
        "prior": Option("geometric", f"prior on the depth: one of {', '.join(PRIORS)}", choice("prior", PRIORS)),
        # 0.1: the mode rule then stops at the first head >= 0.9 confident, so hard inputs go deeper; at 0.5 (the old
        # default) every input stopped at block 1 (benchmarks/RESULTS.md, "Adaptive depth", the end of the section)
        "rate": Option(0.1, "rho: geometric (1 - rho)^(l-1), in (0, 1); power l^-rho, >= 0",
                       domain=Domain(float, 0, finite=True)),
        "depth": Option("per-example", f"one of {', '.join(DEPTHS)} (global: DUN)", choice("depth", DEPTHS)),
        "estimator": Option("exact", f"how z is inferred: one of {', '.join(ESTIMATORS)}",
                            choice("estimator", ESTIMATORS)),
        "temperature": Option(0.5, "the relaxed estimator's final temperature",
                              domain=Domain(float, 0, open_low=True, finite=True)),
        "rule": Option("mode", f"test-time decision rule: one of {', '.join(RULES)}", choice("rule", RULES)),
        "threshold": Option(0.9, "confidence at which the threshold rule stops", domain=Domain(float, 0, 1)),
        # 50 of the 100 epochs: without a warm-up the heads the prior disfavours starve (RESULTS.md, "Adaptive depth")
        "warmup": Option(50, "epochs of the warm-up (exact per-example depth): a flat prior and a flat q(z), so every "
                         "head is trained on every row; then z is summed out exactly",
                         domain=Domain(float, 0, finite=True)),
        # detached: trained heads made heads 2-4 no better than the first (the first head's loss shapes the stream)
        "early_heads": Option("detached", "heads before the last: 'detached' read the residual stream through a "
                              "stop-gradient (only the last head trains the blocks), 'trained' train it too",
                              choice("early_heads", EARLY_HEADS)),
    },
    default_data="digits-01",
    notes="estimator=exact needs elbo=enum (the default); score: elbo=tracegraph; relaxed: elbo=trace.",
    data=DataContract(
        features="x",
        target="y",
        local_latents=("depth",),
        task=Task.CLASSIFICATION,
        check=networks.check_labels,
        infer_options=networks.num_classes,
    ),
    inference=InferenceChoices(
        traits=frozenset({"amortised"}),
        guides={"depth": lambda model: functools.partial(depth_guide, **model.keywords)},
        default_guides={"svi-amortised": "depth"},
        # lr 3e-3: at 1e-3 the mode rule ends a point further below the full-depth net; no early stopping: the held-out
        # log-likelihood peaks before the accuracy (benchmarks/RESULTS.md, "Adaptive depth"); eager: the relaxed guide
        # anneals at every step
        method_defaults={"svi-amortised": {"elbo": "enum", "lr": 3e-3, "validation": 0.0, "jit": False, "epochs": 100}},
    ),
    hooks=PostFit(
        report=functools.partial(depth_report.report, inputs=depth_report.depth_inputs),
        evaluate=functools.partial(depth_report.evaluate, inputs=depth_report.depth_inputs),
        predict=functools.partial(depth_report.predict, inputs=depth_report.depth_inputs),
        plots=depth_plots.plots,
    ),
))
