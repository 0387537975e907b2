"""What worker processes may import, one folder per stage: ``db`` (read-only database access, the
vector BLOB format), ``chunking`` (the pure chunking of Markdown and transcripts), ``retrieval``
(FTS5 and vector search), ``ranking`` and ``search`` (one search on one snapshot, the one hit type).
Nothing here imports the writer, the embedding providers or the config loader."""
