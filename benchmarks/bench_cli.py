"""CLI start-up benchmark: `--help` and a one-shot `search` on the example, next to `python -c pass`.

    memory-core bench cli [--runs 10] [--index-files 300,3000] [--json PATH|-]

Each command runs ``--runs`` times as a fresh process, round-robin with the baseline
``python -c pass`` so that machine load hits every row alike; the median (and the fastest and
slowest run) of each row, and the median's ratio to the baseline's, are reported. Targets:
``--help`` < 0.3 s, one-shot ``search "who owns billing"`` on examples/workspace < 1.0 s (a
temporary state dir is indexed first, not timed). ``memory-core`` is the console script next to
this interpreter when there is one, else ``python -m memory_core``.

``--index-files N,...`` also times a one-shot ``index`` of a generated workspace of N notes (4 KB
each, keyword-only) three ways: as shipped, with the indexing pool forced on, and in-process
(``pool.workers = 0``): where the pool pays for a cold one-shot index (workers/shared.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import add_json_argument, emit, json_on_stdout
from memory_core.errors import MemoryCoreError
from memory_core.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
# the bundled example (examples/ in a checkout), shipped as package data so that an installed
# package can run this benchmark from any folder
EXAMPLES = Path(__file__).resolve().parent.parent / "memory_core" / "example"
QUERY = "who owns billing"
TARGETS_S = {"help": 0.3, "search": 1.0}
# a one-shot index with the indexing pool used whatever the file count (the alternative measured)
FORCE_POOL = ("import sys, workers.shared as s; s.COLD_POOL_MIN_ENTRIES = 0; "
              "from memory_core.cli import main; sys.exit(main(sys.argv[1:]))")


def memory_core_command() -> list[str]:
    """How a user runs the CLI with this interpreter: its console script, else ``-m memory_core``."""
    script = Path(sys.executable).with_name("memory-core")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "memory_core"]


def run_once(cmd: list[str], env: dict[str, str], expect: str | None = None) -> float:
    """Seconds for one run of ``cmd``; a failure (or output without ``expect``) is an error, not a time."""
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    seconds = time.perf_counter() - t
    if r.returncode != 0 or (expect is not None and expect not in r.stdout):
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}")
    return seconds


def summary(times: list[float], baseline: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
                           "max_s": round(max(times), 4), "runs": len(times)}
    if baseline:
        row["ratio_to_baseline"] = round(row["median_s"] / round(baseline, 4), 2)  # of the figures shown
    return row


def interleaved(rows: dict[str, tuple[list[str], dict[str, str], str | None]], runs: int,
                label: str) -> dict[str, list[float]]:
    """``runs`` rounds; each round runs every row once, in order."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    with Progress(label, runs * len(rows), unit="runs") as progress:
        for _ in range(runs):
            for name, (cmd, env, expect) in rows.items():
                times[name].append(run_once(cmd, env, expect))
                progress.advance(item=name)
    return times


def generate_notes(root: Path, files: int) -> Path:
    from benchmarks.bench_index import generate_workspace

    ws = root / f"ws-{files}"
    generate_workspace(str(ws), files, total_mb=files * 4 / 1024)
    return ws


