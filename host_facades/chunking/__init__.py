"""Chunking, the pure first stage of indexing: Markdown and annotation carriers (``pipeline``) and
session transcript flattening (``transcripts``)."""
