"""Constant folding of traced graphs (pyro_bdl.inference.graph_folding): the folded graph computes what the
graph did, on inputs other than those it was traced with, and leaves random operations and shape-changing
identities alone."""

from __future__ import annotations

import copy

import pyro
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pyro_bdl.inference.graph_folding import fold_constants, operations
from pyro_bdl.inference.potential import flat_potential
from pyro_bdl.registry import get_model


def test_folded_potential_of_a_zoo_model_gives_the_same_values_and_gradients_with_fewer_operations():
    X, y = torch.randn(50, 3), torch.randn(50)
    model = get_model("blr").bind({"noise": 1.0, "prior_scale": 1.0})
    potential = flat_potential(model, {"X": X, "y": y}, chains=2, compile=False)
    tensors = potential.data_tensors({"X": X, "y": y})
    theta = torch.randn(2, potential.dim)
    potential.value_and_grad(theta, tensors)
    graph = potential._graph
    folded = fold_constants(copy.deepcopy(graph))
    assert operations(folded) < operations(graph)
    for seed in range(3):  # inputs it was not traced with: data and parameters
        torch.manual_seed(seed)
        args = (torch.randn(2, potential.dim), torch.randn(50, 3), torch.randn(50))
        for want, got in zip(graph(*args), folded(*args)):
            assert torch.allclose(want, got, rtol=1e-6, atol=1e-6)


def test_random_operations_are_not_folded():
    gm = make_fx(lambda x: x + torch.randn(3))(torch.zeros(3))
    folded = fold_constants(gm)
    assert not torch.equal(folded(torch.zeros(3)), folded(torch.zeros(3)))


def test_adding_zeros_that_broadcast_is_kept():
    gm = make_fx(lambda x: x + torch.zeros(2, 3))(torch.randn(3))
    assert fold_constants(gm)(torch.ones(3)).shape == (2, 3)


def test_in_place_operations_are_not_folded():
    def f(x):
        buffer = torch.zeros(3)
        buffer.add_(1.0)
        return x * buffer

    gm = make_fx(f)(torch.randn(3))
    assert torch.equal(fold_constants(gm)(torch.full((3,), 2.0)), torch.full((3,), 2.0))


def test_the_traced_kernel_gives_the_draws_of_its_unfolded_steps(monkeypatch):
    """The zoo NUTS kernel's traced steps, folded, give the draws the same steps give without folding."""
    from pyro_bdl.inference import potential as potential_module
    from pyro_bdl.inference.zoo_mcmc import run_zoo_mcmc

    X, y = torch.randn(40, 2), torch.randn(40)
    model = get_model("blr").bind({"noise": 1.0})

    def draws():
        potential_module._CACHE.clear()
        pyro.set_rng_seed(0)
        return run_zoo_mcmc("nuts", model, {"X": X, "y": y}, samples=30, warmup=30, chains=1, progress=False,
                            jit=False).samples["w"]

    folded = draws()
    monkeypatch.setattr(potential_module, "fold_constants", lambda gm: gm)
    unfolded = draws()
    potential_module._CACHE.clear()
    assert torch.allclose(folded, unfolded, rtol=1e-5, atol=1e-5)