def measure(*, runs: int = 10, index_files: list[int] | None = None, workdir: str | None = None) -> dict[str, Any]:
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="memory-core-bench-cli-") as tmp:
            return measure(runs=runs, index_files=index_files, workdir=tmp)
    root = Path(workdir)
    mc = memory_core_command()
    env = {**os.environ, "MEMORY_CORE_HOME": str(root / "state")}
    env.pop("MEMORY_CORE_POOL__WORKERS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if not (EXAMPLES / "memory-core.toml").is_file() or not (EXAMPLES / "workspace" / "MEMORY.md").is_file():
        raise MemoryCoreError(f"bench cli needs the bundled example workspace at {EXAMPLES}, which is missing; "
                              "reinstall memory-core (`pip install --force-reinstall memory-core`) or run it "
                              "from a checkout")
    example = ["--workspace", str(EXAMPLES / "workspace"), "--config", str(EXAMPLES / "memory-core.toml")]
    run_once([*mc, "index", *example], env)  # the one-shot search reads an existing index
    rows = {
        "python -c pass": ([sys.executable, "-c", "pass"], env, None),
        "help": ([*mc, "--help"], env, "usage: memory-core"),
        "search": ([*mc, "search", QUERY, *example], env, "memory/"),
    }
    times = interleaved(rows, runs, "cli")
    base = statistics.median(times["python -c pass"])
    results: dict[str, Any] = {"command": " ".join(mc), "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(),
                               "query": QUERY, **{name: summary(t, base if name != "python -c pass" else None)
                                                  for name, t in times.items()}}
    results["targets"] = {name: {"target_s": target, "median_s": results[name]["median_s"],
                                 "ok": results[name]["median_s"] < target} for name, target in TARGETS_S.items()}
    if index_files:
        results["index"] = []
        for n in index_files:
            ws = generate_notes(root, n)
            variants = {
                "as shipped": [*mc, "index", "--workspace", str(ws)],
                "pool forced": [sys.executable, "-c", FORCE_POOL, "index", "--workspace", str(ws)],
                "in-process": [*mc, "index", "--workspace", str(ws)],
            }
            irows = {}
            for name, cmd in variants.items():
                venv = {**env, "MEMORY_CORE_HOME": str(root / f"state-{n}-{name.replace(' ', '-')}")}
                if name == "in-process":
                    venv["MEMORY_CORE_POOL__WORKERS"] = "0"
                # a first index each run: remove the state left by the previous round
                irows[name] = (["sh", "-c", 'rm -rf "$MEMORY_CORE_HOME" && exec "$@"', "sh", *cmd], venv, "Indexed")
            itimes = interleaved(irows, max(1, min(runs, 3)), f"index {n} files")
            inproc = statistics.median(itimes["in-process"])
            results["index"].append({"files": n, **{name: summary(t, inproc) for name, t in itimes.items()}})
            shutil.rmtree(ws, ignore_errors=True)
    results["loadavg_end"] = os.getloadavg()
    return results


def table(r: dict[str, Any]) -> str:
    lines = [f"cli start-up: {r['command']}, {r['cpu_count']} CPUs, load {r['loadavg'][0]:.1f} -> "
             f"{r['loadavg_end'][0]:.1f}, {r['help']['runs']} runs per row",
             f"{'row':<18}{'median s':>10}{'min s':>9}{'max s':>9}{'x python -c pass':>18}"]
    for name in ("python -c pass", "help", "search"):
        row = r[name]
        ratio = f"{row['ratio_to_baseline']:.2f}x" if "ratio_to_baseline" in row else "baseline"
        lines.append(f"{name:<18}{row['median_s']:>10.3f}{row['min_s']:>9.3f}{row['max_s']:>9.3f}{ratio:>18}")
    for name, t in r["targets"].items():
        lines.append(f"target {name} < {t['target_s']} s: {t['median_s']:.3f} s -> {'ok' if t['ok'] else 'MISSED'}")
    for row in r.get("index", []):
        lines.append(f"one-shot index of {row['files']} files (median s, ratio to in-process): "
                     + ", ".join(f"{k} {row[k]['median_s']:.2f} ({row[k]['ratio_to_baseline']:.2f}x)"
                                 for k in ("as shipped", "pool forced", "in-process")))
    return "\n".join(lines)


def _counts(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated file counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected file counts >= 1, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=10, help="runs per row (default 10; the median is reported)")
    p.add_argument("--index-files", type=_counts, default=None, metavar="N,...",
                   help="also time a one-shot index of N generated notes: as shipped, pool forced, in-process")
    add_json_argument(p)


def run(args: argparse.Namespace) -> int:
    if args.runs < 1:
        print("error: --runs must be >= 1", file=sys.stderr)
        return 2
    results = measure(runs=args.runs, index_files=args.index_files)
    emit(args, results, lambda: table(results))
    if json_on_stdout(args):
        print(table(results), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_cli", description=(__doc__ or "").splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
