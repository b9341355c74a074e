"""The zoo's sampler and the MCMC methods (``nuts``, ``hmc``, ``metropolis``).

* :mod:`~pyro_bdl.inference.mcmc.methods`: the methods' declarations, and the path through Pyro's own kernels.
* :mod:`~pyro_bdl.inference.mcmc.zoo`: the ``nuts`` / ``hmc`` runners on the zoo's sampler (checkpoints, resumption).
* :mod:`~pyro_bdl.inference.mcmc.draws`: finished chains stacked as the methods' draws.
* :mod:`~pyro_bdl.inference.mcmc.sampler`: the sampling loop, every chain advanced as one batch, with snapshots.
* :mod:`~pyro_bdl.inference.mcmc.nuts`, :mod:`~pyro_bdl.inference.mcmc.hmc`: the transitions (the NUTS tree, the
  HMC trajectory), each a kernel object the loop is given.
* :mod:`~pyro_bdl.inference.mcmc.adaptation`: the warm-up (windows, dual averaging, mass matrix, initial points).
* :mod:`~pyro_bdl.inference.mcmc.dynamics`: leapfrog, momentum and energy on a batch of chains, and the kernels'
  steps fused with the potential (one call to :mod:`pyro_bdl.inference.compile`).
* :mod:`~pyro_bdl.inference.mcmc.potential`: the model's potential on one flat unconstrained vector and its gradient.

Importing this package declares the methods only; the sampler's machinery (and the compiler it calls) is imported
by the first fit that samples on the zoo's kernel.
"""

from pyro_bdl.inference.mcmc import methods  # noqa: F401  (declares nuts, hmc and metropolis)
