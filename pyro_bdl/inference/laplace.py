r"""The Laplace approximation: the posterior mode, and a Gaussian with the curvature there.

In the unconstrained coordinates :math:`u` of the latent variables (Pyro's transforms: log for a positive
site, logit for a probability),

.. math::

    \hat u = \arg\max_u \; \log p(y, u), \qquad
    q(u) = \mathcal N\big(\hat u, H^{-1}\big), \quad H = -\nabla_u^2 \log p(y, u)\big|_{u = \hat u},

where :math:`\log p(y, u)` includes the log Jacobian of the transform.  For a Gaussian posterior (``blr``
with known noise) :math:`q` is exact; for the coin it is a Gaussian in :math:`\operatorname{logit}\pi`,
whose mode is :math:`\log(a / b)` and precision :math:`ab / (a + b)` for the posterior
:math:`\mathrm{Beta}(a, b)`.  Pyro's :class:`~pyro.infer.autoguide.AutoLaplaceApproximation` does both steps
(the mode by the zoo's optimiser loop, the Hessian by autograd); the draws come from its Gaussian.  The
Hessian is dense, (d, d): the method suits low-dimensional models.

Example
-------
>>> import math, pyro_bdl
>>> fit = pyro_bdl.fit("coin", inference="laplace", progress=False)
>>> a, b = 1 + fit.report["heads"], 1 + fit.report["tosses"] - fit.report["heads"]   # Beta(a, b) posterior
>>> fit.samples["pi"].shape, abs(float(fit.guide.loc) - math.log(a / b)) < 0.01   # the mode of logit(pi)
(torch.Size([1, 1000]), True)
"""

from __future__ import annotations

import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoLaplaceApproximation, init_to_median

from .base import Draws, latent_sites

__all__ = ["run_laplace"]


def run_laplace(model, data: dict, *, steps: int, lr: float, samples: int, progress: bool, checkpoint=None,
                init_loc_fn=None, **adam) -> Draws:
    """The mode by ``steps`` of the zoo's optimiser (Adam, ``lr``), then ``samples`` draws from the Gaussian
    with the inverse Hessian; ``guide`` of the result is that Gaussian (an ``AutoMultivariateNormal``)."""
    from .svi import guide_draws, optimise

    guide = AutoLaplaceApproximation(model, init_loc_fn=init_loc_fn or init_to_median)
    losses = optimise(model, guide, Trace_ELBO(), data, steps=steps, lr=lr, progress=progress, desc="laplace",
                      checkpoint=checkpoint, **adam)
    try:
        gaussian = guide.laplace_approximation(**data)
    except torch.linalg.LinAlgError:
        raise ValueError("laplace: the Hessian of -log p(y, theta) at the optimum is not positive definite "
                         "(the optimisation has not reached a mode, or the posterior has none): run more steps "
                         "(--steps) or use another method") from None
    draws = guide_draws(gaussian, data, latent_sites(model, data), samples)
    return Draws(draws, losses=losses, guide=gaussian, info={"laplace_dimension": int(gaussian.loc.numel())})


def _register() -> None:
    from . import Method, register_method
    from .svi import ADAM_SETTINGS

    register_method(Method(
        "laplace", "svi", "Laplace approximation: the mode, then a Gaussian with the inverse Hessian "
        "(unconstrained coordinates; AutoLaplaceApproximation)", run_laplace,
        {"steps": 2000, "lr": 0.02, "samples": 1000, **ADAM_SETTINGS},
        requires=frozenset({"continuous", "low-dimensional"}), takes_init=True, quick={"steps": 500, "samples": 50}))


_register()
