"""A Bayesian last layer on a fixed feature map (``last-layer``): the model (:mod:`~pyro_bdl.models.last_layer.model`)
and the training of a feature map from a MAP network (:mod:`~pyro_bdl.models.last_layer.feature_training`)."""

from pyro_bdl.models.last_layer import model  # noqa: F401  (registers the model)
