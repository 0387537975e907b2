"""The owner's side of a search: ``engine`` (validation, identity check, query embedding, the
request, the worker or in-process run, the one :class:`~memory_core.search.types.SearchResults`)
and ``types``. Retrieval and ranking themselves run in ``host_facades/search/run.py``; each
surface's rendering is in ``memory_core/surfaces/``."""
