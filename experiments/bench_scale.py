"""Scale-out throughput: trials/s versus workers and storage, and sweep points/s versus dask workers.

Sampled studies: ``cosearch worker`` processes (the real path: shared budget, batched writes) on
one study of a 6,480-point space, 1, 2 and 4 workers, on PostgreSQL (loopback, started through
scripts/postgres.sh with default durability: fsync and synchronous commit on) and on the
embedded journal file (append + fsync per batch). Two rates per run: ``wall`` (first process
spawned to last exit, so it includes Python/optuna start-up of every worker) and ``steady``
(first trial started to last trial finished, the rate once the workers are up).

Exhaustive sweeps: the 1,179,648-point space of tests/test_scale_out.py, single process
(the exhaustive sampler's ``run_exhaustive``) versus ``dask_sweep`` on a LocalCluster of 1, 2, 4
worker processes; start-up of the cluster is reported apart from the sweep.

Prints a table and saves experiments/results/bench_scale.json. The machine's load average is
recorded too: on a shared 2-core machine other processes move these numbers.
Environment: BENCH_TRIALS_RANDOM / BENCH_TRIALS_TPE (default 400 / 200), BENCH_WORKERS (default
"1,2,4"), BENCH_SAMPLERS (default "random,tpe"), BENCH_SKIP (comma list of "pg", "journal",
"sweep"), BENCH_SWEEP_BIG=1 (8 global batch sizes: a 9.4-million-point sweep), BENCH_OUT (JSON path).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)

WORKERS = [int(x) for x in os.environ.get("BENCH_WORKERS", "1,2,4").split(",")]
SAMPLERS = os.environ.get("BENCH_SAMPLERS", "random,tpe").split(",")
SKIP = set(filter(None, os.environ.get("BENCH_SKIP", "").split(",")))
TRIALS = {"random": int(os.environ.get("BENCH_TRIALS_RANDOM", 400)), "tpe": int(os.environ.get("BENCH_TRIALS_TPE", 200))}
SWEEP_BIG = os.environ.get("BENCH_SWEEP_BIG") == "1"
BATCH = 16


def _test_spaces() -> tuple[str, str]:
    src = (ROOT / "tests" / "test_scale_out.py").read_text()
    ns: dict[str, Any] = {}
    for name in ("SPACE_1M", "SPACE_SMALL"):
        start = src.index(f"{name} = textwrap.dedent(")
        end = src.index('"""\n)', start) + 5
        exec(src[start:end], {"textwrap": textwrap}, ns)
    return ns["SPACE_SMALL"], ns["SPACE_1M"]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_workers(space: Path, storage: str | None, workdir: Path, sampler: str, n_workers: int, trials: int,
                name: str) -> dict[str, Any]:
    from cosearch.storages import resolve_storage

    argv = [sys.executable, "-m", "cosearch", "worker", str(space), "--study", name, "--trials", str(trials),
            "--sampler", sampler, "--batch-size", str(BATCH), "--quiet"]
    if storage:
        argv += ["--storage", storage]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv + ["--seed", "0", "--worker-index", str(i)], cwd=workdir, env=_env(),
                              stderr=subprocess.PIPE, text=True) for i in range(n_workers)]
    errs = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError(f"worker failed: {errs}")
    study = optuna.load_study(study_name=name, storage=resolve_storage(storage, workdir=workdir))
    trials_ = study.get_trials(deepcopy=False)
    done = [t for t in trials_ if t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and "metrics" in t.user_attrs)]
    assert len(done) == trials, (len(done), trials)
    starts = [t.datetime_start for t in done if t.datetime_start]
    ends = [t.datetime_complete for t in done if t.datetime_complete]
    steady = (max(ends) - min(starts)).total_seconds()
    return {"sampler": sampler, "workers": n_workers, "trials": trials, "wall_s": round(wall, 2),
            "steady_s": round(steady, 2), "trials_per_s_wall": round(trials / wall, 1),
            "trials_per_s_steady": round(trials / steady, 1) if steady > 0 else None,
            "n_studies_trials": len(trials_)}


