"""The zoo. Importing this package registers every model with :mod:`pyro_bdl.registry`."""

from . import adaptive_depth_resnet, blr, bnn, coin, last_layer, sparse_vd, ss_vae, vae  # noqa: F401

__all__ = ["adaptive_depth_resnet", "blr", "bnn", "coin", "last_layer", "sparse_vd", "ss_vae", "vae"]
