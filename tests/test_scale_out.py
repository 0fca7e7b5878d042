"""Scale-out: many workers on one study (real PostgreSQL on loopback, and the embedded journal),
and the distributed exhaustive sweep on a dask LocalCluster.

PostgreSQL comes from ``scripts/postgres.sh`` (installs the Debian packages if missing, starts a
throwaway cluster on 127.0.0.1, stops and deletes it at the end). Set ``COSEARCH_TEST_PG_URL`` to
use a server of your own instead. Outside CI a machine that cannot install PostgreSQL skips those
tests; in CI (``CI`` set) that is a failure.
"""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from conftest import random_rows
from optuna.trial import TrialState

from cosearch.distributed import dask_sweep, parse_dask_address, plan_ranges, sweep
from cosearch.errors import CosearchError
from cosearch.scaleout import TARGET_ATTR, TrialBudget, get_target, set_target, study_lock, worker_seed
from cosearch.search.space import load_space, parse_space
from cosearch.storages import OWNER_ATTR, resolve_storage

ROOT = Path(__file__).resolve().parents[1]
optuna.logging.set_verbosity(optuna.logging.WARNING)

# 2 x 8 x 4 x 4 x 4 x 6 x 4 x 2 x 3 x 2 x 4 = 1,179,648 points
SPACE_1M = textwrap.dedent(
    """
    model: gpt3-175b
    training: {global_batch: 1536, precision: bf16, tokens: 300000000000}
    cluster:
      gpu: [a100-80gb, h100-sxm]
      gpus: [256, 512, 768, 1024, 1536, 2048, 3072, 4096]
      network_gbps: [100, 200, 400, 800]
      nvlink_gbps: [300, 450, 600, 900]
    plan:
      tp: [1, 2, 4, 8]
      pp: [1, 2, 4, 8, 16, 32]
      microbatch: [1, 2, 4, 8]
      interleave: [1, 2]
      recompute: [none, selective, full]
      sequence_parallel: [true, false]
      zero: [0, 1, 2, 3]
    objectives: [time_to_train_days, cost_to_train_usd]
    constraints: {max_cost_usd: 20000000, max_gpus: 4096}
    """
)

