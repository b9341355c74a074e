"""The residual network with a latent depth (pyro_bdl/models/adaptive_depth/model.py), its networks, decision rules and
reports.

Exact checks: enumeration's posterior over a row's depth equals Bayes' rule over networks truncated by hand; the
score-function gradient of the guide is the exact (enumerated) gradient within its Monte Carlo error; the early-exit
mode is the brute-force mode of the joint; the multiply-add counts are those of the layers that actually ran.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pyro
import pytest
import torch
from pyro.infer import TraceEnum_ELBO, TraceGraph_ELBO, config_enumerate
from torch import nn

import pyro_bdl
from pyro_bdl.cli import main
from pyro_bdl.data.table import Dataset
from pyro_bdl.inference.amortised import validation_elbo
from pyro_bdl.models.adaptive_depth.decisions import decide
from pyro_bdl.models.adaptive_depth.model import adaptive_depth_resnet, depth_guide
from pyro_bdl.models.adaptive_depth.networks import DepthGuide, ResidualHeads, depth_prior, heads_network, multiply_adds
from pyro_bdl.store import write_fit

SMALL = {"width": 8, "blocks": 3}


def tiny_rows(n=5, D=6, C=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, D, generator=g), torch.randint(0, C, (n,), generator=g)


def test_one_pass_logits_at_depth_l_are_those_of_the_net_truncated_at_l():
    torch.manual_seed(0)
    net = ResidualHeads(6, 3, width=8, blocks=4)
    x = torch.rand(7, 6)
    all_depths = net(x)
    for l in range(1, 5):  # a plain network of l blocks built from the same layers, one head
        h = torch.relu(net.stem(x))
        for block in list(net.blocks)[:l]:
            h = h + block(h)
        assert torch.allclose(all_depths[:, l - 1], net.heads[l - 1](h), atol=1e-6)


def test_enumerated_posterior_over_depth_equals_bayes_over_truncated_nets():
    pyro.clear_param_store()
    x, y = tiny_rows()
    kw = dict(num_classes=3, width=8, blocks=3, prior="power", rate=1.0)
    model = lambda x, y: adaptive_depth_resnet(x, y, **kw)  # noqa: E731
    marginals = TraceEnum_ELBO(max_plate_nesting=1).compute_marginals(model, lambda x, y: None, x, y)
    enumerated = marginals["depth"].probs  # (n, L)
    net = pyro.module("adaptive_depth.net", ResidualHeads(6, 3, 8, 3), update_module_params=True)
    prior = torch.tensor([1.0, 1 / 2, 1 / 3]) / (11 / 6)
    brute = torch.stack([torch.log_softmax(net(x, depth=l)[:, -1], -1)[torch.arange(5), y] for l in (1, 2, 3)], -1)
    assert torch.allclose(enumerated, torch.softmax(brute + prior.log(), -1), atol=1e-5)
    assert torch.allclose(depth_prior(3, "power", 1.0), prior)


def test_validation_elbo_of_an_enumerated_depth_is_the_exact_log_marginal_likelihood():
    """svi-amortised's validation score with elbo=enum sums z out as training does (not one draw of z from the
    prior): per row log sum_l p(z = l) p(y | x, l), by hand from the registered network."""
    pyro.clear_param_store()
    x, y = tiny_rows(n=12)
    kw = dict(num_classes=3, width=8, blocks=3, rate=0.3)
    model = lambda x, y: adaptive_depth_resnet(x, y, **kw)  # noqa: E731
    guide = lambda x, y: depth_guide(x, y, **kw)  # noqa: E731
    value = validation_elbo(model, guide, {"x": x, "y": y}, TraceEnum_ELBO(max_plate_nesting=1))
    with torch.no_grad():
        logp = torch.log_softmax(heads_network(x, 3, 8, 3)(x), -1)[torch.arange(12), :, y]  # (n, L)
        exact = torch.logsumexp(logp + depth_prior(3, "geometric", 0.3).log(), -1).mean()
    assert abs(value - float(exact)) < 1e-5


def test_fit_with_validation_rows_keeps_the_best_epoch_by_the_enumerated_validation_elbo():
    fit = pyro_bdl.fit("adaptive-depth-resnet", inference="svi-amortised", options=SMALL, epochs=4, lr=5e-3,
                       validation=0.2, progress=False)
    history = fit.info.elbo_history["validation"]
    assert len(history) == 4 and fit.info.validation_rows == round(0.2 * 1797)
    assert fit.info.validation_elbo == max(history) and np.isfinite(history).all()


def _guide_grads(step) -> torch.Tensor:
    """The gradient of the guide's parameters after ``step()`` (a loss's backward pass), flattened."""
    params = [p for name, p in pyro.get_param_store().named_parameters() if name.startswith("adaptive_depth.guide")]
    for p in params:
        p.grad = None
    step()
    return torch.cat([p.grad.reshape(-1).clone() for p in params])


@pytest.mark.slow
def test_score_function_gradient_of_the_guide_is_the_enumerated_gradient_within_monte_carlo_error():
    """TraceGraph (REINFORCE with a baseline) is unbiased: the mean of K gradient draws of the guide's parameters
    lies within 4.5 standard errors (of K draws; 4.5: a bound for the largest of ~200 coordinates) of the exact
    gradient, where the guide's Categorical is summed out by enumeration."""
    pyro.clear_param_store()
    torch.manual_seed(0)
    x, y = tiny_rows(n=8)
    kw = dict(num_classes=3, estimator="score", **SMALL)
    model = lambda x, y: adaptive_depth_resnet(x, y, **kw)  # noqa: E731
    guide = lambda x, y: depth_guide(x, y, **kw)  # noqa: E731
    pyro.poutine.trace(guide).get_trace(x, y)  # creates the guide's parameters
    exact = _guide_grads(lambda: TraceEnum_ELBO(max_plate_nesting=1).differentiable_loss(
        model, config_enumerate(guide), x, y).backward())
    graph = TraceGraph_ELBO()
    draws = torch.stack([_guide_grads(lambda: graph.loss_and_grads(model, guide, x, y)) for _ in range(300)])
    se = draws.std(0) / len(draws) ** 0.5
    z = (draws.mean(0) - exact) / se.clamp_min(1e-8)
    assert exact.abs().max() > 0.01 and z.abs().max() < 4.5, z.abs().max()


