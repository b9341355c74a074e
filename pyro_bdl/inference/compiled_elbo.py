r"""Compiled ELBOs: one ``torch.jit.trace`` of model + guide + ELBO, replayed at every step.

:class:`CompiledTrace_ELBO` and :class:`CompiledTraceMeanField_ELBO` compute exactly what
``Trace_ELBO`` and ``TraceMeanField_ELBO`` compute (the tests check loss and gradients at the same
random draws), without re-running Pyro's effect handlers, traces and distribution objects at every
step: the first call traces the loss with :func:`pyro.ops.jit.trace` (with argument validation
off; the eager run that precedes it is validated), later calls replay the traced graph (without the
JIT's graph optimisations, :data:`OPTIMIZE_GRAPH`). Random
draws (the guide's ``eps``, a plate's subsample indices) are operations of the graph, fresh at
every call.  Draws the loss does not use are dropped from the graph as dead code: with the analytic
KL and local reparameterisation (:mod:`pyro_bdl.inference.local_reparam`) nothing reads the guide's
weight draws, so the compiled loss skips them, consuming the random stream differently from the
eager ELBO: the same distribution of losses and gradients, not the same draws at the same seed.

Why not Pyro's own: in pyro-ppl 1.9.2 ``JitTraceMeanField_ELBO`` checks for a cached function under
``_loss_and_surrogate_loss`` but stores it as ``_differentiable_loss``, so it re-traces at every
step (measured: 30 ms per loss and gradient for the 1-50-50-1 regressor, 8x the eager ELBO); and both ``JitTrace_ELBO`` and it take tensors only
positionally, while the zoo passes its data by keyword (``svi.step(X=..., y=...)``).  Here tensor
keywords become positional inputs of the graph and the other keywords (``batch_size``, ``y=None``)
select one compiled graph each, as do the shapes and dtypes of the tensors.

Requirements (as for any traced function): a static model structure for given non-tensor arguments,
a reparameterised guide, and no global data other than the param store.
"""

from __future__ import annotations

import warnings
import weakref

import pyro
import torch
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO
from pyro.util import warn_if_nan

from pyro_bdl.inference import pyro_internals

__all__ = ["CompiledTrace_ELBO", "CompiledTraceMeanField_ELBO"]

#: Whether the TorchScript executor optimises the traced graph.  Off: the recorded operations run as
#: they are and autograd differentiates them with its own kernels.  The optimised executor rewrites
#: the graph into differentiable subgraphs with TorchScript's symbolic gradients (e.g. a ReLU's
#: backward in three operations instead of one) and, without a CPU fuser in the standard CPU builds,
#: fuses nothing to pay for them.  ``benchmarks/bbb_step.py --optimize-graph`` against without it, two
#: pairs of runs: the optimised step is 5-18 % slower for the regressor's ``svi``, 4-5 % for the
#: classifier's, 4-8 % and -2 to +1 % for their ``svi-meanfield``.
OPTIMIZE_GRAPH = False


