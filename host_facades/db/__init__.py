"""Read-only database access: read connections and snapshots (``sqlite_read``), loading sqlite-vec
(``sqlite_ext``), the one chunk-row reader (``chunk_rows``) and the vector BLOB format (``vectors``)."""
