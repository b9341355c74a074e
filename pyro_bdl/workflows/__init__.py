"""What the posterior is for, built on :func:`~pyro_bdl.fit.fit`: choosing which rows to label next
(:mod:`~pyro_bdl.workflows.active_learning`), choosing between models by their evidence
(:mod:`~pyro_bdl.workflows.evidence`), and checking that an inference method's posteriors are calibrated
(simulation-based calibration, :mod:`~pyro_bdl.workflows.sbc`)."""
