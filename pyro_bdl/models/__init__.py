"""The zoo: one module (or, for a family with helpers of its own, one package) per model.  Importing this package
registers every model with :mod:`pyro_bdl.registry`; :mod:`pyro_bdl` imports it last, after the engine.

* :mod:`~pyro_bdl.models.blr`, :mod:`~pyro_bdl.models.coin`: the linear models with exact posteriors.
* :mod:`~pyro_bdl.models.gp`: Gaussian process regression (exact, or sparse for large data), the model MC dropout
  approximates; :mod:`~pyro_bdl.models.gp_classifier`: GP classification with inducing points.
* :mod:`~pyro_bdl.models.bnn`: the Bayesian MLP regressor and classifier; :mod:`~pyro_bdl.models.networks`: what the
  zoo's network models share (their guide, start, SVI settings, label checks).
* :mod:`~pyro_bdl.models.last_layer`: a Bayesian last layer on a fixed feature map (and training that map).
* :mod:`~pyro_bdl.models.sparse_vd`: sparse variational dropout (the model, and pruning by its posterior).
* :mod:`~pyro_bdl.models.vae`, :mod:`~pyro_bdl.models.ss_vae`: the VAE and the semi-supervised VAE.
* :mod:`~pyro_bdl.models.adaptive_depth`: the ResNet whose depth is a latent variable (model, networks, decision
  rules, report, plots).
"""

from pyro_bdl.models import adaptive_depth, blr, bnn, coin, gp, gp_classifier, last_layer, sparse_vd, ss_vae, vae  # noqa: F401

__all__ = ["adaptive_depth", "blr", "bnn", "coin", "gp", "gp_classifier", "last_layer", "sparse_vd", "ss_vae", "vae"]
