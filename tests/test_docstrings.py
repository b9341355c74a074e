"""Every docstring example runs (they are part of the documentation users copy from)."""

import contextlib
import doctest
import importlib
import pkgutil

import pytest

import pyro_bdl

#: The modules a user reads: each has at least one runnable example.
DOCUMENTED = [
    "pyro_bdl", "pyro_bdl.registry", "pyro_bdl.data", "pyro_bdl.fit", "pyro_bdl.result",
    "pyro_bdl.diagnostics", "pyro_bdl.checkpoint", "pyro_bdl.datasets", "pyro_bdl.models.bnn", "pyro_bdl.reports",
    "pyro_bdl.uncertainty", "pyro_bdl.gradients", "pyro_bdl.inference.guides",
    "pyro_bdl.models.blr", "pyro_bdl.models.coin", "pyro_bdl.models.last_layer",
    "pyro_bdl.inference.jit", "pyro_bdl.inference.local_reparam", "pyro_bdl.log_uniform", "pyro_bdl.pruning",
    "pyro_bdl.models.sparse_vd", "pyro_bdl.inference.optim", "pyro_bdl.cli",
    "pyro_bdl.layers", "pyro_bdl.networks", "pyro_bdl.feature_maps", "pyro_bdl.transforms", "pyro_bdl.inference.laplace",
    "pyro_bdl.inference.ggn",
    "pyro_bdl.inference.pyro_internals", "pyro_bdl.gap_problems", "pyro_bdl.validate",
    "pyro_bdl.models.vae", "pyro_bdl.models.ss_vae", "pyro_bdl.models.adaptive_depth_resnet",
    "pyro_bdl.depth_networks", "pyro_bdl.depth_decisions", "pyro_bdl.depth_report", "pyro_bdl.depth_plots",
    "pyro_bdl.generative",
    "pyro_bdl.marginal", "pyro_bdl.images", "pyro_bdl.image_networks",
]
#: The engine's internals, reached through ``pyro_bdl.fit`` / the CLI (their examples, if any, still run).
INTERNAL = [
    "pyro_bdl.arviz_io", "pyro_bdl.files", "pyro_bdl.inference", "pyro_bdl.inference.base",
    "pyro_bdl.inference.dropout", "pyro_bdl.inference.ensemble", "pyro_bdl.inference.importance",
    "pyro_bdl.inference.mcmc", "pyro_bdl.inference.svi", "pyro_bdl.models", "pyro_bdl.plots",
    "pyro_bdl.predictive", "pyro_bdl.store", "pyro_bdl.inference.potential", "pyro_bdl.inference.nuts_kernel",
    "pyro_bdl.inference.zoo_mcmc", "pyro_bdl.inference.amortised", "pyro_bdl.inference.graph_folding",
    "pyro_bdl.inference.scripted", "pyro_bdl.inference.aten_trace",
]
#: Modules whose examples run fits short enough that the diagnostics say so (as a user would see).
FLAGGED = {"pyro_bdl.reports", "pyro_bdl.feature_maps", "pyro_bdl.result"}
ALL = sorted({m.name for m in pkgutil.walk_packages(pyro_bdl.__path__, "pyro_bdl.")} | {"pyro_bdl"})


def test_every_module_is_either_documented_or_internal():
    assert sorted(DOCUMENTED + INTERNAL) == ALL  # a new module must be put in one of the two lists


@pytest.mark.parametrize("name", ALL)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    with pytest.warns(pyro_bdl.ConvergenceWarning) if name in FLAGGED else contextlib.nullcontext():
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    if name in DOCUMENTED:
        assert module.__doc__ and result.attempted > 0, f"{name} has no runnable example"
