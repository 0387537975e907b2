"""Pure chunking and hashing for the indexing pipeline (upstream `host/markdown-chunks.ts`); safe to run in
workers.

Mirrors upstream ``markdown-chunks.ts`` (chunking v6), ``cjk-chars.ts`` (weighted sizes),
``memory-annotations`` (annotation carriers), ``embedding-input-limits.ts`` (byte split) and
``manager-index-preparation.ts`` (the whole preparation step). Python strings are sequences of
code points; where upstream measures UTF-16 units this module converts explicitly.

Deliberate, documented differences from upstream:
- Memory files outside the workspace (absolute ``path``) classify as ``untrusted`` and not curated,
  exactly like upstream; recorded artifact provenance (``readMemoryArtifactProvenance``) is not
  reproduced, so workspace memory Markdown gets upstream's fallback class ``"agent"``.
- Pieces produced by the input-limit split keep the entry span and provenance of the chunk they
  came from (upstream drops both, which loses the entry's annotations for oversized entries).
- A single code point wider than ``max_input_bytes`` becomes its own piece (upstream stops).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np

CHUNKING_VERSION = 6
CHARS_PER_TOKEN_ESTIMATE = 4
INVALID_PROJECT_ANNOTATION_KEY = "!invalid-project-annotation"

__all__ = [
    "CHUNKING_VERSION",
    "CHARS_PER_TOKEN_ESTIMATE",
    "INVALID_PROJECT_ANNOTATION_KEY",
    "ChunkSpec",
    "PreparedChunk",
    "RecallMetadata",
    "hash_text",
    "estimate_string_chars",
    "chunk_markdown",
    "split_curated_entries",
    "remap_chunk_lines",
    "chunk_id",
    "classify_memory_path",
    "strip_annotation_carriers",
    "extract_recall_metadata",
    "split_text_to_utf8_byte_limit",
    "prepare_chunks",
    "PASSAGE_MIN_CHARS",
    "split_passages",
]

# JavaScript's whitespace set (String.prototype.trim and regex \s), which differs from str.isspace.
_JS_WS = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_S = "[\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]"

_NON_LATIN_RE = re.compile(
    "[\u2e80-\u9fff\ua000-\ua4ff\uac00-\ud7af\uf900-\ufaff\uff01-\uff60\uffe0-\uffe6"
    "\U00020000-\U0002fa1f]+"
)
_ASTRAL_RE = re.compile("[\U00010000-\U0010ffff]+")
# Upstream subtracts one unit for every surrogate pair with a high surrogate D840-D87E
# (U+20000-U+2FBFF), but only when the text has at least one non-Latin character.
_CJK_SURROGATE_RE = re.compile("[\U00020000-\U0002fbff]+")
_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def hash_text(text: str) -> str:
    """sha256 hex of the UTF-8 bytes; lone surrogates count as U+FFFD, as in Node."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = _LONE_SURROGATE_RE.sub("\ufffd", text).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE_RE.sub("\ufffd", text).encode("utf-8")


def estimate_string_chars(text: str) -> int:
    """Weighted length (upstream `host/markdown-chunks.ts`): UTF-16 length, CJK / fullwidth characters count
    4 each."""
    if text.isascii():
        return len(text)
    n = len(text)
    astral = n - len(_ASTRAL_RE.sub("", text))
    non_latin = n - len(_NON_LATIN_RE.sub("", text))
    if non_latin == 0:
        return n + astral
    cjk_pairs = n - len(_CJK_SURROGATE_RE.sub("", text)) if astral else 0
    return len(text) + astral - cjk_pairs + non_latin * (CHARS_PER_TOKEN_ESTIMATE - 1)


def _char_weight(ch: str) -> int:
    o = ord(ch)
    if o < 0x2E80:
        return 1
    if (
        o <= 0x9FFF
        or 0xA000 <= o <= 0xA4FF
        or 0xAC00 <= o <= 0xD7AF
        or 0xF900 <= o <= 0xFAFF
        or 0xFF01 <= o <= 0xFF60
        or 0xFFE0 <= o <= 0xFFE6
        or 0x20000 <= o <= 0x2FA1F
    ):
        return 4
    return 2 if o > 0xFFFF else 1