@pytest.mark.slow
def test_score_function_guide_converges_to_the_enumerated_posterior_over_depth():
    """With the network fixed, q(z | x) trained by REINFORCE alone reaches the exact p(z | x, y) of every row.  At
    the exact posterior every row's log weight is log p(y | x), whatever z is drawn, so the score-function gradient
    has no variance there: the iterates settle (their sd over the last 200 steps falls below 0.005) and the tolerance
    0.01 bounds what is left of the optimisation, not Monte Carlo noise."""
    pyro.clear_param_store()
    torch.manual_seed(0)
    x, y = tiny_rows(n=4)
    kw = dict(num_classes=3, estimator="score", prior="power", rate=0.0, **SMALL)
    model = lambda x, y: adaptive_depth_resnet(x, y, **kw)  # noqa: E731
    guide = lambda x, y: depth_guide(x, y, **kw)  # noqa: E731
    exact = TraceEnum_ELBO(max_plate_nesting=1).compute_marginals(
        lambda x, y: adaptive_depth_resnet(x, y, **{**kw, "estimator": "exact"}), lambda x, y: None, x, y)["depth"].probs
    pyro.poutine.trace(guide).get_trace(x, y)
    params = [p for name, p in pyro.get_param_store().named_parameters() if name.startswith("adaptive_depth.guide")]
    optimiser = torch.optim.Adam(params, lr=0.02)
    loss = TraceGraph_ELBO(num_particles=4)
    net = pyro.module("adaptive_depth.net", ResidualHeads(6, 3, 8, 3), update_module_params=True)
    q_net = pyro.module("adaptive_depth.guide", DepthGuide(8, 3), update_module_params=True)
    tail = []
    for step in range(800):
        optimiser.zero_grad()
        loss.loss_and_grads(model, guide, x, y)
        optimiser.step()
        if step >= 600:
            with torch.no_grad():
                tail.append(torch.softmax(q_net(net.features(x)), -1))
    tail = torch.stack(tail)
    spread, error = float(tail.std(0).max()), float((tail.mean(0) - exact.detach()).abs().max())
    assert spread < 0.005 and error < 0.01, (spread, error)


