"""The benchmarks' one home in the package: published protocols the zoo is measured by, and the studies that the
notebooks, ``benchmarks/`` and the tests share.  Nothing here is used by :func:`~pyro_bdl.fit.fit`; the CLI's
``pyro-bdl bench`` runs it.  The measurements themselves (scripts and ``RESULTS.md``) are in ``benchmarks/``.

* ``uci``: ``pyro-bdl bench uci``, the UCI regression table (Hernandez-Lobato & Adams 2015), resumable and
  parallel; the protocol names its zoo model and that model's options (``UCI_MODEL``, ``uci_options``).
* ``uci_published``: the published numbers beside it; ``uci_report``: its report (``uci.md``, ``uci.csv``,
  ``uci.png``).
* ``gap``: the in-between uncertainty check on 1-D problems with a gap.
* ``gradient_variance``: score-function against reparameterised ELBO gradients, their variance side by side.
"""
