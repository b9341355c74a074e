"""Data in: tables and their checks (:mod:`~pyro_bdl.data.table`, :mod:`~pyro_bdl.data.checks`), what a model
predicts (:mod:`~pyro_bdl.data.task`), the embedded and generated sets (:mod:`~pyro_bdl.data.embedded`,
:mod:`~pyro_bdl.data.gap`), the UCI and image loaders (:mod:`~pyro_bdl.data.uci`, :mod:`~pyro_bdl.data.images`) and
the standardising transform (:mod:`~pyro_bdl.data.transforms`), a user's data bound to a Pyro program's
arguments (:mod:`~pyro_bdl.data.arguments`), and a contextual bandit's reward table (:mod:`~pyro_bdl.data.bandit`)
with the mushroom bandit read into one (:mod:`~pyro_bdl.data.mushroom`) and either read from a file
(:mod:`~pyro_bdl.data.reward_files`).

The lowest layer of the package: it imports nothing else of it.  ``pyro_bdl.load``, ``pyro_bdl.load_csv``,
``pyro_bdl.Dataset`` and ``pyro_bdl.DataError`` are its faces.
"""
