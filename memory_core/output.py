"""Rendering shared by every CLI output: names on one line in text, one key style in JSON.

Text: a file name may hold a newline, an escape sequence or (when it is not UTF-8) lone surrogates; printed
as is it would break the line-oriented output of ``search``/``get``/``status``/``files`` or drive
the terminal. :func:`escape_control` is what every text renderer calls on a name before printing it.

JSON: every ``--json`` output (commands and benchmarks) uses camelCase keys, like the gateway and
upstream; :func:`camel_keys` converts a result once, at the edge, so library dicts keep their keys.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 and C1 controls, DEL, the Unicode line/paragraph separators, and lone surrogates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """``text`` with every control character, line separator and undecodable byte written as a
    backslash escape (``\\n``, ``\\x1b``, ``\\xff``), so it prints on one line and changes no
    terminal state; other text, including non-ASCII letters, is unchanged."""
    return _UNSAFE.sub(_escape, text)


_SNAKE_KEY = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(data: object) -> object:
    """``data`` with every snake_case identifier key (``db_path``, ``p50_ms``) of its mappings
    renamed to camelCase (``dbPath``, ``p50Ms``), recursively; keys that are data rather than
    field names (paths such as ``sessions/a_b.jsonl``, source names) do not look like snake_case
    identifiers and are kept."""
    if isinstance(data, dict):
        return {(_camel(k) if isinstance(k, str) and _SNAKE_KEY.fullmatch(k) else k): camel_keys(v)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [camel_keys(v) for v in data]
    return data
