"""What a fit's draws answer: the posterior predictive and pointwise log-likelihood
(:mod:`~pyro_bdl.posterior.predictive`), uncertainty and calibration (:mod:`~pyro_bdl.posterior.uncertainty`),
convergence diagnostics and comparisons (:mod:`~pyro_bdl.posterior.diagnostics`), the one conversion to ArviZ
InferenceData (:mod:`~pyro_bdl.posterior.inference_data`), the figures of a fit (:mod:`~pyro_bdl.posterior.plots`),
held-out evaluation (:mod:`~pyro_bdl.posterior.evaluation`) and the amortised models' reports
(:mod:`~pyro_bdl.posterior.amortised`).  ArviZ and matplotlib load when they are used, not with the package."""
