"""A/B of the long-query workload: main vs branch, same index (copied), same machine load, queries
alternating which side goes first. Rows: anchor hybrid (in this process), hybrid gateway, hybrid
in-process (pooled MemoryCore), hybrid engine (pool=False), for each side; answers compared.

usage: cd BRANCH && python /tmp/i26hyb/ab_long.py MAIN_TREE BRANCH_TREE WORKDIR [docs] [queries]
"""
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MAIN, BRANCH, WORK = (Path(p).resolve() for p in sys.argv[1:4])
DOCS = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
NQ = int(sys.argv[5]) if len(sys.argv) > 5 else 100
MAXR = 6
TOKEN = "bench-token"
sys.path.insert(0, str(BRANCH))

from benchmarks.latency_long import Anchors, build_workspace  # noqa: E402
from memory_core.config import load_config  # noqa: E402
from memory_core.core import MemoryCore  # noqa: E402
from memory_core.embeddings.local import LocalMiniLMProvider  # noqa: E402
from memory_core.gateway.client import GatewayClient  # noqa: E402
from memory_core.search.engine import candidate_count  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


root = WORK
fresh = not (root / "state-branch").exists()
ws, texts, qs = build_workspace(root, DOCS, NQ + 5)
warm, qs = qs[:5], qs[5:]
configs = {}
for side in ("main", "branch"):
    configs[side] = root / f"hybrid-{side}.json"
    configs[side].write_text(json.dumps({"workspace": str(ws), "stateDir": str(root / f"state-{side}"),
                                         "provider": "local"}))
if fresh:
    t = time.perf_counter()
    cfg = load_config(str(configs["branch"]), env={})
    with MemoryCore(agent_id=cfg.agent_id, config=cfg) as core:
        core.index()
    shutil.copytree(root / "state-branch", root / "state-main")
    log(f"indexed in {time.perf_counter() - t:.1f} s")
cfg = load_config(str(configs["branch"]), env={})
candidates = candidate_count(MAXR, cfg.query.hybrid.candidate_multiplier)
provider = LocalMiniLMProvider(threads=cfg.local.threads)
anchors = Anchors(str(root / "anchor.sqlite"), texts, [f"note-{d:05d}.md" for d in range(DOCS)], provider) \
    if not (root / "anchor.sqlite").exists() else None
if anchors is None:
    os.remove(root / "anchor.sqlite")
    anchors = Anchors(str(root / "anchor.sqlite"), texts, [f"note-{d:05d}.md" for d in range(DOCS)], provider)
anchors.matrix = anchors.encode(texts)

trees = {"main": MAIN, "branch": BRANCH}
procs, urls, helpers = [], {}, {}
for side, tree in trees.items():
    env = dict(os.environ, MEMORY_CORE_GATEWAY_TOKEN=TOKEN, PYTHONPATH=str(tree))
    env.pop("MEMORY_CORE_HOME", None)
    p = subprocess.Popen([sys.executable, "-m", "memory_core", "serve", "--config", str(configs[side]), "--port", "0"],
                         cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    urls[side] = re.search(r"listening on (ws://\S+)", p.stdout.readline()).group(1)
    h = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ab_helper.py")), str(configs[side])],
                         cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(h)
    assert json.loads(h.stdout.readline())["ready"]
    helpers[side] = h


def helper(side, op, core, q):
    h = helpers[side]
    h.stdin.write(json.dumps({"op": op, "core": core, "query": q, "max_results": MAXR}) + "\n")
    h.stdin.flush()
    return json.loads(h.stdout.readline())


async def run():
    rows = {k: [] for k in ("anchor hybrid", "gateway main", "gateway branch", "in-process main",
                            "in-process branch", "engine main", "engine branch")}
    diffs = []
    clients = {s: await GatewayClient.open(u, token=TOKEN) for s, u in urls.items()}
    params = {"maxResults": MAXR}
    for q in warm:
        anchors.hybrid(q, candidates, MAXR)
        for s in trees:
            await clients[s].call("memory.search", {"query": q, **params})
            helper(s, "search", "in-process", q)
            helper(s, "search", "engine", q)
    for i, q in enumerate(qs):
        t = time.perf_counter()
        anchors.hybrid(q, candidates, MAXR)
        rows["anchor hybrid"].append((time.perf_counter() - t) * 1000)
        order = ("main", "branch") if i % 2 == 0 else ("branch", "main")
        answers = {}
        for s in order:
            t = time.perf_counter()
            r = await clients[s].call("memory.search", {"query": q, **params})
            rows[f"gateway {s}"].append((time.perf_counter() - t) * 1000)
            answers[("gw", s)] = json.dumps(r.get("results") if isinstance(r, dict) else r, sort_keys=True)
        for core in ("in-process", "engine"):
            for s in order:
                out = helper(s, "search", core, q)
                rows[f"{core} {s}"].append(out["ms"])
                answers[(core, s)] = out["hits"]
        for kind in ("gw", "in-process", "engine"):
            if answers[(kind, "main")] != answers[(kind, "branch")]:
                diffs.append((q, kind))
    for c in clients.values():
        await c.close()
    return rows, diffs


rows, diffs = asyncio.run(run())
explain = {s: helper(s, "explain", "in-process", qs[0] + " recap") for s in trees}
for p in procs:
    p.terminate()
p50 = {k: float(np.percentile(v, 50)) for k, v in rows.items()}
p95 = {k: float(np.percentile(v, 95)) for k, v in rows.items()}
res = {"docs": DOCS, "queries": len(qs), "loadavg_end": os.getloadavg(), "p50": p50, "p95": p95,
       "ratio_to_anchor": {k: round(v / p50["anchor hybrid"], 3) for k, v in p50.items()},
       "branch_over_main_p50": {k: round(p50[f"{k} branch"] / p50[f"{k} main"], 3)
                                for k in ("gateway", "in-process", "engine")},
       "answer_diffs": diffs, "explain": explain}
print(json.dumps(res, indent=1))