# small sampled space for worker tests (~9k points)
SPACE_SMALL = textwrap.dedent(
    """
    model: gpt3-175b
    training: {global_batch: 1536, precision: bf16, tokens: 300000000000}
    cluster:
      gpu: a100-80gb
      gpus: [512, 1024, 2048]
      network_gbps: [100, 200, 400]
    plan:
      tp: [1, 2, 4, 8]
      pp: [1, 2, 4, 8, 16]
      microbatch: [1, 2, 4]
      recompute: [none, selective, full]
      zero: [0, 1, 2, 3]
    objectives: [time_to_train_days, cost_to_train_usd]
    constraints: {max_cost_usd: 20000000}
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _cosearch(*args: str, cwd: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cosearch", *args], cwd=cwd, env=_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(procs: list[subprocess.Popen], timeout: float = 120) -> list[tuple[int, str, str]]:
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out.append((p.returncode, so, se))
    return out


# ------------------------------------------------------------------------------------ PostgreSQL
def _fresh_study_name(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"


def _check_exact(study: optuna.Study, target: int) -> list[optuna.trial.FrozenTrial]:
    trials = study.get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials)))  # unique, no gaps: nothing lost
    evaluated = [t for t in trials if t.state == TrialState.COMPLETE or
                 (t.state == TrialState.FAIL and "metrics" in t.user_attrs)]
    assert len(evaluated) == target
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for t in evaluated:
        assert "metrics" in t.user_attrs and "scenario" in t.user_attrs
        assert OWNER_ATTR in t.system_attrs
    return evaluated


def _duplicates(trials: list[optuna.trial.FrozenTrial]) -> int:
    c = collections.Counter(tuple(sorted(t.params.items())) for t in trials)
    return sum(n - 1 for n in c.values())


def test_four_workers_on_postgres_reach_exact_count(pg_url, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_SMALL)
    name, target = _fresh_study_name("four"), 64
    procs = [_cosearch("worker", str(space), "--study", name, "--storage", pg_url, "--trials", str(target),
                       "--sampler", "random", "--seed", "7", "--worker-index", str(i), "--batch-size", "8",
                       cwd=tmp_path, COSEARCH_DEBUG_BATCH_PAUSE="0.3") for i in range(4)]
    results = _finish(procs)
    assert all(rc == 0 for rc, _, _ in results), results
    study = optuna.load_study(study_name=name, storage=resolve_storage(pg_url))
    assert study.user_attrs[TARGET_ATTR] == target
    evaluated = _check_exact(study, target)
    # distinct seeds per worker: no repeated sequences (random duplicates among 64 of ~6.5k points are rare)
    assert _duplicates(evaluated) <= 3
    owners = collections.Counter(t.system_attrs[OWNER_ATTR]["pid"] for t in evaluated)
    assert len(owners) >= 2, owners  # the work was shared


def test_sigkilled_worker_does_not_stop_the_study(pg_url, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_SMALL)
    name, target = _fresh_study_name("kill"), 40
    common = ["worker", str(space), "--study", name, "--storage", pg_url, "--trials", str(target),
              "--sampler", "random", "--batch-size", "8"]
    # the victim writes its first batch as RUNNING, then sleeps inside it (test hook)
    victim = _cosearch(*common, "--seed", "1", cwd=tmp_path, COSEARCH_DEBUG_BATCH_PAUSE="60")
    storage = resolve_storage(pg_url)
    held: list[int] = []
    deadline = time.monotonic() + 60
    while not held and time.monotonic() < deadline and victim.poll() is None:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
            held = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                    if t.system_attrs.get(OWNER_ATTR, {}).get("pid") == victim.pid]
        except KeyError:
            pass
        time.sleep(0.2)
    assert held, f"victim never held a running trial: {_finish([victim], 5)}"
    others = [_cosearch(*common, "--seed", str(10 + i), cwd=tmp_path) for i in range(2)]
    time.sleep(1.0)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    results = _finish(others)
    assert all(rc == 0 for rc, _, _ in results), results
    study = optuna.load_study(study_name=name, storage=storage)
    _check_exact(study, target)
    trials = study.get_trials(deepcopy=False)
    victims = [t for t in trials if t.system_attrs.get(OWNER_ATTR, {}).get("pid") == victim.pid]
    assert set(held) <= {t.number for t in victims}
    assert all(t.state == TrialState.FAIL and "metrics" not in t.user_attrs for t in victims)  # failed as stale
    assert len(trials) == target + len(victims)  # ... and replaced; nothing else failed or went missing


def test_budget_counts_and_lock_on_postgres(pg_url):
    """TrialBudget alone: grants never exceed the target; counts see other writers' trials."""
    storage = resolve_storage(pg_url)
    name = _fresh_study_name("budget")
    study = optuna.create_study(study_name=name, storage=storage, directions=["minimize"])
    set_target(study, 5)
    assert get_target(optuna.load_study(study_name=name, storage=storage)) == 5
    budget = TrialBudget(study, 5, study_lock(pg_url, name))
    try:
        with budget.slots(3) as n:
            assert n == 3
            ids = [storage.create_new_trial(study._study_id) for _ in range(n)]
        budget.track(ids)
        with budget.slots(8) as n:
            assert n == 2  # 3 running count against the target
        assert budget.counts() == {"running": 3, "done": 0, "failed": 0}
        for tid in ids[:2]:
            storage.set_trial_user_attr(tid, "metrics", {})
            storage.set_trial_state_values(tid, TrialState.FAIL)  # evaluated, objectives not finite
        storage.set_trial_state_values(ids[2], TrialState.FAIL)  # crashed: replaced
        assert budget.counts() == {"running": 0, "done": 2, "failed": 1}
        with budget.slots(8) as n:
            assert n == 3
        assert not budget.done()
    finally:
        budget.close()


# ------------------------------------------------------------------------------------ journal
def test_two_workers_on_embedded_journal_reach_exact_count(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_SMALL)
    target = 120
    # a short pause per batch keeps the first worker from finishing before the second has started
    [(rc, so, se)] = _finish([_cosearch("run", str(space), "--study", "j", "--trials", str(target), "--sampler", "tpe",
                                        "--workers", "2", "--seed", "3", cwd=tmp_path, COSEARCH_DEBUG_BATCH_PAUSE="0.1")])
    assert rc == 0, se
    study = optuna.load_study(study_name="j", storage=resolve_storage(None, workdir=tmp_path))
    evaluated = _check_exact(study, target)
    owners = {t.system_attrs[OWNER_ATTR]["pid"] for t in evaluated}
    assert len(owners) == 2


def test_journal_lock_serializes_processes(tmp_path):
    """The embedded store's flock: two processes never hold it at once."""
    script = textwrap.dedent(
        """
        import sys, time
        from cosearch.scaleout import study_lock
        lock = study_lock(None, "s", workdir=sys.argv[1])
        for _ in range(20):
            with lock:
                with open(sys.argv[2], "a") as f:
                    f.write("in\\n"); f.flush(); time.sleep(0.005); f.write("out\\n")
        """
    )
    log = tmp_path / "log"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(log)], env=_env()) for _ in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    lines = log.read_text().split()
    assert lines == ["in", "out"] * 60