def _char_weights(text: str) -> np.ndarray:
    """Per-code-point weights (as ``estimate_string_chars`` of each single character)."""
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    non_latin = (
        ((cp >= 0x2E80) & (cp <= 0x9FFF))
        | ((cp >= 0xA000) & (cp <= 0xA4FF))
        | ((cp >= 0xAC00) & (cp <= 0xD7AF))
        | ((cp >= 0xF900) & (cp <= 0xFAFF))
        | ((cp >= 0xFF01) & (cp <= 0xFF60))
        | ((cp >= 0xFFE0) & (cp <= 0xFFE6))
        | ((cp >= 0x20000) & (cp <= 0x2FA1F))
    )
    w = np.where(non_latin, 4, np.where(cp > 0xFFFF, 2, 1)).astype(np.int64)
    return w


def _greedy_pieces(text: str, budget: int) -> list[tuple[str, int]]:
    """Maximal pieces whose summed per-code-point weights fit ``budget`` (upstream's greedy loop,
    computed with a cumulative sum); returns ``(piece, weight)`` pairs."""
    cum = np.cumsum(_char_weights(text))
    m = len(text)
    out: list[tuple[str, int]] = []
    start = 0
    base = 0
    while start < m:
        cut = max(start + 1, int(np.searchsorted(cum, base + budget, side="right")))
        total = int(cum[cut - 1])
        out.append((text[start:cut], total - base))
        base = total
        start = cut
    return out


def _greedy_pieces_reference(text: str, budget: int) -> list[tuple[str, int]]:
    """The per-character form of :func:`_greedy_pieces` (kept for tests)."""
    out: list[tuple[str, int]] = []
    start = chars = 0
    for j, ch in enumerate(text):
        w = _char_weight(ch)
        if chars + w > budget:
            out.append((text[start:j], chars))
            start, chars = j, 0
        chars += w
    out.append((text[start:], chars))
    return out


def _take_tail(text: str, budget: int) -> str:
    """Trailing slice of ``text`` within ``budget`` weighted chars, whole code points only."""
    if budget <= 0:
        return ""
    if text.isascii():
        return text[-budget:]
    acc = 0
    start = len(text)
    while start > 0:
        acc += _char_weight(text[start - 1])
        if acc > budget:
            break
        start -= 1
    return text[start:]


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """One chunk of a text: 1-based inclusive line span, text and sha256 of the text."""

    start_line: int
    end_line: int
    text: str
    hash: str
    entry_start_line: int | None = None  # per-entry mode, kind "entry": the whole entry's span
    entry_end_line: int | None = None


def split_curated_entries(lines: Sequence[str]) -> list[tuple[int, int, str]]:
    """Entry spans ``(start_line, end_line, kind)`` of a curated file (upstream `host/markdown-chunks.ts`)."""
    spans: list[tuple[int, int, str]] = []
    start = 1
    kind = "entry" if lines and lines[0].startswith("- ") else "section"
    for index in range(1, len(lines)):
        line = lines[index]
        if line.startswith("- "):
            nxt = "entry"
        elif line.startswith("#") and _HEADING_RE.match(line):
            nxt = "section"
        else:
            continue
        spans.append((start, index, kind))
        start = index + 1
        kind = nxt
    spans.append((start, len(lines), kind))
    return spans


_HEADING_RE = re.compile("#{1,6}(?:" + _JS_S + "|\\Z)")


def _utf16_cut(line: str, start: int, max_units: int) -> int:
    """End index (code points) of the longest slice from ``start`` within ``max_units`` UTF-16 units."""
    units = 0
    i = start
    n = len(line)
    while i < n:
        w = 2 if ord(line[i]) > 0xFFFF else 1
        if units + w > max_units:
            break
        units += w
        i += 1
    return i


def _iter_split(content: str) -> Iterator[str]:
    """``content.split("\n")`` one piece at a time."""
    start = 0
    find = content.find
    while True:
        j = find("\n", start)
        if j < 0:
            yield content[start:]
            return
        yield content[start:j]
        start = j + 1


def _overlap_carry(cur_text: list[str], cur_line: list[int], window: int) -> tuple[list[str], list[int], int]:
    """The trailing segments of a flushed chunk (and their line numbers and weighted size) that open
    the next one: at most ``window`` weighted chars, a segment wider than what is left keeping only
    its trailing slice."""
    if window <= 0 or not cur_text:
        return [], [], 0
    acc = 0
    kept_text: list[str] = []
    kept_line: list[int] = []
    for i in range(len(cur_text) - 1, -1, -1):
        seg = cur_text[i]
        size = estimate_string_chars(seg) + 1
        remaining = window - acc
        if size > remaining:
            # A segment wider than the remaining window keeps only its trailing slice.
            tail = _take_tail(seg, remaining - 1) if not kept_text else ""
            if tail:
                kept_text.append(tail)
                kept_line.append(cur_line[i])
                acc += estimate_string_chars(tail) + 1
            break
        acc += size
        kept_text.append(seg)
        kept_line.append(cur_line[i])
        if acc >= window:
            break
    kept_text.reverse()
    kept_line.reverse()
    return kept_text, kept_line, acc


