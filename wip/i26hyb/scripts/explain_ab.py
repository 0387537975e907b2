"""Explain stages, main vs branch helpers (pooled MemoryCore), alternating, N queries; medians."""
import json, os, subprocess, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/wt-i26hyb")
from benchmarks.latency_long import build_workspace
root = Path("/tmp/i26hyb/ab")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
core = sys.argv[2] if len(sys.argv) > 2 else "in-process"
_, _, qs = build_workspace(Path("/tmp/i26hyb/abq"), 1000, 205)
qs = qs[5:]
hs = {}
for side, tree in (("main", "/work/main"), ("branch", "/work/wt-i26hyb")):
    env = dict(os.environ, PYTHONPATH=tree); env.pop("MEMORY_CORE_HOME", None)
    h = subprocess.Popen([sys.executable, "/tmp/i26hyb/ab_helper.py", str(root / f"hybrid-{side}.json")], cwd=tree,
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert json.loads(h.stdout.readline())["ready"]
    hs[side] = h
def call(side, q):
    h = hs[side]; h.stdin.write(json.dumps({"op": "explain", "core": core, "query": q, "max_results": 6}) + "\n"); h.stdin.flush()
    return json.loads(h.stdout.readline())
rows = {"main": [], "branch": []}
for i, q in enumerate(qs[:N + 3]):
    for side in (("main", "branch") if i % 2 == 0 else ("branch", "main")):
        r = call(side, q + " x")
        if i >= 3: rows[side].append(r)
for side, rs in rows.items():
    keys = sorted({k for r in rs for k in r["timings"]})
    print(side, {k: round(float(np.median([r["timings"].get(k, 0.0) for r in rs])), 2) for k in keys},
          "overlapped", round(float(np.median([r["overlapped_ms"] or 0 for r in rs])), 2))
for h in hs.values(): h.stdin.close(); h.wait(30)
print("load", os.getloadavg())