# ------------------------------------------------------------------------------------ dask
def test_dask_sweep_equals_single_process_on_a_million_points(tmp_path):
    path = tmp_path / "space1m.yaml"
    path.write_text(SPACE_1M)
    space = load_space(path)
    assert space.size >= 1_000_000
    dist = dask_sweep(space, "local:2")
    assert dist.backend == "dask" and dist.workers == 2 and dist.tasks > 2
    assert dist.counts["points"] == int(space.size) and dist.index.size > 0
    # the reference: the exhaustive sampler's own single-process enumeration
    from cosearch.samplers import run_exhaustive

    ref = run_exhaustive(space)
    mine = dist.to_exhaustive(space)
    assert np.array_equal(mine.rows, ref.rows)  # same points, same order (flat position)
    assert mine.front_metrics == ref.front_metrics
    for key in ("points", "valid", "fits", "within_budget", "feasible", "front_size", "objective_front_size", "best"):
        assert mine.summary[key] == ref.summary[key], key


def test_sweep_ranges_are_exact_with_duplicates():
    """Chunk boundaries never change the front, even with exact duplicate points (first wins)."""
    space = parse_space(yaml_dict(SPACE_SMALL))
    whole = sweep(space)
    assert whole.index.size > 1
    for size, sub in ((97, 40), (1000, 333), (4096, 4096)):
        part = sweep(space, task_size=size, sub_chunk=sub)
        assert part.tasks == -(-int(space.size) // size)
        assert np.array_equal(part.index, whole.index) and np.array_equal(part.points, whole.points)
        assert part.counts == whole.counts


def test_plan_ranges_and_addresses():
    assert plan_ranges(0, 4) == []
    r = plan_ranges(10, task_size=4)
    assert r == [(0, 4), (4, 8), (8, 10)]
    r = plan_ranges(1_000_000, n_tasks=8)
    assert r[0][0] == 0 and r[-1][1] == 1_000_000 and all(a[1] == b[0] for a, b in zip(r, r[1:]))
    assert parse_dask_address("local:3") == ("local", 3)
    assert parse_dask_address("10.0.0.5:8786") == ("tcp://10.0.0.5:8786", None)
    for bad in ("local:x", "local:0", ""):
        with pytest.raises(CosearchError):
            parse_dask_address(bad)
    assert worker_seed(0, 2) == 2000 and worker_seed(None, None) is None and worker_seed(5, None) == 5


def yaml_dict(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)


def test_rdb_batch_writes_what_the_public_api_writes(tmp_path):
    """cosearch.rdb_batch (one transaction per batch) stores the same trials as optuna's API."""
    from cosearch._trials import TrialWriter, build_records
    from cosearch.samplers import ParamCodec

    space = parse_space(yaml_dict(SPACE_SMALL))
    codec = ParamCodec(space)
    rows = random_rows(space, 6, seed=0)
    records = build_records(space, rows, space.evaluate_rows(rows))
    out = {}
    for mode in ("api", "batch"):
        study = optuna.create_study(study_name=mode, storage=resolve_storage(f"sqlite:///{tmp_path / 'x.db'}"),
                                    directions=space.directions)
        writer = TrialWriter(study, codec)
        assert writer.rdb
        writer.rdb = mode == "batch"
        ids = writer.create_running(rows[:3], [{"k": i} for i in range(3)], {"pid": 1})
        assert [study._storage.get_trial(i).state for i in ids] == [TrialState.RUNNING] * 3
        writer.finish(ids, records[:3])
        writer.create_finished(records[3:])
        out[mode] = study.get_trials()

    def key(t):
        attrs = {k: v for k, v in t.system_attrs.items() if k != "cosearch:batch"}
        return t.number, t.state, t.values, t.params, t.distributions, t.user_attrs, attrs

    assert [key(t) for t in out["batch"]] == [key(t) for t in out["api"]]
    assert len(out["batch"]) == 6


def test_two_plain_runs_on_one_study_share_its_trial_target(tmp_path):
    """Two `cosearch run` processes on one study each stopped when they saw N, so the study overshot by up to a
    batch each (an audit saw 3,256 for 3,000). A sampled run now takes the study's trial budget as workers do."""
    import optuna

    from cosearch._study_store import counts_as_trial

    journal = tmp_path / "s.journal"
    cmd = [sys.executable, "-m", "cosearch", "run", str(ROOT / "searchspaces" / "codesign-70b.yaml"), "--study", "d",
           "--storage", str(journal), "--sampler", "random", "--trials", "1200", "--batch-size", "100"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    from cosearch.storages import resolve_storage
    study = optuna.load_study(study_name="d", storage=resolve_storage(str(journal)))
    assert sum(counts_as_trial(t) for t in study.get_trials(deepcopy=False)) == 1200


def test_a_sampled_run_on_in_memory_sqlite_takes_no_shared_budget(capsys):
    """No other process can reach an in-memory SQLite study: the run has no budget to share (it stopped with 'in-memory
    SQLite cannot be shared by workers' once the study lock sat on the database file, 344abc8)."""
    from cosearch.cli import main

    rc = main(["run", str(ROOT / "searchspaces" / "codesign-70b.yaml"), "--study", "m", "--storage", "sqlite:///:memory:",
               "--sampler", "random", "--trials", "10"])
    assert rc == 0, capsys.readouterr().err[-2000:]



@pytest.mark.parametrize("form", ["postgresql", "postgres", "postgres+driver"])
def test_runs_and_workers_on_each_postgresql_url_form(pg_url, tmp_path, capsys, form):
    """A plain run and ``--workers 2`` on ``FORM://USER@HOST/DB`` reach the exact count. The study lock opened the
    URL with SQLAlchemy as given: a bare ``postgresql://`` (the documented form) got psycopg 3, not the installed
    psycopg2 that resolve_storage picks (ModuleNotFoundError traceback). A Heroku-style ``postgres://`` (or
    ``postgres+psycopg2://``) was refused as an unsupported scheme; every process now reads it as ``postgresql``."""
    import json

    from cosearch.cli import main

    scheme, rest = pg_url.split("://", 1)
    assert scheme.startswith("postgresql")
    driver = scheme[len("postgresql"):]  # "+psycopg2"
    url = form.replace("+driver", driver) + "://" + rest
    space = tmp_path / "space.yaml"
    space.write_text(SPACE_SMALL)
    name = _fresh_study_name(form.replace("+", "-"))
    for workers, target in (("1", 12), ("2", 24)):
        rc = main(["run", str(space), "--study", name, "--storage", url, "--sampler", "random", "--trials",
                   str(target), "--batch-size", "4", "--workers", workers])
        err = capsys.readouterr().err
        assert rc == 0, err[-2000:]
        _check_exact(optuna.load_study(study_name=name, storage=resolve_storage(pg_url)), target)
    assert main(["best", "--study", name, "--storage", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["study"] == name
