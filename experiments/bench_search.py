"""Benchmark of the search methods on the shipped spaces (issue 3's evidence).

For each space with an exact reference (``exhaustive``) and each method x seed, from the trials
the study stored (default persistent storage: a journal file, fresh per run):

* ``trials_to_1pct``: trials until the best feasible value of the primary (first) objective is
  within 1 % of the exact optimum under the space's budgets (None: not reached);
* ``hv@200/1000/5000``: hypervolume of the feasible trials' front over the exact front's
  (objectives normalized on the exact front, reference 1.1 x its nadir; None: the run stopped
  before that many trials, e.g. at the per-run time cap);
* ``trials_per_s``: trials per second of the whole ``run_study`` call, persisted to the journal.

Plus exhaustive timing on a 1.08e6-point variant of the co-design space (target < 5 s), and the
large space (3.3e8 points, no exact front) scored against the best front any method found.

    python experiments/bench_search.py            # about 25 minutes on 2 cores
    python experiments/bench_search.py --quick    # a few minutes: fewer methods, seeds, trials
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cosearch.samplers import run_exhaustive  # noqa: E402
from cosearch.search.hypervolume import normalize_for_hv  # noqa: E402
from cosearch.search.space import load_space, parse_space, read_yaml  # noqa: E402
from cosearch.study import pareto_front, run_study  # noqa: E402

CHECKPOINTS = (200, 1000, 5000)


def trial_table(study, objectives):
    """(n, k) objective values of feasible trials and their positions (1-based trial counts)."""
    vals, pos = [], []
    trials = sorted((t for t in study.get_trials(deepcopy=False) if "metrics" in t.user_attrs), key=lambda t: t.number)
    for i, t in enumerate(trials, start=1):
        if t.user_attrs.get("feasible") and t.values is not None:
            vals.append([t.user_attrs["metrics"][o] for o in objectives])
            pos.append(i)
    return np.array(vals, dtype=float).reshape(-1, len(objectives)), np.array(pos), len(trials)


def score(study, objectives, directions, norm, opt):
    vals, pos, n = trial_table(study, objectives)
    out = {"trials": n}
    sign = -1.0 if directions[0] == "maximize" else 1.0
    hit = None
    if len(vals):
        run_best = np.minimum.accumulate(sign * vals[:, 0])
        ok = run_best <= sign * opt + 0.01 * abs(opt)
        if ok.any():
            hit = int(pos[np.argmax(ok)])
    out["trials_to_1pct"] = hit
    for c in CHECKPOINTS:
        if n < c:
            out[f"hv@{c}"] = None
            continue
        sel = vals[pos <= c]
        out[f"hv@{c}"] = round(norm.ratio(sel), 4) if norm is not None and len(sel) else (0.0 if norm is not None else None)
    out["hv@end"] = round(norm.ratio(vals), 4) if norm is not None and len(vals) else None
    return out, vals


def run_method(space, name, method, seed, n_trials, timeout, workdir):
    journal = Path(workdir) / f"{name}-{method}-{seed}.journal"
    t0 = time.perf_counter()
    res = run_study(space, f"{name}-{method}-{seed}", str(journal), sampler=method, n_trials=n_trials, seed=seed,
                    timeout=timeout)
    wall = time.perf_counter() - t0
    return res, wall


def exact_reference(space, workdir, name):
    """Exhaustive study on the journal: exact objective front, exact optimum of the primary."""
    t0 = time.perf_counter()
    res = run_study(space, f"{name}-exhaustive", str(Path(workdir) / f"{name}-exhaustive.journal"), sampler="exhaustive")
    wall = time.perf_counter() - t0
    front = pareto_front(res.study)
    pts = front[space.objectives].to_numpy(dtype=float)
    s = res.summary
    opt = s["best"][space.objectives[0]]
    return pts, opt, {"points": s["points"], "feasible": s["feasible"], "front_size": s["front_size"],
                      "objective_front_size": len(pts), "enumerate_s": s["elapsed_s"], "run_study_s": round(wall, 3)}


def million_point_space():
    d = read_yaml(ROOT / "searchspaces" / "codesign-70b.yaml")
    d = copy.deepcopy(d)
    d["cluster"]["network_gbps"] = [100, 200, 400, 800, 1600]
    d["cluster"]["nvlink_gbps"] = [None, 900, 1800]
    d["plan"]["microbatch"] = [1, 2, 4, 8]
    d["plan"]["zero"] = [0, 1, 3]
    return parse_space(d)


def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec) if isinstance(v, float) else str(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_search.json"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    quick = args.quick
    seeds = [0] if quick else [0, 1, 2]
    results = {"machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                           "platform": platform.platform()},
               "storage": "journal file (the default persistent storage), fresh per run", "spaces": {}}
    with tempfile.TemporaryDirectory() as work:
        # ---- exhaustive on ~1e6 points
        big = million_point_space()
        run_exhaustive(big)  # warm-up (imports, catalog)
        t0 = time.perf_counter()
        ex = run_exhaustive(big)
        t_lib = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = run_study(big, "million", str(Path(work) / "million.journal"), sampler="exhaustive")
        t_study = time.perf_counter() - t0
        results["exhaustive_1e6"] = {"points": int(big.size), "enumerate_s": round(t_lib, 3),
                                     "run_study_s": round(t_study, 3), "points_per_s": round(big.size / t_lib),
                                     "feasible": ex.summary["feasible"], "front_size": ex.summary["front_size"]}
        print(f"exhaustive: {int(big.size):,} points in {t_lib:.2f} s (run_study with storage {t_study:.2f} s), "
              f"front {ex.summary['front_size']}", flush=True)

        plan = [
            ("codesign-70b", ["tpe", "nsga2", "nsga3", "qmc", "random", "grid", "de", "anneal", "gp", "cmaes"], 5000, 35.0),
            ("gpt3-175b-parallelism", ["tpe", "nsga2", "random", "de", "anneal", "cmaes"], 1000, 15.0),
        ]
        if quick:
            plan = [("codesign-70b", ["tpe", "nsga2", "random", "de"], 2000, 20.0)]
        for name, methods, n_max, cap in plan:
            space = load_space(ROOT / "searchspaces" / f"{name}.yaml")
            exact_pts, opt, ref = exact_reference(space, work, name)
            norm = normalize_for_hv(exact_pts, space.directions)
            entry = {"size": space.size, "objectives": space.objectives, "constraints": space.constraints,
                     "exact": ref, "exact_optimum": opt, "max_trials": n_max, "time_cap_s": cap, "runs": {}}
            print(f"\n== {name}: {int(space.size):,} points, exact front {len(exact_pts)} "
                  f"(enumerated in {ref['enumerate_s']:.2f} s), optimum {space.objectives[0]} = {opt:.6g}", flush=True)
            for method in methods:
                sp = space
                if method == "cmaes" and len(space.objectives) > 1:
                    sp = parse_space({**space.to_dict(), "objectives": [space.objectives[0]]})
                m_seeds, m_n, m_cap = seeds, n_max, cap
                if method == "gp":
                    m_seeds, m_n, m_cap = [0], 100, 120.0  # ~1 s per GP trial on 2 cores: one seed, 100 trials
                elif method == "tpe":
                    m_cap = 2.0 * cap  # ~30 trials/s: sampler-bound, give it time to pass 1000 trials
                elif method in ("qmc", "cmaes"):
                    m_cap = min(cap, 25.0)  # optuna's QMC/CMA-ES samplers are slow per trial
                runs = []
                for seed in m_seeds:
                    res, wall = run_method(sp, name, method, seed, m_n, m_cap, work)
                    if sp is space:
                        sc, _ = score(res.study, space.objectives, space.directions, norm, opt)
                    else:
                        sc, _ = score(res.study, sp.objectives, sp.directions, None, opt)
                    sc.update(seed=seed, trials_per_s=round(res.n_new / wall, 1), wall_s=round(wall, 2),
                              feasible=res.n_feasible)
                    runs.append(sc)
                    print(f"  {method:8s} seed {seed}: {sc['trials']:5d} trials {sc['trials_per_s']:7.1f}/s  "
                          f"1%: {fmt(sc['trials_to_1pct'])}  hv@200 {fmt(sc['hv@200'])} hv@1000 {fmt(sc['hv@1000'])} "
                          f"hv@5000 {fmt(sc['hv@5000'])} hv@end {fmt(sc['hv@end'])}", flush=True)
                entry["runs"][method] = runs
            results["spaces"][name] = entry

        # ---- large space: no exact front; best front any method found is the reference
        if not quick:
            name = "large-space"
            space = load_space(ROOT / "searchspaces" / f"{name}.yaml")
            entry = {"size": space.size, "objectives": space.objectives, "reference": "union of the methods' fronts",
                     "max_trials": 3000, "time_cap_s": 40.0, "runs": {}}
            fronts, studies = [], {}
            print(f"\n== {name}: {space.size:.3g} points (no exact front)", flush=True)
            for method in ["tpe", "nsga2", "random", "de"]:
                res, wall = run_method(space, name, method, 0, 3000, 40.0, work)
                vals, pos, n = trial_table(res.study, space.objectives)
                studies[method] = (res, wall, vals, pos, n)
                if len(vals):
                    fronts.append(vals)
            union = np.concatenate(fronts) if fronts else np.zeros((0, 2))
            norm = normalize_for_hv(union, space.directions) if len(union) else None
            best_primary = float(union[:, 0].min()) if len(union) else None
            for method, (res, wall, vals, pos, n) in studies.items():
                sc, _ = score(res.study, space.objectives, space.directions, norm, best_primary)
                sc.update(seed=0, trials_per_s=round(res.n_new / wall, 1), wall_s=round(wall, 2), feasible=res.n_feasible)
                entry["runs"][method] = [sc]
                print(f"  {method:8s}: {sc['trials']:5d} trials {sc['trials_per_s']:7.1f}/s  1% of best known: "
                      f"{fmt(sc['trials_to_1pct'])}  hv@1000 {fmt(sc['hv@1000'])} hv@end {fmt(sc['hv@end'])}", flush=True)
            results["spaces"][name] = entry

    # ---- summary table
    print("\nmethod summary (median over seeds)")
    print(f"{'space':24s} {'method':8s} {'trials/s':>9s} {'to 1%':>7s} {'hv@200':>7s} {'hv@1000':>8s} {'hv@5000':>8s}")
    for name, entry in results["spaces"].items():
        entry["median"] = {}
        for method, runs in entry["runs"].items():
            def med(key):
                v = [r[key] for r in runs if r.get(key) is not None]
                return float(np.median(v)) if v else None
            row = {k: med(k) for k in ("trials_per_s", "trials_to_1pct", "hv@200", "hv@1000", "hv@5000", "hv@end")}
            row["reached_1pct"] = f"{sum(r['trials_to_1pct'] is not None for r in runs)}/{len(runs)}"
            entry["median"][method] = row
            print(f"{name:24s} {method:8s} {fmt(row['trials_per_s'], '.0f'):>9s} {fmt(row['trials_to_1pct'], '.0f'):>7s} "
                  f"{fmt(row['hv@200']):>7s} {fmt(row['hv@1000']):>8s} {fmt(row['hv@5000']):>8s}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o)))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