def bench_trials(space_text: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        space = work / "space.yaml"
        space.write_text(space_text)
        storages: list[tuple[str, str | None]] = []
        pg_env = dict(os.environ, COSEARCH_PG_DIR=str(Path(tempfile.gettempdir()) / f"cosearch-pg-bench-{os.getpid()}"))
        pg_started = False
        if "journal" not in SKIP:
            storages.append(("journal", None))
        if "pg" not in SKIP:
            res = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start"], env=pg_env,
                                 capture_output=True, text=True)
            if res.returncode == 0:
                storages.append(("postgresql", res.stdout.strip().splitlines()[-1]))
                pg_started = True
            else:
                print(f"PostgreSQL unavailable, skipped: {res.stderr.strip()[-300:]}", file=sys.stderr)
        try:
            for label, url in storages:
                for sampler in SAMPLERS:
                    for n in WORKERS:
                        name = f"{sampler}-{n}-{time.monotonic_ns()}"
                        load0 = _load()
                        r = run_workers(space, url, work, sampler, n, TRIALS[sampler], name)
                        r.update(storage=label, load_before=load0, load_after=_load())
                        rows.append(r)
                        print(f"  {label:10s} {sampler:6s} {n} workers: {r['trials_per_s_wall']:7.1f} trials/s wall, "
                              f"{r['trials_per_s_steady']:7.1f} steady  (load {load0[0]})", flush=True)
        finally:
            if pg_started:
                subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop"], env=pg_env, capture_output=True)
    return rows


def bench_sweep(space_text: str) -> list[dict[str, Any]]:
    from cosearch.distributed import dask_sweep
    from cosearch.samplers import run_exhaustive
    from cosearch.search.space import parse_space

    import yaml

    data = yaml.safe_load(space_text)
    if SWEEP_BIG:
        data["training"]["global_batch"] = [512, 768, 1024, 1536, 2048, 3072, 4096, 6144]
    space = parse_space(data)
    rows = []
    run_exhaustive(space)  # warm caches (catalog, presets) so the single-process number is fair
    load0 = _load()
    t0 = time.perf_counter()
    ref = run_exhaustive(space)
    t = time.perf_counter() - t0
    rows.append({"backend": "single process", "workers": 1, "points": ref.summary["points"], "total_s": round(t, 2),
                 "setup_s": 0.0, "sweep_s": round(t, 2), "points_per_s": round(ref.summary["points"] / t),
                 "sweep_points_per_s": round(ref.summary["points"] / t), "front": ref.summary["front_size"],
                 "load_before": load0})
    print(f"  single process: {rows[-1]['points_per_s']:,} points/s", flush=True)
    for n in WORKERS:
        load0 = _load()
        res = dask_sweep(space, f"local:{n}")
        same = res.to_exhaustive(space).rows.tolist() == ref.rows.tolist()
        rows.append({"backend": "dask LocalCluster", "workers": n, "points": res.counts["points"],
                     "total_s": round(res.seconds, 2), "setup_s": round(res.setup_seconds, 2),
                     "sweep_s": round(res.seconds - res.setup_seconds, 2), "points_per_s": round(res.configs_per_s),
                     "sweep_points_per_s": round(res.sweep_configs_per_s), "front": int(res.index.size),
                     "tasks": res.tasks, "equal_to_single_process": same, "load_before": load0})
        print(f"  dask {n} workers: {rows[-1]['sweep_points_per_s']:,} points/s once up "
              f"({res.setup_seconds:.1f} s start-up), equal: {same}", flush=True)
    return rows


def main() -> None:
    small, big = _test_spaces()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                       "label": os.environ.get("BENCH_MACHINE", platform.node()),
                                       "optuna": optuna.__version__, "load_at_start": _load()},
                           "batch_size": BATCH}
    if not {"pg", "journal"} <= SKIP:
        print("sampled studies (cosearch worker processes on one study):", flush=True)
        out["trials"] = bench_trials(small)
    if "sweep" not in SKIP:
        print(f"exhaustive sweep of {(8 if SWEEP_BIG else 1) * 1179648:,} points:", flush=True)
        out["sweep"] = bench_sweep(big)
    out["machine"]["load_at_end"] = _load()
    print()
    if out.get("trials"):
        print(f"{'storage':10s} {'sampler':7s} {'workers':>7s} {'trials/s wall':>14s} {'trials/s steady':>16s}")
        for r in out["trials"]:
            print(f"{r['storage']:10s} {r['sampler']:7s} {r['workers']:7d} {r['trials_per_s_wall']:14.1f} "
                  f"{r['trials_per_s_steady']:16.1f}")
    if out.get("sweep"):
        print(f"\n{'sweep':18s} {'workers':>7s} {'start-up s':>10s} {'sweep s':>8s} {'points/s once up':>17s} {'points/s total':>15s}")
        for r in out["sweep"]:
            print(f"{r['backend']:18s} {r['workers']:7d} {r['setup_s']:10.2f} {r['sweep_s']:8.2f} "
                  f"{r['sweep_points_per_s']:17,d} {r['points_per_s']:15,d}")
    dest = Path(os.environ.get("BENCH_OUT") or HERE / "results" / "bench_scale.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nsaved {dest}")


if __name__ == "__main__":
    main()
