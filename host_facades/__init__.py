"""What worker processes may import: read-only database access, vector primitives and the pure
chunking/hashing functions. Nothing here imports the writer, the embedding providers or the
config loader."""
