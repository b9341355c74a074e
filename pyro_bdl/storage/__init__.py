"""Files: written whole or not at all (:mod:`~pyro_bdl.storage.files`), checkpoints of long fits
(:mod:`~pyro_bdl.storage.checkpoint`), the run log a long workflow keeps its finished work in and resumes from
(:mod:`~pyro_bdl.storage.run_log`), output paths checked before any work and the files of a fit directory
(:mod:`~pyro_bdl.storage.paths`), and signals handled while a long run's block runs
(:mod:`~pyro_bdl.storage.interrupts`).  Writing and reading a whole fit directory is :mod:`pyro_bdl.store`."""
