"""``memory-core search`` and ``memory-core get`` (registered by memory_core.cli)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from memory_core.cli.common import load_cli_config, no_sources_note, open_core, print_json
from memory_core.errors import InvalidRequest
from memory_core.output import escape_control


def register(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("search", parents=[common], help="search the memory index",
                              description="Hybrid (or keyword-only) search over the agent's memory index.")
    p.add_argument("query", nargs="?", help="the search text")
    p.add_argument("--query", dest="query_opt", metavar="TEXT", help="the search text (wins over the positional)")
    p.add_argument("--max-results", type=positive_int, default=None, metavar="N",
                   help="results to return (default 6; at most 200 come back, the candidate cap)")
    p.add_argument("--min-score", type=float, default=None, metavar="X",
                   help="minimum score (default 0.35); when no hit reaches it, the keyword matches come back "
                        "anyway (upstream's relaxed selection)")
    p.add_argument("--source", action="append", choices=["memory", "sessions"], default=None,
                   help="restrict to a source (repeatable; default: the configured sources)")
    p.add_argument("--lexical-only", action="store_true", help="keyword search only, no query embedding")
    p.add_argument("--project", action="append", default=None, metavar="KEY", help="active project key (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--explain", action="store_true", help="show the FTS query, candidates per retriever and score parts")
    p.set_defaults(func=_cmd_search)

    g = subparsers.add_parser("get", parents=[common], help="read lines of an indexed memory file",
                              description="Read a line range of MEMORY.md, memory/**, an extra path or an indexed session.")
    g.add_argument("path", help="workspace-relative path, e.g. memory/2026-01-02.md")
    g.add_argument("--from", dest="from_", type=positive_int, default=None, metavar="LINE",
                   help="first line (1-based)")
    g.add_argument("--lines", type=positive_int, default=None, metavar="N", help="number of lines (default 120)")
    g.add_argument("--json", action="store_true", help="print JSON")
    g.set_defaults(func=_cmd_get)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a usage error names the value otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value




# each hit's score, stage by stage: keyword order (BM25 rank, boosted score, the fused text half),
# vector (rank, cosine, the fused vector half), fusion (content score), decay and multipliers,
# final score, MMR move
EXPLAIN_COLUMNS = (("kw#", 3), ("bm25", 5), ("boost", 5), ("text½", 5), ("vec#", 4), ("vec", 5), ("vec½", 5),
                   ("fused", 5), ("decay", 5), ("mult", 4), ("score", 5), ("mmr", 7))


def _num(value: Any, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def explain_cells(r: dict[str, Any]) -> list[str]:
    """The :data:`EXPLAIN_COLUMNS` cells of one ranked candidate's score parts."""
    st = r.get("stages") or {}
    kw, vec, mmr = st.get("keyword", {}), st.get("vector", {}), st.get("mmr", {})
    moved = f"{mmr.get('before', 0)}->{mmr.get('after', 0)}" if mmr.get("before") else "-"
    cells = [_num(kw.get("order"), "d"), _num(r["text_score"]), _num(r["ranking_score"]), _num(kw.get("half")),
             _num(r.get("vector_rank"), "d"), _num(r["vector_score"]), _num(vec.get("half")), _num(r["content_score"]),
             _num(r["decay"]),
             _num(r["importance_mult"] * r["project_mult"], ".2f"), _num(r["score"]), moved]
    return [f"{c:>{w}}" for c, (_, w) in zip(cells, EXPLAIN_COLUMNS)]


