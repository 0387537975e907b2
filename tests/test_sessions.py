"""Session transcript flattening (spec §1.5)."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from host_facades.chunking.transcripts import (
    EMPTY_SESSION_HASH,
    HEARTBEAT_PROMPT,
    flatten_session_lines,
    is_usage_counted_transcript_name,
)


def msg(role, content, **extra):
    return json.dumps({"type": "message", "message": {"role": role, "content": content, **extra.pop("m", {})}, **extra})


NOISY = [
    json.dumps({"type": "session", "id": "s1"}),  # 1
    msg("user", "Hello   there\n\nfriend", timestamp="2026-01-02T03:04:05.678Z"),  # 2
    msg("assistant", [{"type": "text", "text": "Hi!"}, {"type": "image"}, {"type": "text", "text": "How can I help?"}], timestamp=1767323045),  # 3
    msg("user", "System: [2026-01-01 10:00] Cron job ran"),  # 4 system wrapper
    msg("user", "[cron:abc daily] summarize the inbox"),  # 5 cron prompt
    msg("user", HEARTBEAT_PROMPT + " check mail"),  # 6 heartbeat prompt
    msg("assistant", "HEARTBEAT_OK"),  # 7 heartbeat token
    msg("assistant", "NO_REPLY"),  # 8 silent reply
    msg("assistant", '{"action": "NO_REPLY"}'),  # 9 silent reply payload
    msg("toolResult", "tool output"),  # 10 other role
    msg("user", "from another session", m={"provenance": {"kind": "inter_session"}}),  # 11
    msg("user", "System: [x] Exec finished: ls exited 0"),  # 12 (wrapper)
    msg("assistant", "exec completed (abc-1, code 0)"),  # 13 exec completion event
    "{not json",  # 14 malformed
    "",  # 15 blank
    msg("user", "Conversation info (untrusted metadata):\n```json\n{\"chat\": 1}\n```\n\nWhat is up?", timestamp=1767323046000),  # 16
    "[1, 2]",  # 17 valid JSON, not a record
    msg("assistant", "Thanks, noted.\n"),  # 18
]


def test_noise_is_dropped_and_line_numbers_point_at_jsonl():
    flat = flatten_session_lines(NOISY)
    assert flat.content.split("\n") == [
        "User: Hello there friend",
        "Assistant: Hi! How can I help?",
        "User: What is up?",
        "Assistant: Thanks, noted.",
    ]
    assert flat.line_map == (2, 3, 16, 18)
    assert flat.timestamps == (1767323045678, 1767323045000, 1767323046000, 0)
    assert (flat.skipped_lines, flat.messages) == (1, 4)
    expected = hashlib.sha256(
        (flat.content + "\n2,3,16,18\n1767323045678,1767323045000,1767323046000,0").encode()
    ).hexdigest()
    assert flat.hash == expected


def test_long_messages_wrap_at_800_chars_with_same_label():
    text = " ".join(["word"] * 400)  # 1999 chars
    flat = flatten_session_lines(["", msg("user", text)])
    lines = flat.content.split("\n")
    assert [len(x) for x in lines] == [6 + 799, 6 + 799, 6 + 399]
    assert all(x.startswith("User: word") for x in lines)
    assert flat.line_map == (2, 2, 2)


def test_wrap_without_spaces_never_splits_surrogate_pairs():
    flat = flatten_session_lines([msg("assistant", "😀" * 500)])  # 1000 UTF-16 units
    lines = flat.content.split("\n")
    assert [len(x) for x in lines] == [11 + 400, 11 + 100]
    assert flat.line_map == (1, 1)


def test_empty_and_odd_input_never_raises():
    flat = flatten_session_lines([])
    assert (flat.content, flat.line_map, flat.hash) == ("", (), EMPTY_SESSION_HASH)
    odd = ["null", "42", '"s"', '{"type": "message"}', '{"type": "message", "message": "x"}',
           '{"type": "message", "message": {"role": 5}}', '{"type": "message", "message": {"role": "user", "content": [1, null]}}',
           "NaN", '{"a": NaN}', "\ud800", b"\xff\xfe{", "[" * 100000]
    flat = flatten_session_lines(odd)
    assert (flat.content, flat.skipped_lines) == ("", 5)


def test_bytes_lines_and_lone_surrogates():
    lines = [msg("user", "caf\u00e9").encode() + b"\n", b'{"type":"message","message":{"role":"user","content":"x\\ud800y"}}\n']
    flat = flatten_session_lines(lines)
    assert flat.content == "User: caf\u00e9\nUser: x\ufffdy"


def test_dreaming_and_archive_cron_transcripts_are_flagged():
    dreaming = [json.dumps({"type": "custom", "customType": "openclaw:bootstrap-context:full", "data": {"runId": "dreaming-narrative-1"}}), msg("user", "hi")]
    flat = flatten_session_lines(dreaming)
    assert (flat.content, flat.generated_by_dreaming_narrative) == ("", True)
    cron = [msg("user", "hello"), msg("user", "[cron:job] run it"), msg("assistant", "done")]
    assert flatten_session_lines(cron).content == "User: hello\nAssistant: done"
    archived = flatten_session_lines(cron, archive=True)
    assert (archived.content, archived.generated_by_cron_run) == ("", True)


def test_transcript_names():
    assert is_usage_counted_transcript_name("abc.jsonl")
    assert is_usage_counted_transcript_name("abc.jsonl.reset.2026-01-02T03-04-05.678Z")
    assert is_usage_counted_transcript_name("abc.jsonl.deleted.2026-01-02T03-04-05Z")
    assert not is_usage_counted_transcript_name("abc.jsonl.bak.2026-01-02T03-04-05Z")
    assert not is_usage_counted_transcript_name("abc.trajectory.jsonl")
    assert not is_usage_counted_transcript_name("abc.checkpoint.12345678-1234-4234-8234-123456789012.jsonl")
    assert not is_usage_counted_transcript_name("sessions.json")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.builds(lambda r, c: msg(r, c), st.sampled_from(["user", "assistant", "system"]), st.text(max_size=1200))), max_size=12))
def test_flatten_never_raises_and_maps_every_line(lines):
    flat = flatten_session_lines(lines)
    out = flat.content.split("\n") if flat.content else []
    assert len(out) == len(flat.line_map) == len(flat.timestamps)
    assert all(1 <= n <= len(lines) for n in flat.line_map)
    assert list(flat.line_map) == sorted(flat.line_map)
    for line in out:
        assert line.startswith(("User: ", "Assistant: "))
        line.encode("utf-8")


def test_the_readme_transcript_example_flattens_as_documented():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    example = re.search(r"### Session transcripts.*?```json\n(.*?)```", readme, re.S).group(1)
    flat = flatten_session_lines(example.splitlines(keepends=True))
    assert (flat.content, flat.line_map, flat.timestamps, flat.skipped_lines) == (
        "User: What did we decide about the release train?\nAssistant: Freeze on Thursday.", (2, 3),
        (1793520001000, 1793520005000), 0)
