"""Studies shared by notebooks, benchmarks and tests (never by ``fit`` or the CLI): the in-between
uncertainty check on gap problems (:mod:`~pyro_bdl.studies.gap`), the variance of ELBO gradient estimators
(:mod:`~pyro_bdl.studies.gradient_variance`)."""
