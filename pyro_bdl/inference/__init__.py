"""Inference methods: one table, :data:`~pyro_bdl.inference.method.METHODS`, maps a method name to its runner and
settings.

The table and the types it holds live in :mod:`pyro_bdl.inference.method`; each method module declares its methods
there at import, and this package imports the method modules, listed here, so that importing it fills the table.
Adding a method is writing its module and adding it to :data:`METHOD_MODULES`.  :func:`pyro_bdl.fit` looks the
method up, resolves the settings (:func:`pyro_bdl.registry.resolve`) and turns the
:class:`~pyro_bdl.inference.base.Draws` into a :class:`~pyro_bdl.result.FitResult`.

Support modules: :mod:`~pyro_bdl.inference.base` (what runners return, site bookkeeping), guides, the optimiser,
the compiled ELBOs, local reparameterisation, the GGN, the importance-weighted marginal
(:mod:`~pyro_bdl.inference.marginal`), the private parts of Pyro we read (:mod:`~pyro_bdl.inference.pyro_internals`);
the sampler in :mod:`pyro_bdl.inference.mcmc`, the speed machinery in :mod:`pyro_bdl.inference.compile`.

Example
-------
>>> from pyro_bdl.inference import get_method
>>> nuts = get_method("nuts")
>>> sorted(nuts.requires), nuts.resolve_settings({"jit": "true"})["jit"]
(['continuous'], True)
"""

from __future__ import annotations

from pyro_bdl.inference import svi, amortised, dropout, concrete_dropout, ensemble, importance, laplace, mcmc  # noqa: I001 (table order)
from pyro_bdl.inference.base import Draws, RunContext, as_flag, latent_sites, model_params, observed_sites
from pyro_bdl.inference.method import METHODS, SETTING_DOMAINS, Domain, Method, get_method, register_method

#: The modules that declare methods, in the order ``pyro-bdl list`` shows them.
METHOD_MODULES = (svi, amortised, dropout, concrete_dropout, ensemble, importance, laplace, mcmc)

__all__ = ["Method", "METHODS", "METHOD_MODULES", "register_method", "get_method", "Domain", "SETTING_DOMAINS",
           "Draws", "RunContext", "as_flag", "latent_sites", "observed_sites", "model_params"]