def chunk_markdown(
    content: str, tokens: int = 400, overlap: int = 80, *, per_entry: bool = False
) -> list[ChunkSpec]:
    """Chunking v6 (upstream `host/markdown-chunks.ts`): line-greedy in weighted chars with overlap carry;
    per-entry optional."""
    # Curated files need the line list (entry spans); everything else streams its lines, so a large
    # transcript is not copied into a list of lines next to its chunks (peak memory).
    lines = content.split("\n") if per_entry else None
    max_chars = max(32, int(tokens) * CHARS_PER_TOKEN_ESTIMATE)
    overlap_chars = max(0, int(overlap) * CHARS_PER_TOKEN_ESTIMATE)
    chunks: list[ChunkSpec] = []
    cur_text: list[str] = []
    cur_line: list[int] = []
    cur_chars = 0
    span: list[int | None] = [None, None]  # entry span attached to chunks of kind "entry"

    def flush() -> None:
        if not cur_text:
            return
        text = "\n".join(cur_text)
        chunks.append(ChunkSpec(cur_line[0], cur_line[-1], text, hash_text(text), span[0], span[1]))

    def append(segment: str, line_no: int, chars: int) -> None:
        nonlocal cur_text, cur_line, cur_chars
        size = chars + 1
        if cur_chars + size > max_chars and cur_text:
            flush()
            # Carry and the incoming segment share one budget, including line separators.
            cur_text, cur_line, cur_chars = _overlap_carry(cur_text, cur_line,
                                                           min(overlap_chars, max(0, max_chars - size)))
        cur_text.append(segment)
        cur_line.append(line_no)
        cur_chars += size

    spans = split_curated_entries(lines) if lines is not None else [(1, content.count("\n") + 1, "section")]
    for entry_start, entry_end, kind in spans:
        if kind == "entry":
            span[0], span[1] = entry_start, entry_end
        else:
            span[0] = span[1] = None
        span_lines = lines[entry_start - 1 : entry_end] if lines is not None else _iter_split(content)
        for line_no, line in enumerate(span_lines, start=entry_start):
            if line.isascii():
                n = len(line)
                if n <= max_chars:
                    # Fast path: inline append() for the common short ASCII line.
                    size = n + 1
                    if cur_chars + size > max_chars and cur_text:
                        append(line, line_no, n)
                    else:
                        cur_text.append(line)
                        cur_line.append(line_no)
                        cur_chars += size
                else:
                    for start in range(0, n, max_chars):
                        seg = line[start : start + max_chars]
                        append(seg, line_no, len(seg))
                continue
            has_astral = _ASTRAL_RE.search(line) is not None
            start = 0
            n = len(line)
            while start < n:
                end = _utf16_cut(line, start, max_chars) if has_astral else min(n, start + max_chars)
                coarse = line[start:end]
                coarse_chars = estimate_string_chars(coarse)
                if coarse_chars > max_chars:
                    # Rare and supplementary ideographs can cost several tokens each.
                    for piece, piece_chars in _greedy_pieces(coarse, max_chars):
                        append(piece, line_no, piece_chars)
                else:
                    append(coarse, line_no, coarse_chars)
                start = end
        flush()
        cur_text, cur_line, cur_chars = [], [], 0
    return chunks


def remap_chunk_lines(chunks: list[ChunkSpec], line_map: Sequence[int] | None) -> list[ChunkSpec]:
    """Map content line numbers to source (JSONL) line numbers; unmapped lines stay as they are."""
    if not line_map:
        return list(chunks)
    n = len(line_map)
    out = []
    for c in chunks:
        start = line_map[c.start_line - 1] if 1 <= c.start_line <= n else c.start_line
        end = line_map[c.end_line - 1] if 1 <= c.end_line <= n else c.end_line
        out.append(replace(c, start_line=start, end_line=end))
    return out


