"""Fault injection on cosearch's storages (issue 12): kills, cut and corrupt journals, races.

Cases (each printed with its outcome, all saved to ``experiments/results/bench_faults.json``):

* ``kill-run``: ``cosearch run`` SIGKILLed at a random moment (journal, SQLite, PostgreSQL if
  ``scripts/postgres.sh`` starts), then resumed to completion;
* ``kill-worker``: one worker of ``run --workers 2`` SIGKILLed, the run resumed to completion;
* ``kill-lock``: a process SIGKILLed while it holds the journal lock, then another writer;
* ``cut-journal`` / ``corrupt-journal``: a last line cut mid-write / a garbage line;
* ``read-only``: read-only commands on a missing storage; a write to a read-only journal;
* ``fresh-sqlite``: three ``run --workers 2`` at once on a fresh ``sqlite:///`` file.

Checked after every case: no finished (COMPLETE) trial lost or changed, trial numbers unique and
gap-free (nothing duplicated), no stall over 2 s when opening the storage or taking the lock,
and every failure a single ``error:`` line without a traceback.

    python experiments/bench_faults.py [--kills 1] [--seed 0] [--no-pg]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
import yaml  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

SPACE = {
    "model": "gpt3-175b",
    "training": {"global_batch": 1536, "tokens": 3.0e11, "precision": "bf16"},
    "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [512, 1024]},
    "plan": {"tp": [2, 4, 8], "pp": [4, 8, 16], "microbatch": [1, 2], "recompute": ["none", "selective", "full"],
             "zero": [0, 1]},
    "objectives": ["time_to_train_days", "cost_to_train_usd"],
    "constraints": {"max_cost_usd": 1.2e6},
}
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
STALL_S = 2.0
RESULTS: list[dict] = []


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cosearch", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def one_line_failure(p: subprocess.CompletedProcess) -> bool:
    """A failed command printed one ``error:`` line and no traceback."""
    if p.returncode == 0:
        return True
    errs = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    return "Traceback" not in p.stderr and len(errs) == 1


def open_time(url: str) -> float:
    from cosearch.storages import resolve_storage

    t0 = time.perf_counter()
    st = resolve_storage(url)
    st.get_all_studies()
    return time.perf_counter() - t0


def snapshot(url: str, name: str) -> dict[int, tuple]:
    from cosearch.storages import resolve_storage

    st = resolve_storage(url)
    if name not in [s.study_name for s in st.get_all_studies()]:
        return {}
    study = optuna.load_study(study_name=name, storage=st)
    return {t.number: (t.state, tuple(sorted(t.params.items())), t.values) for t in study.get_trials(deepcopy=False)}


def check(before: dict[int, tuple], after: dict[int, tuple]) -> tuple[bool, bool]:
    """(no finished trial lost or changed, numbers unique and gap-free)."""
    lost = [n for n, v in before.items() if v[0] == TrialState.COMPLETE and after.get(n) != v]
    return not lost, sorted(after) == list(range(len(after)))


def record(case: str, storage: str, ok: bool, detail: str, **extra) -> None:
    row = {"case": case, "storage": storage, "ok": bool(ok), "detail": detail, **extra}
    RESULTS.append(row)
    print(f"{case:16s} {storage:10s} {'ok  ' if ok else 'FAIL'} {detail}", flush=True)


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# ------------------------------------------------------------------------------------------ cases
def kill_run(kind: str, url: str, work: Path, rng: random.Random, i: int, workers: int = 1) -> None:
    name = f"k{workers}-{kind}-{i}"
    n = 1500 if kind == "journal" else 500
    args = ["run", "space.yaml", "--study", name, "--storage", url, "--sampler", "random", "--trials", str(n),
            "--batch-size", "25", "--seed", str(i)]
    if workers > 1:
        args += ["--workers", str(workers)]
    p = subprocess.Popen([sys.executable, "-m", "cosearch", *args], cwd=work, env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t_start = time.perf_counter()
    victim = p.pid
    if workers > 1:  # wait for the workers, then kill one of them at a random moment
        kids: list[int] = []
        while not kids and p.poll() is None and time.perf_counter() - t_start < 30:
            time.sleep(0.05)
            kids = children(p.pid)
        time.sleep(rng.uniform(0.3, 1.5))
        victim = rng.choice(kids) if kids else p.pid
    elif kind == "journal":  # the journal runs fast: kill within a run that is storing trials
        path = Path(url)
        while p.poll() is None and (not path.exists() or path.stat().st_size < 20_000) \
                and time.perf_counter() - t_start < 30:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.4))
    elif kind == "sqlite":
        path = Path(url.split("///", 1)[1])
        while p.poll() is None and not path.exists() and time.perf_counter() - t_start < 30:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.5, 2.5))
    else:
        time.sleep(rng.uniform(3.0, 5.0))
    delay = time.perf_counter() - t_start
    try:
        os.kill(victim, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        _, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    t_open = open_time(url)
    before = snapshot(url, name)
    t0 = time.perf_counter()
    res = cli(*args, cwd=work, timeout=300)
    resume_s = time.perf_counter() - t0
    after = snapshot(url, name)
    kept, unique = check(before, after)
    done = sum(1 for v in after.values() if v[0] in (TrialState.COMPLETE, TrialState.FAIL))
    ok = kept and unique and res.returncode == 0 and t_open < STALL_S and one_line_failure(res) and done >= n
    case = "kill-worker" if workers > 1 else "kill-run"
    who = "worker" if victim != p.pid else "run"
    record(case, kind, ok, f"{who} killed at {delay:.1f} s; {len(before)} trials stored after; open {t_open:.2f} s; "
           f"resume rc {res.returncode} in {resume_s:.1f} s -> {len(after)} trials; finished kept {kept}, "
           f"numbers unique {unique}" + ("" if res.returncode == 0 else f"; {res.stderr.strip().splitlines()[-1][:120]}"),
           open_s=round(t_open, 3), stored_at_kill=len(before), trials=len(after))


def kill_lock(work: Path) -> None:
    from cosearch.storages._storage import JournalLock

    path = work / "lock.journal"
    path.touch()
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from cosearch.storages._storage import JournalLock\n"
            f"JournalLock({str(path)!r}).acquire(); print('held', flush=True)\nimport time; time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    t0 = time.perf_counter()
    lock = JournalLock(str(path))
    lock.acquire()
    took = time.perf_counter() - t0
    lock.release()
    record("kill-lock", "journal", took < STALL_S, f"lock of a SIGKILLed holder taken in {took:.3f} s",
           wait_s=round(took, 4))


def cut_journal(work: Path) -> None:
    url = str(work / "cut.journal")
    res = cli("run", "space.yaml", "--study", "c", "--storage", url, "--sampler", "random", "--trials", "100",
              cwd=work)
    before = snapshot(url, "c")
    with open(url, "ab") as f:
        f.write(b'{"op_code":5,"worker_id":"x","trial_id":3,"state":1,"val')  # a write cut by a crash
    t_open = open_time(url)
    res = cli("run", "space.yaml", "--study", "c", "--storage", url, "--sampler", "random", "--trials", "200",
              cwd=work)
    after = snapshot(url, "c")
    kept, unique = check(before, after)
    warned = "partial line" in res.stderr and sum("partial line" in ln for ln in res.stderr.splitlines()) == 1
    again = cli("best", "--study", "c", "--storage", url, cwd=work)
    ok = res.returncode == 0 and again.returncode == 0 and kept and unique and warned and len(after) == 200
    record("cut-journal", "journal", ok, f"open {t_open:.2f} s; resume rc {res.returncode}, one-line warning {warned}; "
           f"{len(before)} -> {len(after)} trials; later `best` rc {again.returncode}")


def corrupt_journal(work: Path) -> None:
    url = work / "bad.journal"
    url.write_bytes(b'{"op_code":0,"worker_id":"x","study_name":"a","directions":[1]}\nnot json at all\n')
    res = cli("studies", "--storage", str(url), cwd=work)
    ok = res.returncode == 2 and one_line_failure(res) and "corrupt" in res.stderr
    record("corrupt-journal", "journal", ok, f"`studies` rc {res.returncode}: {res.stderr.strip()[:110]}")


def read_only(work: Path) -> None:
    d = work / "ro"
    d.mkdir()
    bad = []
    for storage in ("missing.journal", "sqlite:///missing.db"):
        for cmd in (["best", "--study", "s"], ["pareto", "--study", "s"], ["studies"]):
            res = cli(*cmd, "--storage", storage, cwd=d)
            if res.returncode != 2 or not one_line_failure(res):
                bad.append(f"{cmd[0]} {storage}: rc {res.returncode}")
    created = sorted(p.name for p in d.iterdir())
    record("read-only", "missing", not bad and not created,
           f"6 read-only commands on missing storage: {'all one-line errors' if not bad else bad}; files created: {created}")
    # a journal the user cannot write (a read-only bind is not available: chmod, unless root)
    url = work / "ro.journal"
    cli("run", "space.yaml", "--study", "r", "--storage", str(url), "--sampler", "random", "--trials", "20", cwd=work)
    os.chmod(url, 0o444)
    try:
        best = cli("best", "--study", "r", "--storage", str(url), cwd=work)
        run = cli("run", "space.yaml", "--study", "r", "--storage", str(url), "--sampler", "random", "--trials", "40",
                  cwd=work)
    finally:
        os.chmod(url, 0o644)
    root = os.geteuid() == 0
    ok = best.returncode == 0 and one_line_failure(run)
    record("read-only", "journal", ok, f"`best` on a read-only journal rc {best.returncode}; `run` rc {run.returncode}"
           + (" (root ignores file modes)" if root else f", one-line failure {one_line_failure(run)}"))


def fresh_sqlite(work: Path) -> None:
    url = f"sqlite:///{work}/fresh.db"
    procs = [subprocess.Popen([sys.executable, "-m", "cosearch", "run", "space.yaml", "--study", f"f{i}", "--storage",
                               url, "--sampler", "random", "--trials", "60", "--workers", "2"], cwd=work, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = [c for c, _ in outs]
    alembic = sum("alembic_version" in e for _, e in outs)
    counts = [len(snapshot(url, f"f{i}")) for i in range(3)]
    ok = codes == [0, 0, 0] and not alembic and all(c >= 60 for c in counts)
    record("fresh-sqlite", "sqlite", ok, f"3 x `run --workers 2` at once: exit codes {codes}, alembic errors {alembic}, "
           f"trials {counts}")


def start_pg(work: Path) -> tuple[str | None, dict]:
    # its own directory under /tmp (the server's user cannot enter the bench's private temp dir)
    env = dict(os.environ, COSEARCH_PG_DIR=f"/tmp/cosearch-pg-faults-{os.getpid()}", COSEARCH_PG_DURABLE="0")
    try:
        r = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start"], env=env, capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, env
    if r.returncode != 0:
        return None, env
    return r.stdout.strip().splitlines()[-1], env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=1, help="random SIGKILLs of single runs per storage (default 1; one worker kill per storage is always added)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cosearch-faults-") as tmp:
        work = Path(tmp)
        (work / "space.yaml").write_text(yaml.safe_dump(SPACE))
        stores = {"journal": str(work / "k.journal"), "sqlite": f"sqlite:///{work}/k.db"}
        pg_env = None
        if not args.no_pg:
            pg, pg_env = start_pg(work)
            if pg:
                stores["postgresql"] = pg
            else:
                record("kill-run", "postgresql", True, "skipped: scripts/postgres.sh did not start a server")
        try:
            kill_lock(work)
            cut_journal(work)
            corrupt_journal(work)
            read_only(work)
            fresh_sqlite(work)
            for kind, url in stores.items():
                for i in range(args.kills):
                    kill_run(kind, url, work, rng, i)
                kill_run(kind, url, work, rng, 100, workers=2)
        finally:
            if pg_env is not None and "postgresql" in stores:
                subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop"], env=pg_env,
                               capture_output=True, timeout=60)
    elapsed = time.perf_counter() - t0
    failed = [r for r in RESULTS if not r["ok"]]
    print(f"{len(RESULTS)} cases, {len(failed)} failed, {elapsed:.0f} s")
    out = ROOT / "experiments" / "results" / "bench_faults.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"optuna": optuna.__version__, "cases": RESULTS, "elapsed_s": round(elapsed, 1),
                               "kills_per_storage": args.kills, "seed": args.seed}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
