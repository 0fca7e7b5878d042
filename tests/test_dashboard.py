"""optuna-dashboard opens a cosearch study (default journal file) and serves its trials over HTTP.

Runs the documented command (docs/visualization.md) in a subprocess on 127.0.0.1 and a free port,
then reads the study through the dashboard's JSON API (routes from optuna_dashboard/_app.py:
``/api/studies`` and ``/api/studies/<study_id>``). Nothing is installed at test time: the
dashboard comes from the ``test`` extras.
"""
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from _studies import real_study
from cosearch.storages import DEFAULT_JOURNAL


def _dashboard_exe() -> str:
    local = Path(sys.executable).with_name("optuna-dashboard")
    exe = str(local) if local.exists() else shutil.which("optuna-dashboard")
    if exe is None:
        pytest.fail("optuna-dashboard is not installed; install the test extras: pip install -e '.[test]'")
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        assert r.status == 200
        return json.loads(r.read())


@pytest.fixture
def dashboard(tmp_path):
    study = real_study(tmp_path / DEFAULT_JOURNAL, "codesign-dash", sampler="random", n_trials=30)
    port = _free_port()
    proc = subprocess.Popen([_dashboard_exe(), DEFAULT_JOURNAL, "--host", "127.0.0.1", "--port", str(port)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"optuna-dashboard exited with {proc.returncode}: {proc.stdout.read()[-2000:]}")
            try:
                _get(f"{base}/api/meta", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("optuna-dashboard did not answer within 60 s")
                time.sleep(0.2)
        yield base, study
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()


def test_dashboard_serves_cosearch_trials(dashboard):
    base, study = dashboard
    summaries = _get(f"{base}/api/studies")["study_summaries"]
    match = [s for s in summaries if s["study_name"] == "codesign-dash"]
    assert len(match) == 1
    assert match[0]["directions"] == ["minimize", "minimize"]
    detail = _get(f"{base}/api/studies/{match[0]['study_id']}")
    assert detail["name"] == "codesign-dash"
    trials = detail["trials"]
    assert len(trials) == len(study.trials) == 30
    assert detail["best_trials"], "the dashboard computed no Pareto front"
    by_number = {t.number: t for t in study.trials}
    for t in trials:
        attrs = {a["key"]: a["value"] for a in t["user_attrs"]}
        assert {"scenario", "metrics", "feasible"} <= set(attrs)
        ours = by_number[t["number"]]
        # the dashboard shows dict attributes as JSON cut at 1024 characters (MAX_ATTR_LENGTH)
        assert attrs["metrics"] == json.dumps(ours.user_attrs["metrics"])[:1024]
        assert attrs["feasible"] == str(ours.user_attrs["feasible"])
        assert t["values"] == pytest.approx(ours.values)
        assert {p["name"] for p in t["params"]} == set(ours.params)
    # the CSV export carries every trial with its full attributes
    with urllib.request.urlopen(f"{base}/csv/{match[0]['study_id']}", timeout=10) as r:
        rows = list(csv.reader(io.StringIO(r.read().decode())))
    assert len(rows) == 31 and "UserAttribute metrics" in rows[0]
    # the cosearch study attributes (objectives, kind) reach the dashboard too
    user_attrs = {a["key"]: a["value"] for a in detail["user_attrs"]}
    assert "cosearch" in user_attrs and "time_to_train_days" in str(user_attrs["cosearch"])
