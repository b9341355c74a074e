"""The adaptive-depth ResNet adapts at its defaults (issue 34): the warm-up's objective, the detached early heads,
and a fit at the model's defaults that sends noisy and misclassified digits deeper than clean ones.

Tolerances: depths are compared by their difference in standard errors over the test rows (3 se: a one-sided
chance under 0.15% when there is no difference); the old defaults (rate 0.5, every head training the residual
stream, no warm-up) ran 1.00 block on clean and 1.01 on noisy digits (benchmarks/RESULTS.md, "Adaptive depth"),
so they fail the effect-size part of the check (noisy deeper by 0.2 blocks or more).
"""

from __future__ import annotations

import math

import pyro
import pytest
import torch
from pyro.infer import TraceEnum_ELBO

import pyro_bdl
from pyro_bdl.data.embedded import split_dataset
from pyro_bdl.data.table import Dataset
from pyro_bdl.models.adaptive_depth.decisions import decide
from pyro_bdl.models.adaptive_depth.model import adaptive_depth_resnet, depth_guide
from pyro_bdl.models.adaptive_depth.networks import ResidualHeads, heads_network
from pyro_bdl.models.adaptive_depth.report import depth_inputs


def test_warm_up_elbo_is_the_mean_over_heads_of_each_heads_log_likelihood():
    """In the warm-up's training steps (here ``warmup`` = 2 epochs of one full-batch step) the prior and q(z) are
    flat, so the enumerated ELBO is exactly sum_i (1/L) sum_l log p(y_i | x_i, l): every head trained on every row;
    from the third step on, log sum_l p(l) p(y | x, l), and never in a step without gradients (validation)."""
    pyro.clear_param_store()
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(10, 6, generator=g), torch.randint(0, 3, (10,), generator=g)
    kw = dict(num_classes=3, width=8, blocks=3, warmup=2)
    model, guide = (lambda x, y: adaptive_depth_resnet(x, y, **kw)), (lambda x, y: depth_guide(x, y, **kw))
    elbo = TraceEnum_ELBO(max_plate_nesting=1)
    values = [-float(elbo.differentiable_loss(model, guide, x, y).detach()) for _ in range(3)]
    with torch.no_grad():
        net = heads_network(x, 3, 8, 3, True)
        logp = torch.log_softmax(net(x), -1)[torch.arange(10), :, y]  # (n, L)
        prior = torch.tensor([1.0, 0.9, 0.81]) / 2.71  # the default geometric prior, rate 0.1
        exact = float(torch.logsumexp(logp + prior.log(), -1).sum())
        no_grad = -float(elbo.loss(model, guide, x, y))
    assert net.steps == 3
    assert abs(values[0] - float(logp.mean(-1).sum())) < 1e-4 and abs(values[1] - values[0]) < 1e-6
    assert abs(values[2] - exact) < 1e-4 and abs(no_grad - exact) < 1e-4
    pyro.clear_param_store()
    net = heads_network(x, 3, 8, 3, True)
    assert not hasattr(net, "steps")  # a new network (a new or a loaded fit) counts from 0
    with torch.no_grad():
        assert abs(-float(elbo.loss(model, guide, x, y)) - float(torch.logsumexp(
            torch.log_softmax(net(x), -1)[torch.arange(10), :, y] + prior.log(), -1).sum())) < 1e-4


def test_detached_early_heads_keep_their_values_and_leave_the_blocks_to_the_last_head():
    torch.manual_seed(0)
    trained = ResidualHeads(6, 3, width=8, blocks=3)
    detached = ResidualHeads(6, 3, width=8, blocks=3, detached=True)
    detached.load_state_dict(trained.state_dict())
    x = torch.rand(5, 6)
    assert torch.equal(trained(x), detached(x))
    detached(x)[:, :2].sum().backward()  # the early heads' outputs: no gradient reaches the stem or the blocks
    assert all(p.grad is None or not p.grad.any() for p in [*detached.stem.parameters(), *detached.blocks.parameters()])
    assert detached.heads[0].weight.grad.abs().sum() > 0
    detached(x)[:, 2].sum().backward()
    assert detached.stem.weight.grad.abs().sum() > 0
    trained(x)[:, 0].sum().backward()
    assert trained.stem.weight.grad.abs().sum() > 0


def test_new_options_give_clear_errors():
    with pytest.raises(ValueError, match="early_heads must be one of detached, trained"):
        pyro_bdl.get_model("adaptive-depth-resnet").resolve_options({"early_heads": "frozen"})
    with pytest.raises(ValueError, match="early_heads.*detached, trained"):
        adaptive_depth_resnet(torch.rand(4, 6), torch.tensor([0, 1, 2, 0]), num_classes=3, early_heads="frozen")


def _depth_difference(a: torch.Tensor, b: torch.Tensor, paired: bool) -> tuple[float, float]:
    """Mean of a - b and its standard error (paired rows, or two independent groups)."""
    a, b = a.double(), b.double()
    if paired:
        d = a - b
        return float(d.mean()), float(d.std() / math.sqrt(len(d)))
    return float(a.mean() - b.mean()), math.sqrt(float(a.var()) / len(a) + float(b.var()) / len(b))


@pytest.mark.slow
def test_at_its_defaults_noisy_and_misclassified_digits_run_deeper_than_clean_ones():
    """digits-01 split 1,347 / 450 (seed 0), the model's defaults (mode rule); noisy copies of the test images with
    N(0, 0.3^2) pixel noise.  Clean images stop before the last block on average (by 3 se), noisy ones run at least
    0.2 blocks more (and by 3 se of the paired difference), misclassified clean images more than correct ones
    (3 se, Welch), and the accuracy is that of a 4-block net (>= 94%; the full-depth net: 96.9-97.8% over seeds)."""
    digits = pyro_bdl.load("digits-01")
    train, test = split_dataset(digits, 0.25, seed=0, stratify=True)
    fit = pyro_bdl.fit("adaptive-depth-resnet", train, inference="svi-amortised", seed=0, progress=False)
    noise = 0.3 * torch.randn(test.X.shape, generator=torch.Generator().manual_seed(1))
    noisy = Dataset("noisy", (test.X + noise).clamp(0, 1), test.y, list(test.feature_names), test.target_name)
    y, L = test.y.long(), fit.model.keywords["blocks"]
    clean_d, noisy_d = (decide("mode", i.logp, i.pi) for i in (depth_inputs(fit, test.X), depth_inputs(fit, noisy.X)))
    accuracy = float((clean_d.pred == y).double().mean())
    assert accuracy >= 0.94, accuracy
    blocks = clean_d.blocks.double()
    assert float(blocks.mean()) < L - 3 * float(blocks.std()) / math.sqrt(len(blocks)), float(blocks.mean())
    more, se = _depth_difference(noisy_d.blocks, clean_d.blocks, paired=True)
    assert more >= 0.2 and more > 3 * se, (more, se)
    wrong = clean_d.pred != y
    more, se = _depth_difference(clean_d.blocks[wrong], clean_d.blocks[~wrong], paired=False)
    assert int(wrong.sum()) >= 5 and more > 3 * se, (int(wrong.sum()), more, se)
