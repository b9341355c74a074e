"""What the zoo's networks are built of, as :mod:`pyro.nn` is for Pyro: weight priors and the effectful dense layer
(:mod:`~pyro_bdl.nn.layers`), the log-uniform prior of sparse variational dropout (:mod:`~pyro_bdl.nn.log_uniform`),
image encoders, decoders and classifiers (:mod:`~pyro_bdl.nn.image_networks`), fixed feature maps
(:mod:`~pyro_bdl.nn.feature_maps`), and what Gaussian processes are built of: covariance functions
(:mod:`~pyro_bdl.nn.kernels`), their hyperparameters' priors (:mod:`~pyro_bdl.nn.gp_hyperparameters`), the exact
GP's linear algebra (:mod:`~pyro_bdl.nn.gaussian_process`) and the sparse GP's, inducing points and the collapsed and
uncollapsed bounds (:mod:`~pyro_bdl.nn.sparse_gp`)."""
