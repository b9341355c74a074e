"""What the posterior is for, built on :func:`~pyro_bdl.fit.fit`.

* ``active_learning``: fit, ask the posterior which unlabelled rows are worth a label, label them, fit again.
* ``evidence``: choosing between models by their evidence, the log marginal likelihood.
* ``sbc``: simulation-based calibration: does a method return the right posteriors for a model;
  ``sbc_result``: an SBC run's ranks, their checks, a verdict and the plot.
* ``compare``: which inference method for my model: several methods against a reference posterior;
  ``comparison``: the result of a comparison, as tables, a figure and a report folder.
* ``uci_bench``: ``pyro-bdl bench uci``, the UCI regression table, resumable and parallel;
  ``uci_published``: the published numbers beside it; ``uci_report``: its report (``uci.md``, ``uci.csv``,
  ``uci.png``).
"""
