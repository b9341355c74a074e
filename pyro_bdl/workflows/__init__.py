"""What the posterior is for, built on :func:`~pyro_bdl.fit.fit`.

* ``active_learning``: fit, ask the posterior which unlabelled rows are worth a label, label them, fit again.
* ``bandit``: a contextual bandit: act on the posterior (Thompson sampling, greedy, epsilon-greedy), observe the
  reward, refit, count the regret against the oracle.
* ``evidence``: choosing between models by their evidence, the log marginal likelihood.
* ``sbc``: simulation-based calibration: does a method return the right posteriors for a model;
  ``sbc_result``: an SBC run's ranks, their checks, a verdict and the plot.
* ``compare``: which inference method for my model: several methods against a reference posterior;
  ``comparison``: the result of a comparison, as tables, a figure and a report folder.

The benchmarks (``pyro-bdl bench uci`` and the studies the notebooks and ``benchmarks/`` share) live in
:mod:`pyro_bdl.bench`.
"""
