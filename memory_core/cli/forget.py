"""``memory-core forget --session KEY`` and ``memory-core watch``.

Forgetting removes a session transcript's chunks and derived rows and leaves a tombstone, so a
later sync never publishes that transcript again (upstream `memory/manager-sync-ops.ts`). Memory files are
refused:
their entries come from the file, so the way to forget them is to edit or delete the file. A key
that matches nothing (not indexed, not tombstoned, no transcript on disk) is refused as a likely
typo; ``--force`` records the tombstone anyway, to forget a session before it is indexed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from memory_core.cli.common import open_core, print_json
from memory_core.errors import IndexUnreadable, StateDirNotWritable
from memory_core.session_keys import session_index_path


def forget_session(core: Any, key: str, *, force: bool = False) -> dict[str, Any]:
    """Forget one session through ``core``; returns ``{path, chunksRemoved, forgotten: True}``.

    Raises :class:`ReferenceNotFound` for a key that matches nothing (see ``MemoryCore.forget_session``)
    unless ``force``."""
    path = session_index_path(key)
    removed = core.forget_session(path, force=force)
    return {"path": path, "chunksRemoved": int(removed), "forgotten": True}


def _cmd_forget(args: argparse.Namespace) -> int:
    core = open_core(args)
    try:
        out = forget_session(core, args.session, force=args.force)
    finally:
        core.close()
    if args.json:
        print_json(out)
    elif out["chunksRemoved"]:
        print(f"Forgot {out['path']}: {out['chunksRemoved']} chunk(s) removed; "
              "a tombstone keeps later syncs from indexing it again")
    else:
        print(f"Forgot {out['path']}: nothing was indexed under it; "
              "a tombstone was recorded, so later syncs never index it")
    return 0


def _cmd_watch(args: argparse.Namespace) -> int:
    """Keep the index fresh in the foreground until interrupted (what ``serve`` does in the background)."""
    core = open_core(args, pool=True)
    try:
        _ = core.writer  # fail now, with the one-line error, on a read-only state dir or an unreadable index
    except BaseException:
        core.close()
        raise
    overrides = {}
    if args.debounce_ms is not None:
        overrides["watch_debounce_ms"] = args.debounce_ms
    fresh = core.serve_freshness(watch=True, **overrides)
    print(f"Watching {core.workspace} (agent {core.agent_id}); Ctrl-C to stop", file=sys.stderr)
    seen = 0
    deadline = time.monotonic() + args.seconds if args.seconds else None
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
            log = list(fresh.sync_log)
            for entry in log[seen:] if len(log) >= seen else log:
                scope = "full" if entry["full"] else f"{entry['paths']} file(s)"
                state = "ok" if entry["ok"] else f"failed: {fresh.last_sync_error}"
                print(f"sync ({entry['reason']}, {scope}) {entry['ms']:.0f} ms {state}", file=sys.stderr)
            seen = len(log)
            if isinstance(fresh.last_sync_exception, (StateDirNotWritable, IndexUnreadable)):
                raise fresh.last_sync_exception  # retrying cannot help: stop with its one-line error
    except KeyboardInterrupt:
        pass
    finally:
        fresh.close()
        core.close()
    return 0


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "forget", parents=[common], help="forget a session transcript (tombstoned: never indexed again)",
        description="Remove a session transcript's chunks from the index and leave a tombstone, so later "
                    "syncs never index it again. Memory files are not forgotten: edit the file instead.",
    )
    p.add_argument("--session", required=True, metavar="KEY",
                   help="session key, transcript file name (abc.jsonl) or indexed path (sessions/abc.jsonl)")
    p.add_argument("--force", action="store_true",
                   help="record the tombstone even when nothing is indexed under KEY and no transcript exists "
                        "(forget a session before it is written)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_forget)

    p = subparsers.add_parser(
        "watch", parents=[common], help="keep the index fresh in the foreground (watcher + syncs)",
        description="Watch MEMORY.md, USER.md, memory/, extra paths and transcripts and sync on change, "
                    "until interrupted.",
    )
    p.add_argument("--debounce-ms", type=int, default=None, help="override sync.watchDebounceMs")
    p.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(func=_cmd_watch)
