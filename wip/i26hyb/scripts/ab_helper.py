"""Run searches for the A/B script in one code tree (its PYTHONPATH): JSON lines in, JSON lines out."""
import json
import sys
import time

from memory_core.config import load_config
from memory_core.core import MemoryCore

cfg = load_config(sys.argv[1], env={})
cores = {"in-process": MemoryCore(agent_id=cfg.agent_id, config=cfg),
         "engine": MemoryCore(agent_id=cfg.agent_id, config=cfg, pool=False)}
for c in cores.values():
    c.freshness.start()
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    core = cores[cmd["core"]]
    if cmd["op"] == "search":
        t = time.perf_counter()
        hits = core.search(cmd["query"], max_results=cmd["max_results"])
        ms = (time.perf_counter() - t) * 1000
        print(json.dumps({"ms": ms, "hits": [[h.path, h.start_line, h.end_line, h.score] for h in hits]}), flush=True)
    elif cmd["op"] == "explain":
        d = core.explain(cmd["query"], max_results=cmd["max_results"])
        print(json.dumps({"timings": d.timings_ms, "overlapped_ms": d.params.get("overlapped_ms")}), flush=True)
for c in cores.values():
    c.close()
