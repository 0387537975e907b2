"""The vector format: the one canonical BLOB encoding and unit-length rows.

Canonical vectors are little-endian IEEE-754 float32 BLOBs, 4 bytes per dimension (docs/decisions.md D5).
A BLOB whose length is not a multiple of 4 is invalid and decodes to an empty vector. Stored and
query vectors are L2-normalised with :func:`normalize_rows` (embedding providers and workers alike).
"""

from __future__ import annotations

import numpy as np

VECTOR_DTYPE = np.dtype("<f4")


def encode_vector(vector: "np.ndarray | list[float]") -> bytes:
    """Encode a vector as little-endian float32 bytes (never native byte order)."""
    if type(vector) is np.ndarray and vector.dtype is VECTOR_DTYPE and vector.ndim == 1:
        return vector.tobytes()  # already in the format (every pooled vector search's query vector)
    return np.asarray(vector, dtype=VECTOR_DTYPE).reshape(-1).tobytes()


def decode_vector(blob: bytes | None) -> np.ndarray:
    """Decode a canonical BLOB; an invalid length (not a multiple of 4) or None gives an empty vector."""
    if not blob or len(blob) % 4 != 0:
        return np.zeros(0, dtype=np.float32)
    return np.frombuffer(blob, dtype=VECTOR_DTYPE).astype(np.float32)


def encode_int8(vector: "np.ndarray | list[float]") -> tuple[bytes, float]:
    """A compact vector: ``(codes, scale)``, one signed byte per dimension with ``value ~ code x
    scale`` (``scale = max|value| / 127``; the passage vectors' storage, 4x smaller than float32)."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    peak = float(np.max(np.abs(v))) if v.size else 0.0
    scale = peak / 127.0 if peak > 0 else 1.0
    return np.clip(np.rint(v / scale), -127, 127).astype(np.int8).tobytes(), scale


def decode_int8(codes: bytes, scale: float) -> np.ndarray:
    """The float32 vector of :func:`encode_int8`'s ``(codes, scale)``."""
    return np.frombuffer(codes, dtype=np.int8).astype(np.float32) * np.float32(scale)


def decode_int8_rows(codes: bytes, scales: "np.ndarray | list[float]") -> np.ndarray:
    """The float32 rows of several :func:`encode_int8` results at once: ``codes`` is their codes
    joined, one row per scale. Each row is bit-identical to :func:`decode_int8` of its own codes."""
    scale32 = np.asarray(scales, dtype=np.float64).astype(np.float32)
    rows = np.frombuffer(codes, dtype=np.int8).reshape(len(scale32), -1)
    return rows.astype(np.float32) * scale32[:, None]


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows (or one vector) scaled to unit length as float32; all-zero rows stay zero."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim == 1:
        n = float(np.linalg.norm(m))
        return m / n if n > 0 else m
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms
