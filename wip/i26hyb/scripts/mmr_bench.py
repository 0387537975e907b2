"""MMR prefix cost: main's mmr_rerank vs the branch's, same candidates, alternating; checks equal picks."""
import importlib.util, random, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/wt-i26hyb")
from host_facades.ranking import rank as new
spec = importlib.util.spec_from_file_location("rank_main", "/tmp/i26hyb/mainsrc/host_facades/ranking/rank.py")
old = importlib.util.module_from_spec(spec); sys.modules["rank_main"] = old; spec.loader.exec_module(old)
from benchmarks.latency_long import build_workspace
import tempfile
ws, docs, qs = build_workspace(Path(tempfile.mkdtemp()), 400, 10)
lines = [l for d in docs for l in d.splitlines()]
rng = random.Random(1)
for n, k in ((48, 6), (160, 20)):
    t_old, t_new = [], []
    for rep in range(200):
        items = [(" ".join(rng.sample(lines, 6))[:700], rng.random()) for _ in range(n)]
        items.sort(key=lambda it: -it[1])
        def done_after(k):
            box = [k]
            def done(it):
                box[0] -= 1
                return box[0] <= 0
            return done
        for mod, acc in ((old, t_old), (new, t_new)) if rep % 2 == 0 else ((new, t_new), (old, t_old)):
            t = time.perf_counter()
            out = mod.mmr_rerank(items, lam=0.7, score=lambda it: it[1], text=lambda it: it[0], done=done_after(k))
            acc.append((time.perf_counter() - t) * 1000)
            if mod is old: a = out
            else: b = out
        assert a == b
    print(f"n={n} picks={k}: main p50 {np.median(t_old):.3f} ms, branch p50 {np.median(t_new):.3f} ms, ratio {np.median(t_new)/np.median(t_old):.2f}")
