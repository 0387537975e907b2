"""Chunking v6 and the preparation pipeline (spec §2, §11.2 cases 14-15)."""

from __future__ import annotations

import hashlib
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from host_facades.chunking.pipeline import (
    CHUNKING_VERSION,
    INVALID_PROJECT_ANNOTATION_KEY,
    ChunkSpec,
    PreparedChunk,
    chunk_id,
    chunk_markdown,
    classify_memory_path,
    estimate_string_chars,
    extract_recall_metadata,
    hash_text,
    prepare_chunks,
    remap_chunk_lines,
    split_text_to_utf8_byte_limit,
    strip_annotation_carriers,
)

CJK_RE = re.compile("[\u4e00-\u9fff]")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prep(content: str, path: str = "memory/notes.md", source: str = "memory", **kw) -> list[PreparedChunk]:
    args = dict(tokens=400, overlap=80, mtime_ms=1_700_000_000_123.9, max_input_bytes=0)
    args.update(kw)
    return prepare_chunks(source=source, path=path, content=content, **args)


# --- units -------------------------------------------------------------------------------------


def test_version_and_hash():
    assert CHUNKING_VERSION == 6
    assert hash_text("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    # A lone surrogate hashes as U+FFFD, like Node's UTF-8 encoder.
    assert hash_text("a\ud800") == hash_text("a\ufffd")


def test_estimate_string_chars_weights():
    assert estimate_string_chars("") == 0
    assert estimate_string_chars("hello") == 5
    assert estimate_string_chars("你好") == 8
    assert estimate_string_chars("한국") == 8  # Hangul syllables
    assert estimate_string_chars("ＡＢ") == 8  # fullwidth forms
    assert estimate_string_chars("\U00020000") == 4  # CJK extension B: one code point, weight 4
    assert estimate_string_chars("😀") == 2  # other astral: UTF-16 length, as upstream
    assert estimate_string_chars("é") == 1
    assert estimate_string_chars("a你😀\U00020000") == 11


def test_chunk_id_formula():
    expected = sha("memory:memory/a.md:1:3:abc:fts-only")
    assert chunk_id("memory", "memory/a.md", 1, 3, "abc", "fts-only") == expected


# --- §11.2 case 14 -----------------------------------------------------------------------------


def test_case14_long_ascii_line_splits_at_max_chars():
    chunks = chunk_markdown("a" * (1600 * 3 + 25), 400, 0)
    assert [len(c.text) for c in chunks] == [1600, 1600, 1600, 25]
    assert all((c.start_line, c.end_line) == (1, 1) for c in chunks)


def test_case14_cjk_lines_produce_more_chunks():
    cjk = chunk_markdown("\n".join(["你" * 20] * 20), 50, 0)
    ascii_ = chunk_markdown("\n".join(["a" * 20] * 20), 50, 0)
    assert (len(cjk), len(ascii_)) == (10, 3)


def test_case14_long_cjk_line():
    chunks = chunk_markdown("中" * 2000, 200, 0)
    assert len(chunks) == 10
    assert [len(CJK_RE.findall(c.text)) for c in chunks] == [200] * 10


def test_case14_long_latin_line_not_over_split():
    chunks = chunk_markdown("a" * 2000, 200, 0)
    assert [len(c.text) for c in chunks] == [800, 800, 400]


def test_case14_surrogate_pairs_never_broken():
    chunks = chunk_markdown("\U00020000" * 120, 31, 0)
    assert [len(c.text) for c in chunks] == [31, 31, 31, 27]
    for c in chunks:
        assert "\ufffd" not in c.text
        assert not re.search("[\ud800-\udfff]", c.text)
        c.text.encode("utf-8")  # would raise on a lone surrogate


def test_chinese_text_respects_budget():
    content = "\n".join(["这是一个测试句子用来验证分块逻辑是否正确处理中文文本内容"] * 50)
    chunks = chunk_markdown(content, 100, 0)
    assert len(chunks) == 17  # 28 CJK chars = 113 weighted per line, 3 lines per 400
    assert max(len(CJK_RE.findall(c.text)) for c in chunks) <= 200


def test_overlap_carries_trailing_lines():
    content = "\n".join(f"line {i:02d} " + "x" * 30 for i in range(1, 11))  # 10 lines of 38 chars
    chunks = chunk_markdown(content, 32, 20)  # maxChars 128, overlapChars 80
    # Each flush carries two 39-char lines (78 of the 80-char window); a third does not fit.
    assert [(c.start_line, c.end_line) for c in chunks] == [(i, i + 2) for i in range(1, 9)]
    assert chunks[1].text.split("\n") == [f"line {i:02d} " + "x" * 30 for i in (2, 3, 4)]


def test_overlap_keeps_tail_of_a_wide_line():
    # window = min(80, 128 - 41) = 80; the 100-char line is wider, so its last 79 chars are kept.
    content = "a" * 60 + "b" * 40 + "\n" + "c" * 40
    chunks = chunk_markdown(content, 32, 20)  # maxChars 128, overlapChars 80
    assert [(c.start_line, c.end_line, c.text) for c in chunks] == [
        (1, 1, "a" * 60 + "b" * 40),
        (1, 2, "a" * 39 + "b" * 40 + "\n" + "c" * 40),
    ]


def test_whitespace_lines_are_kept_in_chunk_text():
    chunks = chunk_markdown("# T\n\nbody\n", 400, 80)
    assert chunks == [ChunkSpec(1, 4, "# T\n\nbody\n", sha("# T\n\nbody\n"))]


# --- §11.2 case 15 -----------------------------------------------------------------------------


def test_case15_remap_single_chunk():
    content = "User: Hello\nAssistant: Hi\nUser: Question\nAssistant: Answer\nUser: Thanks"
    chunks = chunk_markdown(content, 400, 0)
    assert chunks[0].start_line == 1
    remapped = remap_chunk_lines(chunks, [4, 6, 7, 10, 13])
    assert (remapped[0].start_line, remapped[-1].end_line) == (4, 13)


def test_case15_remap_multi_chunk():
    line_map = [2, 5, 8, 11, 14, 17, 20, 23, 26, 29]
    content = "\n".join(f"User: Message {i}" if i % 2 == 0 else f"Assistant: Reply {i}" for i in range(10))
    chunks = chunk_markdown(content, 10, 0)
    remapped = remap_chunk_lines(chunks, line_map)
    assert [(c.start_line, c.end_line) for c in remapped] == [
        (2, 5), (8, 11), (14, 17), (20, 23), (26, 29),
    ]


def test_remap_without_map_keeps_lines():
    chunks = chunk_markdown("Line one\nLine two\nLine three", 400, 0)
    assert remap_chunk_lines(chunks, None) == chunks


def test_sessions_prepare_remaps_to_jsonl_lines():
    content = "User: Hello\nAssistant: Hi"
    out = prep(content, path="sessions/a.jsonl", source="sessions", line_map=[3, 7])
    assert [(c.start_line, c.end_line, c.origin_class, c.importance) for c in out] == [(3, 7, "untrusted", None)]


# --- per-entry mode and annotations ------------------------------------------------------------

MEMORY_MD = """# Memory

- Prefers dark mode <!-- importance: 8 -->
  <!-- trigger: theme, ui; colors -->
- Works on openclaw <!-- project: GitHub.com/openclaw/openclaw -->
- Bad project <!-- project: a<b -->
## Tools
- uses vim <!-- importance: 11 -->"""


def test_strip_annotation_carriers_keeps_lines_and_trims():
    assert strip_annotation_carriers(MEMORY_MD).split("\n") == [
        "# Memory",
        "",
        "- Prefers dark mode",
        "",
        "- Works on openclaw",
        "- Bad project",
        "## Tools",
        "- uses vim",
    ]
    # A carrier whose body crosses a newline is not a carrier.
    assert strip_annotation_carriers("a <!-- trigger: x\n--> b") == "a <!-- trigger: x\n--> b"
    assert strip_annotation_carriers("x <!-- IMPORTANCE : 3 -->") == "x"


def test_per_entry_chunks_carry_recall_metadata():
    out = prep(MEMORY_MD, path="MEMORY.md")
    rows = [(c.start_line, c.end_line, c.text, c.importance, c.triggers, c.project_key) for c in out]
    assert rows == [
        (1, 4, "# Memory\n\n- Prefers dark mode\n", 8, ("theme", "ui", "colors"), None),
        (5, 5, "- Works on openclaw", None, (), "github.com/openclaw/openclaw"),
        (6, 6, "- Bad project", None, (), INVALID_PROJECT_ANNOTATION_KEY),
        (7, 8, "## Tools\n- uses vim", None, (), None),  # importance 11 is out of range
    ]
    assert {(c.origin_class, c.session_kind, c.observed_at) for c in out} == {("agent", "unknown", 1_700_000_000_123)}
    assert out[0].hash == sha("# Memory\n\n- Prefers dark mode\n")


def test_user_md_gets_no_project_key_and_non_curated_files_no_triggers():
    text = "- likes tea <!-- project: acme/app --> <!-- trigger: tea -->"
    (user,) = prep(text, path="USER.md")
    assert (user.project_key, user.triggers) == (None, ("tea",))
    (note,) = prep(text, path="memory/2026-01-01.md")
    assert (note.project_key, note.triggers, note.importance) == ("acme/app", (), None)


def test_extract_recall_metadata_rules():
    meta = extract_recall_metadata(
        ["- x <!-- importance: 3 --> <!-- importance: 7 -->", "<!-- project: path:Foo; Org/Repo -->"],
        curated_root=True,
        project_scope_eligible=True,
    )
    assert (meta.importance, meta.triggers, meta.project_key) == (7, (), "path:Foo; org/Repo")
    empty_key = extract_recall_metadata(["<!-- project: ; -->"], curated_root=True, project_scope_eligible=True)
    assert empty_key.project_key == INVALID_PROJECT_ANNOTATION_KEY


def test_entry_fragments_inherit_the_entry_span():
    entry = "- " + " ".join(f"word{i}" for i in range(60)) + "\n  <!-- importance: 9 -->"
    out = prep(entry, path="MEMORY.md", tokens=32, overlap=0)
    assert len(out) == 4
    assert {c.importance for c in out} == {9}
    assert [(c.start_line, c.end_line) for c in out] == [(1, 1), (1, 1), (1, 1), (1, 2)]


# --- heading merge and whitespace --------------------------------------------------------------


def test_heading_only_chunk_merges_into_next():
    # Raw chunks: (1,1) "# Title", (2,2) the long line, (2,3) its 319-char tail + "end".
    content = "# Title\n" + "x" * 1600 + "\nend"
    out = prep(content)
    assert [(c.start_line, c.end_line, c.text) for c in out] == [
        (1, 2, "# Title\n" + "x" * 1600),
        (2, 3, "x" * 319 + "\nend"),
    ]


def test_annotated_heading_is_not_merged():
    content = "# Title <!-- importance: 5 -->\n" + "x" * 1600
    out = prep(content, path="MEMORY.md")
    assert [(c.start_line, c.end_line, c.text[:8], c.importance) for c in out] == [
        (1, 1, "# Title", 5),
        (2, 2, "x" * 8, None),
    ]


def test_whitespace_only_chunks_dropped():
    content = "x" * 1600 + "\n" + " " * 10 + "\n\n"
    out = prep(content, overlap=0)
    assert [(c.start_line, c.end_line) for c in out] == [(1, 1)]


# --- input limit split -------------------------------------------------------------------------


def test_split_text_to_utf8_byte_limit_never_splits_code_points():
    assert split_text_to_utf8_byte_limit("abcdef", 4) == ["abcd", "ef"]
    assert split_text_to_utf8_byte_limit("ééé", 3) == ["é", "é", "é"]
    assert split_text_to_utf8_byte_limit("a😀b", 4) == ["a", "😀", "b"]
    assert split_text_to_utf8_byte_limit("abc", 0) == ["abc"]


def test_input_limit_split_keeps_lines_and_rehashes():
    content = "- " + "é" * 1000  # 2002 UTF-8 bytes, 1002 weighted chars: one chunk
    out = prep(content, path="MEMORY.md", max_input_bytes=1000)
    assert [len(c.text.encode()) for c in out] == [1000, 1000, 2]
    assert {(c.start_line, c.end_line) for c in out} == {(1, 1)}
    assert [c.hash for c in out] == [sha(c.text) for c in out]
    assert "".join(c.text for c in out) == content


# --- provenance --------------------------------------------------------------------------------


def test_path_classification():
    assert classify_memory_path("MEMORY.md") == (True, "agent")
    assert classify_memory_path("memory/2026-01-01.md") == (False, "agent")
    assert classify_memory_path("memory/dreaming/x.md") == (False, "system")
    assert classify_memory_path("DREAMS.md") == (False, "system")
    assert classify_memory_path("../notes/x.md") == (False, "untrusted")
    assert classify_memory_path("notes/x.md") == (False, "untrusted")
    assert classify_memory_path("MEMORY.md", "sessions") == (False, "untrusted")


# --- properties --------------------------------------------------------------------------------

_text = st.lists(
    st.text(alphabet=st.sampled_from(list("ab #-\t") + ["中", "😀", "\U00020000", "é"]), max_size=120),
    max_size=25,
).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(_text, st.integers(min_value=1, max_value=60), st.integers(min_value=0, max_value=40))
def test_chunks_cover_every_nonempty_line_in_order(content, tokens, overlap):
    chunks = chunk_markdown(content, tokens, overlap)
    lines = content.split("\n")
    covered: set[int] = set()
    last_start = 0
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert c.start_line >= last_start
        last_start = c.start_line
        assert not re.search("[\ud800-\udfff]", c.text)
        assert c.hash == hash_text(c.text)
        covered.update(range(c.start_line, c.end_line + 1))
    assert {i + 1 for i, line in enumerate(lines) if line} <= covered
    # With no overlap, the chunks hold every segment exactly once, in order. A chunk joins its
    # segments with "\n" even when two segments come from the same long line (spec §2 step 5),
    # so the texts match the content once the newlines are taken out of both.
    if overlap == 0:
        assert "".join(c.text.replace("\n", "") for c in chunks) == content.replace("\n", "")


def test_segments_of_one_long_line_are_joined_with_newline_inside_a_chunk():
    # 33 UTF-16 units > maxChars 32: the first slice (31 units) weighs 34, so it is re-split into
    # "a"*20 + "中" + 4 emoji (32) and "😀" (2); the last "😀" is the next slice. The two one-emoji
    # segments of line 1 share the second chunk, joined with "\n" as upstream does.
    chunks = chunk_markdown("aaaaaaaaaaaaaaaaaaaa中😀😀😀😀😀😀", 1, 0)
    assert [(c.text, c.start_line, c.end_line) for c in chunks] == [
        ("aaaaaaaaaaaaaaaaaaaa中😀😀😀😀", 1, 1),
        ("😀\n😀", 1, 1),
    ]


@settings(max_examples=100, deadline=None)
@given(_text, st.booleans())
def test_prepare_never_raises_and_spans_are_ordered(content, curated):
    out = prep(content, path="MEMORY.md" if curated else "memory/x.md", tokens=20, overlap=5, max_input_bytes=64)
    for c in out:
        assert c.start_line <= c.end_line
        assert c.text  # byte-split pieces may be whitespace (as upstream), never empty
        assert len(c.text.encode()) <= 64


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(["a", "中", "\U00020000", "😀", "\U0002fa20", "é", "ｱ"]), min_size=1, max_size=600),
    st.integers(min_value=32, max_value=400),
)
def test_vectorised_cjk_resplit_matches_the_greedy_loop(text, budget):
    from host_facades.chunking.pipeline import _greedy_pieces, _greedy_pieces_reference

    assert _greedy_pieces(text, budget) == _greedy_pieces_reference(text, budget)
