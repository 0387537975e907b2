"""``memory-core index`` (build or update the index) and ``memory-core status`` (what it holds)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from memory_core.cli.common import EXIT_FAILURE, EXIT_USAGE, agent_configs, no_sources_note, open_core, print_json
from memory_core.errors import MemoryCoreError, on_surfaces
from memory_core.output import escape_control
from memory_core.progress import Progress


def _disabled(cfg: Any) -> bool:
    if cfg.enabled:
        return False
    print(f"Memory search is disabled for agent {cfg.agent_id} (memory.search.enabled = false); skipped",
          file=sys.stderr)
    return True


def _agent_failed(cfg: Any, exc: MemoryCoreError) -> int:
    print(f"error: agent {cfg.agent_id}: {exc.message}", file=sys.stderr)
    return on_surfaces(exc).exit_code


def _cmd_index(args: argparse.Namespace) -> int:
    """Every configured agent (``--agent`` narrows); the worst exit code wins."""
    rc = 0
    summaries = []
    configs = agent_configs(args)
    for cfg in configs:
        if _disabled(cfg):
            continue
        try:
            agent_rc, summary = _index_one(args, cfg)
        except MemoryCoreError as exc:
            if len(configs) == 1:
                raise
            rc = max(rc, _agent_failed(cfg, exc))  # one agent's problem does not stop the others
            continue
        rc = max(rc, agent_rc)
        summaries.append(summary)
    if args.json:
        print_json(summaries[0] if len(summaries) == 1 else summaries)
    return rc


def _index_one(args: argparse.Namespace, cfg: Any) -> tuple[int, Any]:
    from memory_core.status import skipped_files  # not at import: `--help` loads no engine module

    core = open_core(args, pool=True, config=cfg, repoint=args.repoint)
    try:
        with Progress("Indexing", unit="files") as progress:
            summary = core.index(force=args.force, progress=progress)
        note = no_sources_note(core) if not summary.files else None
        skipped = skipped_files(core.config, core.workspace)
    finally:
        core.close()
    if not args.json:
        if summary.moved_aside:
            why = ("was written by a newer memory-core" if summary.moved_aside.startswith(core.db_path + ".newer-")
                   else "was not a readable database")
            print(f"The index file {why}: moved it aside to {summary.moved_aside} "
                  "(with its -wal/-shm, if any) and rebuilt from scratch")
        mode = "incremental" if not summary.full else (
            f"full rebuild: {summary.rebuild_reason}" if summary.rebuild_reason else "full rebuild")
        print(f"Indexed {escape_control(core.workspace)} ({mode}, {summary.provider}/{summary.model}) in {summary.seconds:.2f}s")
        print(f"  files {summary.files}, chunks {summary.chunks}; added {summary.added}, changed {summary.changed},"
              f" removed {summary.removed}, unchanged {summary.unchanged}"
              + (f", forgotten {summary.forgotten}" if summary.forgotten else ""))
        for p in summary.problems[:20]:
            print(f"  skipped {escape_control(p['path'])}: {escape_control(p['message'])}", file=sys.stderr)
        if len(summary.problems) > 20:
            print(f"  ... and {len(summary.problems) - 20} more problems (see --json)", file=sys.stderr)
        if skipped:
            print(f"  {_skipped_line(skipped)}", file=sys.stderr)
        if note:
            print(f"note: {note}", file=sys.stderr)
    return (EXIT_FAILURE if summary.failed else 0), summary.to_json()


def _status_json(st: dict[str, Any]) -> dict[str, Any]:
    """The status for ``--json``: the scheduler's ``lastSync*`` fields of a process that has not
    synced itself (a one-shot CLI) come from the last sync the index records, not null beside it."""
    fresh, last = st.get("freshness"), st.get("last_sync")
    if isinstance(fresh, dict) and fresh.get("lastSyncAt") is None and last and last.get("time"):
        fresh = {**fresh, "lastSyncAt": last["time"] / 1000, "lastSyncReason": last.get("reason")}
        if last.get("error") and fresh.get("lastSyncError") is None:
            fresh.update(lastSyncError=last["error"], lastSyncErrorAt=last["time"] / 1000)
        st = {**st, "freshness": fresh}
    return st


def _cmd_status(args: argparse.Namespace) -> int:
    """Every configured agent (``--agent`` narrows); ``--json`` is one entry per agent, as upstream's
    aggregate array (a disabled agent has none)."""
    entries = []
    texts = []
    problems = []
    rc = 0
    configs = agent_configs(args)
    for cfg in configs:
        if _disabled(cfg):
            continue
        try:
            core = open_core(args, config=cfg, check_config=False)  # a configuration error is shown beside the facts
            try:
                problem = core.config_error
                st = core.status(deep=args.deep)
            finally:
                core.close()
        except MemoryCoreError as exc:
            if len(configs) == 1:
                raise
            rc = max(rc, _agent_failed(cfg, exc))
            continue
        st["notices"] = cfg.unused_settings
        if problem is not None:
            st["config_error"] = problem.message
            problems.append(problem)
        _warn_loose(st)
        entries.append(_status_json(st))
        if not args.json:
            texts.append(_status_text(args, st))
    if args.json:
        print_json(entries)
    else:
        print("\n\n".join(texts))
    for problem in problems:
        rc = max(rc, _config_exit(problem))
    return rc


def _warn_loose(st: dict[str, Any]) -> None:
    """On stderr, with or without ``--json``: index paths other users can read."""
    loose = st.get("loose_permissions") or []
    if loose:
        shown = ", ".join(f"{escape_control(item['path'])} ({item['mode']})" for item in loose[:3])
        print(f"warning: other users can read the index: {shown}{' ...' if len(loose) > 3 else ''}; run "
              "`memory-core index` to make it private (files 0600, state dir 0700)", file=sys.stderr)


def _status_text(args: argparse.Namespace, st: dict[str, Any]) -> str:
    vec = st["vector"]
    fts = st["fts"]
    lines = [
        f"Agent: {st['agent']}",
        f"Workspace: {escape_control(st['workspace'])}",
        f"Database: {escape_control(st['db_path'])}{'' if st['db_exists'] else ' (not indexed yet: run `memory-core index`)'}"
        + (f" (state dir not writable: {st['state_dir_problem']}; it can be searched, not updated)"
           if st.get("state_dir_problem") else ""),
        f"Sources: {', '.join(st['sources'])}",
        f"Files: {st['files']}  Chunks: {st['chunks']}  "
        + "  ".join(f"{k}: {v}" for k, v in sorted(st["chunks_by_source"].items())),
        f"Provider: {st['provider']}  Model: {st['model'] or '-'}  Dims: {st['dims'] or '-'}",
        f"FTS: {'available' if fts['available'] else 'unavailable'} ({fts['tokenizer']})",
        "Vector store: " + (
            f"available (sqlite-vec {vec['sqlite_vec_version']}, backend {vec['backend']})" if vec["available"]
            else ("disabled (keyword-only)" if not vec["enabled"]
                  else f"unavailable ({vec['error'] or 'no vectors indexed yet'})")),
        f"Revision: {st['revision']}  Dirty: {'yes' if st['dirty'] else 'no'}",
    ]
    ident = st.get("identity") or {}
    if ident.get("state") == "mismatch":
        lines.append(f"Index identity: {ident['message']}")
    elif ident.get("state"):
        lines.append(f"Index identity: {ident['state']}")
    last = st.get("last_sync")
    if last:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last["time"] / 1000))
        lines.append(f"Last sync: {when} ({last.get('reason')}){' error: ' + last['error'] if last.get('error') else ''}")
        if last.get("problems"):
            lines.append(f"Problems: {len(last['problems'])} file(s) skipped, e.g. "
                         f"{escape_control(last['problems'][0]['path'])}: "
                         f"{escape_control(last['problems'][0]['message'])}")
    if st.get("skipped_files"):
        lines.append(f"Problems: {_skipped_line(st['skipped_files'])}")
    if args.deep:
        pc = st.get("provider_check") or {}
        if pc.get("mode") == "fts-only":
            lines.append(f"Embeddings: none ({pc.get('reason')})")
        else:
            lines.append("Embeddings: " + (
                "available" if pc.get("available") else f"unavailable ({pc.get('error')})"))
        if "integrity" in st:
            lines.append(f"Integrity: {st['integrity']}" + (
                "" if st["integrity"] == "ok" else " (run `memory-core index --force` to rebuild the index)"))
    lines.extend(st.get("notices") or [])
    if st.get("config_error"):
        lines.append(f"Problem: configuration: {escape_control(st['config_error'])}")
    return "\n".join(lines)


def _skipped_line(skipped: list[dict[str, str]], shown: int = 10) -> str:
    """``3 files skipped: not Markdown (only .md files are indexed): memory/a.txt, ...``."""
    names = ", ".join(escape_control(p["path"]) for p in skipped[:shown]) + (" ..." if len(skipped) > shown else "")
    return (f"{len(skipped)} file{'' if len(skipped) == 1 else 's'} skipped: {skipped[0]['message']}: "
            f"{names}")


def _config_exit(problem: Any) -> int:
    """After the status is shown: a configuration error exits 2 with its one line, as on every command."""
    if problem is None:
        return 0
    print(f"error: {problem.message}", file=sys.stderr)
    return EXIT_USAGE


def _cmd_import(args: argparse.Namespace) -> int:
    """``import-embeddings --from <openclaw index>``: one agent (``--agent``, default the configured one)."""
    cfg = agent_configs(args)[0] if args.agent or args.workspace else None
    core = open_core(args, config=cfg)
    try:
        report = core.import_embeddings(args.source)
    finally:
        core.close()
    if args.json:
        print_json(report.to_json())
    else:
        print(f"Imported {report.imported} vectors ({report.provider}/{report.model}, {report.dims or '-'} dims) "
              f"from {escape_control(report.source)} into the embedding cache of agent {core.agent_id}"
              + (f"; skipped {report.skipped} unreadable" if report.skipped else "")
              + (f"; left alone: {', '.join(report.other_models)}" if report.other_models else ""))
        print("  run `memory-core index`: unchanged chunks are not embedded again"
              + (f"; it embeds up to {report.passages_to_embed} passage vectors of chunks of several lines, which "
                 "OpenClaw does not make" if report.passages_to_embed else ""))
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("index", parents=[common], help="index the workspace (incremental; --force rebuilds)",
                       description="Index the agent workspace into its SQLite file. Incremental by default; "
                                   "--force (or a settings change) rebuilds atomically.")
    p.add_argument("--force", action="store_true", help="full rebuild into a temp database, swapped in atomically")
    p.add_argument("--repoint", action="store_true",
                   help="the index was built from another workspace: re-point it to --workspace (files not in "
                        "the new workspace are removed from the index)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("status", parents=[common], help="show index facts",
                       description="Files, chunks, provider, FTS/vector availability, revision and last sync.")
    p.add_argument("--deep", action="store_true", help="also check the embedding provider and database integrity")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("import-embeddings", parents=[common],
                       help="seed the embedding cache from an OpenClaw index (same provider and model)",
                       description="Take the vectors an OpenClaw index already paid for (its embedding cache and "
                                   "chunks, matched by chunk hash) into this agent's embedding cache, so the next "
                                   "`memory-core index` embeds only what changed. Refuses another model or "
                                   "dimension count.")
    p.add_argument("--from", dest="source", required=True, metavar="SQLITE",
                   help="the OpenClaw index, e.g. ~/.openclaw/agents/main/agent/openclaw-agent.sqlite")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_import)
