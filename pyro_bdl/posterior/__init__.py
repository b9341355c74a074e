"""What a fit's draws answer.  ArviZ and matplotlib load when they are used, not with the package.

* ``predictive``: the posterior predictive and pointwise log-likelihood, one pass over the draws.
* ``uncertainty``: predictive uncertainty, its summaries and scores (calibration) for regression and classification.
* ``inference_data``: the one conversion of a fit to ArviZ InferenceData.
* ``diagnostics``: comparisons across fits: posterior moments side by side and PSIS-LOO.
* ``evaluation``: the numbers a fit is judged by on held-out rows, one way for every caller.
* ``plots``: the figures ``pyro-bdl fit`` writes: trace or loss, and the marginals.
* ``amortised``: what a model with an amortised guide answers: ELBO and log p(x) per row, codes, reconstructions.
* ``acquisition``: acquisition functions: what a label at each unlabelled row is worth.
* ``prior_check``: does the posterior sit where the prior allows, or at the prior's edge.
* ``rank_uniformity``: are ranks uniform: the statistics of simulation-based calibration.
"""