def _format_explain(data: dict[str, Any]) -> str:
    lines = [f"mode: {data['mode']}  revision: {data.get('revision')}"]
    plan = data.get("fts_plan") or {}
    fts = data.get("fts") or {}
    if plan:
        lines.append(f"fts query: {plan.get('match_query')}"
                     + (" (not run: a long query goes to the OR probe)" if fts.get("strict_skipped") else ""))
        if plan.get("substring_terms"):
            lines.append(f"substring terms (LIKE): {plan['substring_terms']}")
        lines.append(f"fallback keywords: {plan.get('fallback_terms')}  or-probe: {plan.get('or_probe')}")
        lines.append(f"body sql: {plan.get('body_sql')}")
    if fts:
        strict = (f"skipped ({fts['strict_skipped']} words)" if fts.get("strict_skipped")
                  else fts.get("full_count"))
        lines.append(f"keyword: body={fts.get('body_kind')} strict hits={strict} probes={fts.get('probes')}"
                     + (f" errors={fts['errors']}" if fts.get("errors") else ""))
        if fts.get("statements_ms"):
            lines.append("keyword statements ms: " + ", ".join(f"{k} {v:.2f}" for k, v in fts["statements_ms"].items()))
    cands = data.get("candidates", {})
    lines.append(f"candidates: keyword {len(cands.get('keyword', []))}, vector {len(cands.get('vector', []))}")
    fusion = (data.get("params") or {}).get("fusion", "-")
    ranked = data.get("ranked") or []
    if fusion == "weighted" and data.get("mode") == "hybrid" and ranked:
        scale = ((ranked[0].get("stages") or {}).get("fusion") or {}).get("scale")
        fusion += f", fused = {_num(scale)} x (vectorWeight x vec½ / best + textWeight x text½ / best)"
    lines.append(f"score parts (ranked order; fusion {fusion}):")
    lines.append("  " + "  ".join(f"{h:>{w}}" for h, w in EXPLAIN_COLUMNS) + "  citation")
    for r in ranked[:40]:
        lines.append("  " + "  ".join(explain_cells(r)) + f"  {escape_control(r['citation'])}")
    timings = data.get("timings_ms") or {}
    if timings:
        lines.append("timings ms: " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
    return "\n".join(lines) + "\n"


def _cmd_search(args: argparse.Namespace) -> int:
    from memory_core.surfaces.render import wire

    query = args.query_opt if args.query_opt is not None else args.query
    if query is None or not query.strip():
        raise InvalidRequest("a query is required: memory-core search QUERY (or --query TEXT)"
                             + ("; the query given was blank" if query is not None else ""))
    cfg = load_cli_config(args)
    if not cfg.enabled:  # upstream `memory search --json` of a disabled agent; a successful exit
        if args.json:
            print_json({"agentId": cfg.agent_id, "status": "disabled"})
        else:
            print("Memory search disabled.")  # upstream's line (cli.runtime: onMissing)
        return 0
    core = open_core(args, config=cfg)
    try:
        kwargs = dict(max_results=args.max_results, min_score=args.min_score, sources=args.source,
                      lexical_only=args.lexical_only, active_project_keys=args.project)
        if args.explain:
            details = core.explain(query, **kwargs)
            if args.json:
                print_json(details.to_dict())
            else:
                sys.stdout.write(_format_explain(details.to_dict()))
                sys.stdout.write(_render_hits(core, details.hits, query))
            return 0
        hits = core.search(query, **kwargs)
        stale = hits.staleness
        note = None if hits else no_sources_note(core)
        if args.json:
            out: dict[str, Any] = {"agentId": core.agent_id, "provider": core.config.provider,
                                   "results": [wire(h) for h in hits]}
            if stale:
                out.update({k: v for k, v in stale.items() if k in ("stale", "warning", "action")})
            if note:
                out["note"] = note
            print_json(out)
        else:
            sys.stdout.write(_render_hits(core, hits, query))
            if note:
                print(f"note: {note}", file=sys.stderr)
        if stale and stale.get("warning"):
            print(f"warning: {stale['warning']}" + (f" ({stale['action']})" if stale.get("action") else ""),
                  file=sys.stderr)
    finally:
        core.close()
    return 0


def _render_hits(core: Any, hits: list[Any], query: str) -> str:
    from memory_core.surfaces.render import cli_text
    from memory_core.surfaces.snippets import chunk_texts, use_color

    texts = chunk_texts(core.config.db_path(), [h.id for h in hits]) if hits else {}
    return cli_text(hits, query, texts=texts, color=use_color())


def _cmd_get(args: argparse.Namespace) -> int:
    from memory_core.cli.common import print_json

    core = open_core(args)
    try:
        result = core.get(args.path, from_=args.from_, lines=args.lines)
    finally:
        core.close()
    if args.json:
        print_json(result.to_dict())
        return 0 if result.status == "ok" else 1
    if result.status == "not_found":
        print(f"error: {escape_control(args.path)} not found", file=sys.stderr)
        return 1
    if result.note:
        print(f"note: {escape_control(_cli_flags(result.note))}", file=sys.stderr)
        return 0
    text = result.text[: -len(result.notice)] if result.notice else result.text
    if text:
        sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))
    if result.next_from is not None:
        print(f"note: more lines follow; use --from {result.next_from} to continue", file=sys.stderr)
    elif result.notice:
        from memory_core.read_file import DEFAULT_MEMORY_READ_MAX_CHARS

        print(f"note: the line was cut at the {DEFAULT_MEMORY_READ_MAX_CHARS:,}-character limit of a read",
              file=sys.stderr)
    return 0


def _cli_flags(note: str) -> str:
    """A read's note names the tools' parameters (``from=4``); the CLI's flag is ``--from 4``."""
    return re.sub(r"\bfrom=(\d+)", r"--from \1", note)