def test_early_exit_mode_is_the_mode_of_the_joint_and_counts_the_blocks_it_ran():
    g = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(3 * torch.randn(200, 5, 4, generator=g), -1)
    pi = depth_prior(5, "geometric", 0.4).expand(200, 5)
    d = decide("mode", logp, pi)
    joint = logp + pi.log().unsqueeze(-1)  # log p(y, z | x) up to a constant, (n, L, C)
    best = joint.reshape(200, -1).argmax(-1)
    assert torch.equal(d.depth, best // 4 + 1) and torch.equal(d.pred, best % 4)
    assert bool((d.blocks >= d.depth).all()) and bool((d.blocks < 5).any())
    # a certificate: after the blocks it ran, no deeper depth could have beaten the answer
    value = joint.max(-1).values.gather(1, (d.depth - 1).unsqueeze(1)).squeeze(1)
    for i in range(200):
        if d.blocks[i] < 5:
            assert value[i] >= pi[i, d.blocks[i]:].log().max()


def test_multiply_adds_are_those_of_the_layers_that_ran():
    net = ResidualHeads(64, 10, width=16, blocks=4)
    counted = []
    for m in net.modules():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(lambda m, i, o: counted.append(m.in_features * m.out_features))
    for l in range(1, 5):
        counted.clear()
        net(torch.rand(1, 64), depth=l)
        assert sum(counted) == multiply_adds(64, 10, 16, l, l)
    threshold = decide("threshold", torch.log(torch.tensor([[[0.5, 0.5], [0.95, 0.05], [0.99, 0.01]]])),
                       torch.ones(1, 3) / 3, threshold=0.9)
    assert threshold.blocks.item() == threshold.heads.item() == threshold.depth.item() == 2


@pytest.fixture(scope="module")
def digits_fit():
    return pyro_bdl.fit("adaptive-depth-resnet", inference="svi-amortised", options=SMALL, epochs=15, lr=5e-3,
                        progress=False)


@pytest.mark.slow
def test_fit_predicts_depth_and_posterior_per_row_and_survives_a_round_trip(digits_fit, tmp_path):
    fit = digits_fit
    assert fit.report["train_accuracy"] > 0.8
    rows = pyro_bdl.load("digits-01").X[:6]
    before = fit.predict(rows)
    assert {"pred", "depth", "blocks", "macs", "post_depth_1", "post_depth_3", "prob_9"} <= set(before.columns)
    post = before[[f"post_depth_{l}" for l in (1, 2, 3)]].to_numpy()
    assert np.allclose(post.sum(1), 1.0, atol=1e-5)
    write_fit(fit, tmp_path / "fit", plots=False)
    pyro.clear_param_store()
    with warnings.catch_warnings():  # one epoch, short on purpose: only its networks' names matter here
        warnings.simplefilter("ignore", pyro_bdl.ConvergenceWarning)
        other = pyro_bdl.fit("adaptive-depth-resnet", inference="svi-amortised", options=SMALL, epochs=1, seed=3,
                             progress=False)  # another fit's networks under the same names
    back = pyro_bdl.load_fit(tmp_path / "fit")
    pd.testing.assert_frame_equal(back.predict(rows), before, atol=1e-5)
    assert not np.allclose(other.predict(rows)["prob_0"], before["prob_0"], atol=1e-3)
    from pyro_bdl.models.adaptive_depth.plots import plots

    assert plots(back, tmp_path) == ["depth_posterior.png", "depth_histogram.png"]  # no held-out rows: training rows
    assert all((tmp_path / name).stat().st_size > 0 for name in ("depth_posterior.png", "depth_histogram.png"))


@pytest.mark.parametrize("options, elbo", [({"estimator": "score"}, "tracegraph"), ({"estimator": "relaxed"}, "trace"),
                                           ({"depth": "global"}, "enum")])
def test_every_estimator_trains_and_reports_its_rules(options, elbo):
    fit = pyro_bdl.fit("adaptive-depth-resnet", inference="svi-amortised", options={**SMALL, **options}, elbo=elbo,
                       epochs=3, lr=5e-3, progress=False)
    train, test = pyro_bdl.load("digits-01"), pyro_bdl.load("digits-01")
    from pyro_bdl.posterior.evaluation import evaluate_fit

    scores = evaluate_fit(fit, Dataset("rows", test.X[:100], test.y[:100]))
    for rule in ("mode", "sample", "threshold", "marginal"):
        assert 0 <= scores[f"test_{rule}_accuracy"] <= 1 and 1 <= scores[f"test_{rule}_depth"] <= 3
    assert scores["test_marginal_depth"] == 3 and scores["test_marginal_saved"] < 0  # every block and head
    assert "q_depth_1" in fit.predict(train.X[:2]).columns


def test_bad_options_give_clear_errors():
    x, y = tiny_rows()
    for options, match in [({"estimator": "reinforce"}, "estimator.*exact, score, relaxed"),
                           ({"depth": "global", "estimator": "score"}, "per-example depth"),
                           ({"rate": 1.5}, r"rate must lie in \(0, 1\)")]:
        with pytest.raises(ValueError, match=match):
            adaptive_depth_resnet(x, y, num_classes=3, **SMALL, **options)
    with pytest.raises(ValueError, match="rule must be one of mode, sample, threshold, marginal"):
        pyro_bdl.get_model("adaptive-depth-resnet").resolve_options({"rule": "best"})
    with pytest.raises(ValueError, match="option 'temperature'.*> 0"):
        pyro_bdl.get_model("adaptive-depth-resnet").resolve_options({"temperature": "0"})
    with pytest.raises(ValueError, match="option 'threshold'"):
        pyro_bdl.get_model("adaptive-depth-resnet").resolve_options({"threshold": "1.5"})
    with pytest.raises(ValueError, match="jit=false"):
        pyro_bdl.fit("adaptive-depth-resnet", inference="svi-amortised", options={**SMALL, "estimator": "relaxed"},
                     elbo="trace", jit=True, epochs=1, progress=False)


def test_cli_fit_and_predict_write_depths(tmp_path, capsys):
    out = tmp_path / "fit"
    assert main(["fit", "adaptive-depth-resnet", "--out", str(out), "--option", "width=8", "--option", "blocks=3",
                 "--option", "rule=threshold", "--set", "epochs=3", "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert (out / "depth_posterior.png").stat().st_size > 0 and (out / "depth_histogram.png").stat().st_size > 0
    held = metrics["heldout"]
    assert {"test_accuracy", "test_mean_depth", "test_compute_saved", "test_threshold_saved"} <= set(held)
    assert held["test_accuracy"] == held["test_threshold_accuracy"]
    digits = pyro_bdl.load("digits-01")
    np.savez(tmp_path / "rows.npz", x=digits.X[:4].numpy().reshape(4, 8, 8))
    assert main(["predict", str(out), "--data", str(tmp_path / "rows.npz"), "--out", str(tmp_path / "p.csv")]) == 0
    table = pd.read_csv(tmp_path / "p.csv")
    assert len(table) == 4 and {"depth", "blocks", "post_depth_3"} <= set(table.columns)
