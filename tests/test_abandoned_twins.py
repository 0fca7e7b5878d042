"""A FAIL trial marked abandoned (``ABANDONED_ATTR``, failed as stale after a cut write left its metrics) is no
evaluated trial. ``failed_with_result`` says so; these are the places that kept the old rule (every FAIL with
metrics counts) after it changed. Each test failed before its fix."""
from __future__ import annotations

import copy

import optuna
from optuna.trial import TrialState, create_trial

from _studies import make_study
from cosearch.storages import ABANDONED_ATTR, resolve_storage
from cosearch.storages._scaleout import TrialBudget, _rdb_counts

METRICS = {"time_to_train_days": 1.0, "cost_to_train_usd": 2.0}


def _add_mixed_trials(study: optuna.Study) -> None:
    """Each kind of finished and unfinished trial TrialBudget.counts tells apart."""
    study.add_trials([
        create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs={"metrics": METRICS}),
        create_trial(state=TrialState.COMPLETE, values=[2.0], user_attrs={"metrics": METRICS}),
        create_trial(state=TrialState.FAIL, user_attrs={"metrics": METRICS}),  # evaluated, no finite objective
        create_trial(state=TrialState.FAIL, user_attrs={"metrics": METRICS},  # mark present but false: counts
                     system_attrs={ABANDONED_ATTR: False}),
        create_trial(state=TrialState.FAIL, user_attrs={"metrics": METRICS},  # cut write, failed as stale
                     system_attrs={ABANDONED_ATTR: True}),
        create_trial(state=TrialState.FAIL, user_attrs={"metrics": METRICS},
                     system_attrs={ABANDONED_ATTR: True}),
        create_trial(state=TrialState.FAIL),  # crashed worker
        create_trial(state=TrialState.RUNNING),
    ])


def test_rdb_counts_skip_abandoned_trials_like_the_python_count(tmp_path):
    """``_rdb_counts`` promised "the same counts" as TrialBudget.counts but counted every FAIL trial with metrics,
    abandoned ones included: on SQLite/PostgreSQL a worker saw the budget used up and the run stopped short."""
    sqlite = resolve_storage(f"sqlite:///{tmp_path / 's.db'}")
    journal = resolve_storage(str(tmp_path / "s.journal"))
    studies = [optuna.create_study(study_name="s", storage=st) for st in (sqlite, journal)]
    for study in studies:
        _add_mixed_trials(study)
    rdb, jr = (TrialBudget(s, 10, lock=None, heartbeat=False) for s in studies)
    expected = {"running": 1, "done": 4, "failed": 3}
    assert jr.counts() == expected  # the Python path (journal storages)
    assert _rdb_counts(sqlite, rdb.study_id) == expected  # called directly: counts() falls back on a query error
    assert rdb.counts() == expected


def test_report_leaves_out_abandoned_trials():
    """``study_data`` took COMPLETE or FAIL-with-metrics trials (the old rule), so the report plotted an abandoned
    trial beside the trial that redid it."""
    study = make_study(None, "abandoned", n_trials=6, seed=1)
    done = study.get_trials(deepcopy=False)
    attrs = copy.deepcopy(done[0].user_attrs)
    study.add_trials([
        create_trial(state=TrialState.FAIL, user_attrs=attrs, system_attrs={ABANDONED_ATTR: True}),
        create_trial(state=TrialState.FAIL, user_attrs=attrs),  # a FAIL with metrics, not abandoned: kept
    ])
    abandoned, kept = (t.number for t in study.get_trials(deepcopy=False)[-2:])
    from cosearch.visualization import study_data

    numbers = list(study_data(study).trials["trial"])
    assert abandoned not in numbers
    assert numbers == [t.number for t in done] + [kept]