def chunk_id(source: str, path: str, start_line: int, end_line: int, chunk_hash: str, model: str) -> str:
    """Chunk identity (upstream `host/markdown-chunks.ts`): sha256 of ``source:path:start:end:hash:model``."""
    return hash_text(f"{source}:{path}:{start_line}:{end_line}:{chunk_hash}:{model}")


# --- path classification (memory-path-provenance.ts) -------------------------------------------

_USERS_USER_MD_RE = re.compile(r"users/[a-zA-Z0-9][a-zA-Z0-9_-]{0,127}/USER\.md\Z")


def classify_memory_path(path: str, source: str = "memory") -> tuple[bool, str]:
    """``(curated_root, origin_class)`` of a workspace-relative path, as upstream classifies it."""
    if source != "memory":
        return False, "untrusted"
    rel = path.replace("\\", "/")
    if (
        not rel
        or rel in (".", "..")
        or rel.startswith("../")
        or rel.startswith("/")
        or re.match(r"[A-Za-z]:/", rel)
        or "\0" in rel
    ):
        return False, "untrusted"
    segments = rel.split("/")
    curated_root = len(segments) == 1 and segments[0] in ("MEMORY.md", "memory.md", "USER.md")
    if (len(segments) == 1 and segments[0] in ("DREAMS.md", "dreams.md")) or (
        segments[0] == "memory" and len(segments) > 1 and segments[1] in ("dreaming", ".dreams")
    ):
        return curated_root, "system"
    workspace_memory = (
        curated_root
        or _USERS_USER_MD_RE.match(rel) is not None
        or (segments[0] == "memory" and segments[-1].endswith(".md"))
    )
    return curated_root, ("agent" if workspace_memory else "untrusted")


# --- annotations (memory annotation carriers) --------------------------------------------------

_CARRIER_MARKER_RE = re.compile("<!--" + _JS_S + "*(trigger|importance|project)" + _JS_S + "*:", re.I)
_PROJECT_MARKER_RE = re.compile("<!--" + _JS_S + "*(project)" + _JS_S + "*:", re.I)
_LINE_BREAK_RE = re.compile("[\r\n]")
_TRAILING_WS_RE = re.compile("[ \t]+")
_EOL_CHARS = "\r\n\u2028\u2029"
_DIGITS_RE = re.compile(r"[0-9]+\Z")
_TRIGGER_SPLIT_RE = re.compile("[,;]")
_KEY_FORBIDDEN_RE = re.compile("[\r\n<>]")


def _scan_annotations(text: str, marker: re.Pattern[str], line_scoped: bool = False) -> Iterator[tuple[int, int, str, str]]:
    """Yield ``(start, end, kind, value)`` for each ``<!-- kind: value -->`` carrier."""
    closing = -1
    newline = -1
    pos = 0
    while True:
        m = marker.search(text, pos)
        if m is None:
            return
        value_start = m.end()
        if closing < value_start:
            closing = text.find("-->", value_start)
            if closing < 0:
                return
        if line_scoped:
            if newline < value_start:
                nm = _LINE_BREAK_RE.search(text, value_start)
                newline = nm.start() if nm else len(text)
            if newline < closing:
                pos = value_start
                continue
        yield m.start(), closing + 3, m.group(1).lower(), text[value_start:closing].strip(_JS_WS)
        pos = closing + 3


def strip_annotation_carriers(text: str) -> str:
    """Remove single-line annotation carriers, then trailing spaces/tabs of every line (upstream
    `memory/manager-index-preparation.ts`)."""
    if "<!--" not in text:
        return text
    parts: list[str] = []
    cursor = 0
    for start, end, _kind, _value in _scan_annotations(text, _CARRIER_MARKER_RE, True):
        parts.append(text[cursor:start])
        cursor = end
    if cursor == 0:
        return text
    parts.append(text[cursor:])
    joined = "".join(parts)
    n = len(joined)

    def trim(m: re.Match[str]) -> str:
        end = m.end()
        return "" if end == n or joined[end] in _EOL_CHARS else m.group(0)

    return _TRAILING_WS_RE.sub(trim, joined)


def _normalize_project_key(value: str) -> str | None:
    trimmed = value.strip(_JS_WS)
    if not trimmed or _KEY_FORBIDDEN_RE.search(trimmed):
        return None
    if trimmed.startswith("path:"):
        return trimmed
    sep = trimmed.find("/")
    if sep < 1:
        return trimmed
    return trimmed[:sep].lower() + trimmed[sep:]


@dataclass(frozen=True)
class RecallMetadata:
    importance: int | None = None
    triggers: tuple[str, ...] = ()
    project_key: str | None = None


