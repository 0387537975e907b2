"""Loading sqlite-vec into an apsw connection (upstream `host/sqlite-vec.ts`). Pure: no writer, no config."""

from __future__ import annotations

import apsw


def load_sqlite_vec(conn: apsw.Connection, extension_path: str | None = None) -> tuple[bool, str | None, str | None]:
    """Try to load sqlite-vec; returns ``(available, version, error)``. Never raises."""
    try:
        if extension_path is None:
            import sqlite_vec

            extension_path = sqlite_vec.loadable_path()
        conn.enable_load_extension(True)
        conn.load_extension(extension_path)
        conn.enable_load_extension(False)
        version = conn.execute("SELECT vec_version()").fetchone()[0]
        if not version:
            return False, None, "vec_version() returned nothing"
        return True, str(version), None
    except Exception as exc:  # noqa: BLE001 - any load failure means "vector store unavailable"
        return False, None, f"sqlite-vec could not be loaded: {exc}"
