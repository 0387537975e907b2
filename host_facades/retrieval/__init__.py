"""Retrieval, the first stage of a search: the FTS5 keyword search and its query planning
(``fts_query``, ``fts_search``, ``keywords``) and the vector search over a generation's vectors
(``vector_search``, ``vector_state``, ``vector_cache``)."""
