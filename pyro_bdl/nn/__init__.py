"""What the zoo's networks are built of, as :mod:`pyro.nn` is for Pyro: weight priors and the effectful dense layer
(:mod:`~pyro_bdl.nn.layers`), the log-uniform prior of sparse variational dropout (:mod:`~pyro_bdl.nn.log_uniform`),
image encoders, decoders and classifiers (:mod:`~pyro_bdl.nn.image_networks`) and fixed feature maps
(:mod:`~pyro_bdl.nn.feature_maps`)."""