def extract_recall_metadata(
    source_lines: Sequence[str], *, curated_root: bool, project_scope_eligible: bool
) -> RecallMetadata:
    """Importance, triggers and project key of one entry span (``extractCuratedEntryRecallMetadata``)."""
    keys: dict[str, None] = {}
    annotated = False
    valid = True
    if project_scope_eligible:
        text = "\n".join(source_lines)
        if "<!--" in text:
            marker_count = len(_PROJECT_MARKER_RE.findall(text))
            parsed = raw = ok = 0
            for _s, _e, _k, value in _scan_annotations(text, _PROJECT_MARKER_RE):
                parsed += 1
                for raw_key in value.split(";"):
                    raw += 1
                    key = _normalize_project_key(raw_key)
                    if key:
                        keys[key] = None
                        ok += 1
            annotated = marker_count > 0
            valid = not annotated or (parsed == marker_count and raw > 0 and raw == ok)
    phrases: dict[str, None] = {}
    importance: int | None = None
    if curated_root:
        for line in source_lines:
            if "<!--" not in line or not line.rstrip(_JS_WS).endswith("-->"):
                continue
            for _s, _e, kind, value in _scan_annotations(line, _CARRIER_MARKER_RE):
                if kind == "trigger":
                    for phrase in _TRIGGER_SPLIT_RE.split(value):
                        phrase = phrase.strip(_JS_WS)
                        if phrase:
                            phrases[phrase] = None
                elif kind == "importance" and _DIGITS_RE.match(value):
                    parsed_value = int(value)
                    if 1 <= parsed_value <= 10:
                        importance = parsed_value if importance is None else max(importance, parsed_value)
    if annotated and not valid:
        project_key: str | None = INVALID_PROJECT_ANNOTATION_KEY
    elif keys:
        project_key = "; ".join(keys)
    else:
        project_key = None
    return RecallMetadata(importance, tuple(phrases), project_key)


# --- embedding input limit ---------------------------------------------------------------------


def split_text_to_utf8_byte_limit(text: str, max_bytes: int) -> list[str]:
    """Longest prefixes of at most ``max_bytes`` UTF-8 bytes, never splitting a code point."""
    data = _utf8(text)
    if max_bytes <= 0 or len(data) <= max_bytes:
        return [text]
    parts: list[str] = []
    cursor = 0
    n = len(data)
    while cursor < n:
        end = min(n, cursor + max_bytes)
        while end < n and end > cursor and (data[end] & 0xC0) == 0x80:
            end -= 1
        if end <= cursor:  # one code point wider than the limit: take it whole
            end = cursor + 1
            while end < n and (data[end] & 0xC0) == 0x80:
                end += 1
        parts.append(data[cursor:end].decode("utf-8"))
        cursor = end
    return parts


# --- passages: the extra vectors of a long chunk ---------------------------------------------

# A passage closes once it holds this many characters (about 4 tokens): a short heading or a
# one-word bullet goes with the line after it, and every ordinary line is a passage of its own, so
# one relevant line among unrelated ones gets a vector that is not an average with them.
PASSAGE_MIN_CHARS = 16
# A chunk of one or two lines gets no passage vectors: its own vector is already close to each line's
# (they cost a vector each and moved no ranking).
PASSAGE_MIN_LINES = 3


def split_passages(text: str, min_chars: int = PASSAGE_MIN_CHARS, min_lines: int = PASSAGE_MIN_LINES) -> list[str]:
    """The passages of a chunk: its non-blank lines (stripped), consecutive ones joined with ``\n``
    until the passage holds ``min_chars`` characters; a short last group joins the passage before it.
    A chunk with fewer than ``min_lines`` non-blank lines or at most one passage returns ``[]``: its
    chunk vector is its only vector."""
    if sum(1 for line in text.splitlines() if line.strip()) < min_lines:
        return []
    out: list[str] = []
    group: list[str] = []
    size = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        group.append(line)
        size += len(line) + (1 if len(group) > 1 else 0)
        if size >= min_chars:
            out.append("\n".join(group))
            group, size = [], 0
    if group:
        if out:
            out[-1] = "\n".join([out[-1], *group])
        else:
            out.append("\n".join(group))
    return out if len(out) > 1 else []


