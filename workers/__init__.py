"""The process worker pool (owner side: :mod:`workers.pool`) and its tasks (:mod:`workers.tasks`).

Worker processes import only :mod:`workers.runtime`, :mod:`workers.tasks` and ``host_facades``;
this package's ``__init__`` imports nothing so a worker never pulls in owner-side modules.
"""
