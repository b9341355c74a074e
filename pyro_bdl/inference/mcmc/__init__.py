"""The zoo's sampler and the MCMC methods (``nuts``, ``hmc``, ``metropolis``).

* :mod:`~pyro_bdl.inference.mcmc.potential`: the model's potential on one flat unconstrained vector and its gradient.
* :mod:`~pyro_bdl.inference.mcmc.kernel`: NUTS and HMC with every chain advanced as one batch.
* :mod:`~pyro_bdl.inference.mcmc.zoo`: the ``nuts`` / ``hmc`` runners on that kernel (checkpoints, resumption).
* :mod:`~pyro_bdl.inference.mcmc.methods`: the methods' declarations, and the path through Pyro's own kernels.
"""

from pyro_bdl.inference.mcmc import methods  # noqa: F401  (declares nuts, hmc and metropolis)
