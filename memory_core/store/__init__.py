"""SQLite storage: schema and migrations, the single writer, atomic reindex."""
