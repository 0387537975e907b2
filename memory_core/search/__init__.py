"""Search: lexical + vector retrieval, hybrid merge and ranking (spec §4-6)."""
