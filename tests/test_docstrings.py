"""Every docstring example runs (they are part of the documentation users copy from)."""

import doctest
import importlib

import pytest

MODULES = [
    "pyro_bdl", "pyro_bdl.registry", "pyro_bdl.data", "pyro_bdl.fit", "pyro_bdl.result",
    "pyro_bdl.diagnostics", "pyro_bdl.checkpoint", "pyro_bdl.datasets", "pyro_bdl.models.bnn", "pyro_bdl.evaluate", "pyro_bdl.uncertainty", "pyro_bdl.gradients", "pyro_bdl.inference.guides",
    "pyro_bdl.models.blr", "pyro_bdl.models.coin", "pyro_bdl.models.last_layer",
    "pyro_bdl.inference.jit", "pyro_bdl.inference.local_reparam", "pyro_bdl.inference.optim", "pyro_bdl.cli",
]


@pytest.mark.filterwarnings("ignore::pyro_bdl.ConvergenceWarning")
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_every_module_has_an_example():
    assert all(importlib.import_module(m).__doc__ for m in MODULES)