# --- the preparation step ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreparedChunk:
    """A chunk ready for storage: line span (JSONL lines for sessions), text, metadata, provenance."""

    source: str
    path: str
    start_line: int
    end_line: int
    text: str
    hash: str
    importance: int | None = None
    triggers: tuple[str, ...] = ()
    project_key: str | None = None
    origin_class: str = "untrusted"
    session_kind: str = "unknown"
    observed_at: int | None = None
    supersedes_key: str | None = None


_HEADING_LINE_RE = re.compile(" {0,3}#{1,6}(?:" + _JS_S + "|\\Z)")


def _is_heading_only(chunk: ChunkSpec, source_lines: Sequence[str]) -> bool:
    n = len(source_lines)
    for index, line in enumerate(chunk.text.split("\n")):
        if line.strip(_JS_WS) and not _HEADING_LINE_RE.match(line):
            return False
        if "<!--" in line:
            return False
        k = chunk.start_line + index - 1
        src = source_lines[k] if 0 <= k < n else ""
        if line.rstrip(_JS_WS) != src.rstrip(_JS_WS):
            return False
    return True


def prepare_chunks(
    *,
    source: str,
    path: str,
    content: str,
    tokens: int,
    overlap: int,
    mtime_ms: float,
    max_input_bytes: int,
    line_map: Sequence[int] | None = None,
) -> list[PreparedChunk]:
    """The chunking pipeline for one source file (upstream `host/markdown-chunks.ts`,
    `memory/manager-index-preparation.ts`); ``max_input_bytes <= 0`` disables the split."""
    norm_path = path.replace("\\", "/")
    is_memory = source == "memory"
    per_entry = is_memory and norm_path in ("MEMORY.md", "USER.md")
    indexing = strip_annotation_carriers(content) if is_memory else content
    source_lines = content.replace("\r\n", "\n").split("\n") if is_memory else []
    curated_root, origin_class = classify_memory_path(norm_path, source)

    base: list[ChunkSpec] = []
    for chunk in chunk_markdown(indexing, tokens, overlap, per_entry=per_entry):
        if not chunk.text.strip(_JS_WS):
            continue
        if is_memory and base:
            prev = base[-1]
            if (
                prev.entry_start_line is None
                and chunk.end_line > prev.end_line
                and _is_heading_only(prev, source_lines)
            ):
                following = chunk.text.split("\n")[max(0, prev.end_line - chunk.start_line + 1) :]
                text = "\n".join([prev.text, *following])
                chunk = replace(chunk, text=text, start_line=prev.start_line, hash=hash_text(text))
                base.pop()
        base.append(chunk)

    if max_input_bytes and max_input_bytes > 0:
        limited: list[ChunkSpec] = []
        for chunk in base:
            if len(chunk.text) * 4 <= max_input_bytes or len(_utf8(chunk.text)) <= max_input_bytes:
                limited.append(chunk)
                continue
            for piece in split_text_to_utf8_byte_limit(chunk.text, max_input_bytes):
                limited.append(replace(chunk, text=piece, hash=hash_text(piece)))
        base = limited

    observed_at = max(0, math.floor(mtime_ms)) if math.isfinite(mtime_ms) else 0
    project_eligible = is_memory and norm_path.upper() != "USER.MD"
    cache: dict[tuple[int, int], RecallMetadata] = {}
    empty = RecallMetadata()
    remap = source == "sessions" and bool(line_map)
    n_map = len(line_map) if line_map else 0
    out: list[PreparedChunk] = []
    for chunk in base:
        if is_memory:
            start = chunk.entry_start_line if chunk.entry_start_line is not None else chunk.start_line
            end = chunk.entry_end_line if chunk.entry_end_line is not None else chunk.end_line
            meta = cache.get((start, end))
            if meta is None:
                meta = extract_recall_metadata(
                    source_lines[start - 1 : end],
                    curated_root=curated_root,
                    project_scope_eligible=project_eligible,
                )
                cache[(start, end)] = meta
        else:
            meta = empty
        s, e = chunk.start_line, chunk.end_line
        if remap:
            assert line_map is not None
            s = line_map[s - 1] if 1 <= s <= n_map else s
            e = line_map[e - 1] if 1 <= e <= n_map else e
        out.append(
            PreparedChunk(
                source=source,
                path=path,
                start_line=s,
                end_line=e,
                text=chunk.text,
                hash=chunk.hash,
                importance=meta.importance,
                triggers=meta.triggers,
                project_key=meta.project_key,
                origin_class=origin_class,
                session_kind="unknown",
                observed_at=observed_at,
            )
        )
    return out
