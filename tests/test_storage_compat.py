"""Compatibility guard for the storage formats cosearch writes by hand (issue 12).

A batch written through cosearch's fast paths (journal append, RDB batch) must read back through
optuna's own public API exactly as cosearch reads it, and trials written through optuna's API
must be continued by the fast paths without clashing, for journal, SQLite and PostgreSQL.
"""
from __future__ import annotations

import os
import time

import optuna
import pytest
from optuna.trial import TrialState

from cosearch import _trials
from cosearch.samplers._codec import ParamCodec
from cosearch.search.space import load_space
from cosearch.storages import resolve_storage
from cosearch.storages._compat import check_optuna, optuna_tested
from cosearch.study import run_study
from cosearch.errors import CosearchError

from test_search_cli import write_space


def _public(url: str):
    """The same storage opened with optuna's public API only."""
    if "://" in url:
        return optuna.storages.RDBStorage(url.replace("postgresql://", "postgresql+psycopg2://", 1))
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url))


def _snapshot(study: optuna.Study):
    return sorted((t.number, t.state, t.params, t.values, t.user_attrs,
                   {k: v for k, v in t.system_attrs.items() if k.startswith("constraints")},
                   tuple(sorted(t.distributions))) for t in study.get_trials(deepcopy=False))


@pytest.fixture(params=["journal", "sqlite", "postgresql"])
def storage_url(request, tmp_path):
    if request.param == "journal":
        return str(tmp_path / "c.journal")
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/c.db"
    return request.getfixturevalue("pg_url")


def test_fast_path_roundtrip_with_optuna_public_api(tmp_path, storage_url, monkeypatch):
    used = []
    orig = _trials.TrialWriter.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        used.append(self.fast or self.rdb)

    monkeypatch.setattr(_trials.TrialWriter, "__init__", spy)
    sp = write_space(tmp_path)
    name = f"compat-{os.getpid()}-{time.monotonic_ns()}"
    space = load_space(sp)
    codec = ParamCodec(space)
    run_study(sp, name, storage_url, sampler="random", n_trials=10, seed=1, batch_size=10)
    # optuna's public API writes into the same study (the reverse direction) ...
    public = optuna.load_study(study_name=name, storage=_public(storage_url))
    for _ in range(2):
        t = public.ask(dict(codec.distributions))
        public.tell(t, state=TrialState.FAIL)
    # ... and cosearch's fast path continues after it
    res = run_study(sp, name, storage_url, sampler="random", n_trials=30, seed=1, batch_size=10)
    assert used and all(used)  # the hand-written path was taken
    ours = res.study
    theirs = optuna.load_study(study_name=name, storage=_public(storage_url))
    assert _snapshot(ours) == _snapshot(theirs)
    numbers = [t.number for t in theirs.trials]
    assert sorted(numbers) == list(range(len(numbers)))  # unique, gap-free with mixed writers
    done = [t for t in theirs.trials if t.state == TrialState.COMPLETE]
    assert done and all(set(t.params) == set(codec.distributions) for t in done)
    for t in done:
        for k, v in t.params.items():
            assert t.distributions[k]._contains(t.distributions[k].to_internal_repr(v))
    # and optuna's public API can keep writing after the fast path
    t = theirs.ask(dict(codec.distributions))
    theirs.tell(t, state=TrialState.FAIL)
    again = optuna.load_study(study_name=name, storage=resolve_storage(storage_url))
    assert len(again.trials) == len(numbers) + 1
    assert again.trials[-1].number == len(numbers)


def test_untested_optuna_is_refused_in_one_line(monkeypatch):
    assert optuna_tested()  # the installed optuna is the tested one
    assert not optuna_tested("5.1.0") and not optuna_tested("4.9") and optuna_tested("5.0.3")
    monkeypatch.delenv("COSEARCH_ALLOW_UNTESTED_OPTUNA", raising=False)
    with pytest.raises(CosearchError) as err:
        check_optuna("5.1.0")
    assert "untested" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv("COSEARCH_ALLOW_UNTESTED_OPTUNA", "1")
    check_optuna("5.1.0")  # override: public API only
