"""Inference methods: one table, :data:`~pyro_bdl.inference.method.METHODS`, maps a method name to its runner and
settings.

The table and the types it holds live in :mod:`pyro_bdl.inference.method`; each method module declares its methods
there at import, and this package imports the method modules, listed here, so that importing it fills the table.
Adding a method is writing its module and adding it to :data:`METHOD_MODULES`.  :func:`pyro_bdl.fit` looks the
method up, resolves the settings (:func:`pyro_bdl.registry.resolve`) and turns the
:class:`~pyro_bdl.inference.base.Draws` into a :class:`~pyro_bdl.result.FitResult`.

The method modules:

* ``svi``: SVI (reparameterised and score-function), MAP and MLE, and the optimisation loop they share.
* ``amortised``: ``svi-amortised``, minibatch SVI for a model with its own encoder guide.
* ``dropout``: MC dropout and DropConnect; ``concrete_dropout``: MC dropout with the rate learned per layer.
* ``ensemble``: deep ensembles, independently initialised MAP fits.
* ``importance``: self-normalised importance sampling.
* ``laplace``: the Laplace approximation, and the GGN Laplace of networks (``laplace-ggn``).
* ``mcmc``: the zoo's sampler and the MCMC methods (``nuts``, ``hmc``, ``metropolis``).

What they share:

* ``method``: the method table, ``Method``, settings and their domains.
* ``base``: what every runner returns (``Draws``), and site bookkeeping.
* ``prototype``: one trace of a model, read for its sites, parameters, plates and supports once per fit.
* ``outputs``: typed records a method returns beside its draws, and the one way they are written to and read from
  ``metrics.json``.
* ``diagnose``: each method family's check of its own fit: the loss, chain and importance-weight reports.
* ``drift``: is the answer still moving when an optimisation run ends.
* ``mode_check``: does a point fit's density have a mode, or run to an edge of a support.
* ``prior_draws``: draws of the latent sites' priors for the checks against the prior, the program run twice
  where no prior depends on another latent.
* ``guides``: guides (variational families) and the prior-dropping handler of MLE.
* ``starts``: where optimisation and the structural run start a user's program: the centre its priors name.
* ``symmetry``: point starts that are not a network's symmetric saddle.
* ``program_errors``: a user program's linear-algebra failure, named by site and value.
* ``optim``: the zoo's optimiser, ClippedAdam's update as one multi-tensor step.
* ``callbacks``: what the optimisation loop calls around every step, one protocol (``StepCallback``).
* ``compiled_elbo``: compiled ELBOs, one trace of model, guide and ELBO replayed at every step.
* ``local_reparam``: the local reparameterisation trick for dense and convolutional layers.
* ``natural_gradient``: natural-gradient steps for a Gaussian site a data term is conjugate to (the sparse GP's
  inducing values).
* ``ggn``: the generalised Gauss-Newton Laplace of a network's weights, and its linearised network.
* ``marginal``: per-row importance weights: the ELBO, the importance-sampled marginal likelihood, IWAE.
* ``enumeration``: discrete latent sites summed out by enumeration.
* ``site_shapes``: batch dimensions outside every plate, as Pyro's NUTS accepts them.
* ``pyro_internals``: every private part of Pyro we read, and nowhere else.
* ``compile``: the speed machinery, knowing ``torch.fx`` and nothing of Pyro.
* ``parallel``: where a fit runs: threads, device, the processes of a launch.

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