class _Compiled:
    """Mixin over a Pyro ELBO: ``loss_and_grads`` / ``differentiable_loss`` through a traced graph."""

    #: The parameters are those of the first call: a replayed graph reads no others (and
    #: pyro.ops.jit.trace refuses a function that creates new ones later).  The zoo's SVI step
    #: (:func:`pyro_bdl.inference.svi.make_svi`) then looks them up once instead of at every step.
    fixed_params = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled = {}  # (model, guide, tensor names, shapes) -> pyro.ops.jit function
        self._graphs = {}  # (that key, static keywords) -> (its graph, its parameter names)

    def _particle_loss(self, model_trace, guide_trace) -> torch.Tensor:
        """The differentiable negative ELBO of one particle (a tensor, never ``.item()``: a trace would freeze it)."""
        raise NotImplementedError

    def _eager_loss(self, model, guide, args, kwargs) -> torch.Tensor:
        loss = 0.0
        for model_trace, guide_trace in pyro_internals.elbo_traces(self, model, guide, args, kwargs):
            loss = loss + self._particle_loss(model_trace, guide_trace) / self.num_particles
        return loss

    def _loss(self, model, guide, args, kwargs) -> torch.Tensor:
        """The compiled loss, run without the JIT's graph optimisations (:data:`OPTIMIZE_GRAPH`)."""
        with torch.jit.optimized_execution(OPTIMIZE_GRAPH):
            return self._compiled_loss(model, guide, args, kwargs)

    def _compiled_loss(self, model, guide, args, kwargs) -> torch.Tensor:
        """The compiled loss: traced at the first call for a key, the graph replayed after that."""
        names = tuple(k for k, v in kwargs.items() if torch.is_tensor(v))
        tensors = tuple(args) + tuple(kwargs[k] for k in names)
        static = {k: v for k, v in kwargs.items() if k not in names}
        key = (id(model), id(guide), len(args), names, tuple((t.shape, t.dtype) for t in tensors))
        try:  # the graph for these static keywords, once compiled
            graph_key = (key, tuple(sorted(static.items())))
            replay = self._graphs.get(graph_key)
        except TypeError:  # unhashable static keywords: left to pyro.ops.jit, which hashes them by id
            graph_key = replay = None
        if replay is not None:
            # the graph alone: pyro.ops.jit's call would wrap it in a param-capturing trace, to catch
            # parameters created after compilation, which a replayed graph cannot create; the
            # parameters are still read through pyro.param, so handlers (e.g. SVI's capture) see them
            graph, param_names = replay
            return graph(*(pyro.param(name).unconstrained() for name in param_names), *tensors)
        function = self._compiled.get(key)
        if function is None:
            weakself, n_args = weakref.ref(self), len(args)

            def loss_fn(*tensors, **static):
                return weakself()._eager_loss(model, guide, tensors[:n_args], {**dict(zip(names, tensors[n_args:])), **static})

            # pyro.ops.jit.trace: the params are graph inputs; one graph per distinct `static`
            function = self._compiled[key] = pyro.ops.jit.trace(loss_fn, ignore_warnings=True)
        with warnings.catch_warnings():  # torch.jit.trace's deprecation notice: it is what works here
            warnings.filterwarnings("ignore", "`torch.jit.trace` is deprecated", DeprecationWarning)
            loss = function(*tensors, **static)
        if graph_key is not None:  # the graph pyro.ops.jit traced for these arguments, to replay it directly
            replay = pyro_internals.compiled_graph(function, tensors, static)
            if replay is not None:
                self._graphs[graph_key] = replay
        return loss

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        loss = self._loss(model, guide, args, kwargs)
        warn_if_nan(loss, "loss")
        return loss

    def loss_and_grads(self, model, guide, *args, **kwargs) -> float:
        loss = self._loss(model, guide, args, kwargs)
        loss.backward()
        value = loss.item()
        warn_if_nan(value, "loss")  # on the float, as Trace_ELBO.loss_and_grads does
        return value


class CompiledTrace_ELBO(_Compiled, Trace_ELBO):
    """``Trace_ELBO`` compiled: ``log p(y, theta) - log q(theta)`` at one draw per particle.

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import SVI
    >>> from pyro_bdl.inference.guides import MeanFieldGuide
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
    ...     with pyro.plate("data", len(y)):
    ...         pyro.sample("obs", dist.Normal(mu, 1.0), obs=y)
    >>> svi = SVI(model, MeanFieldGuide(model), pyro.optim.Adam({"lr": 0.01}), CompiledTrace_ELBO())
    >>> loss = svi.step(y=torch.zeros(5))  # traced here, replayed from now on
    """

    def _particle_loss(self, model_trace, guide_trace) -> torch.Tensor:
        elbo = 0.0
        for site in model_trace.nodes.values():
            if site["type"] == "sample":
                elbo = elbo + site["log_prob_sum"]
        for name, site in guide_trace.nodes.items():
            if site["type"] == "sample":
                if not site["fn"].has_rsample:
                    raise NotImplementedError(f"the compiled ELBO needs a reparameterised guide; site '{name}' is not")
                elbo = elbo - site["log_prob_sum"]
        return -elbo


class CompiledTraceMeanField_ELBO(_Compiled, TraceMeanField_ELBO):
    """``TraceMeanField_ELBO`` compiled: ``KL(q || p)`` in closed form where one exists (a plain
    ``Normal`` guide against a ``Normal`` prior, e.g. :class:`~pyro_bdl.inference.guides.MeanFieldGuide`
    on a network's weights), ``log p - log q`` at the draw elsewhere."""

    def _particle_loss(self, model_trace, guide_trace) -> torch.Tensor:
        return pyro_internals.meanfield_particle_loss(self, model_trace, guide_trace)
