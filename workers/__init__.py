"""The process worker pool: the owner side and the worker side.

Owner side: :mod:`workers.pool` (the API) with :mod:`workers.scheduler`, :mod:`workers.waiting`,
:mod:`workers.dispatcher`, :mod:`workers.slot`, :mod:`workers.futures`, :mod:`workers.inline`, and
the adapters :mod:`workers.retriever` and :mod:`workers.shared`. Worker side: :mod:`workers.runtime`
(the process's loop) and :mod:`workers.tasks`; :mod:`workers.frames` and :mod:`workers.launch`
are used by both. Worker processes import only the worker side and ``host_facades``; this
package's ``__init__`` imports nothing so a worker never pulls in owner-side modules.
"""
