"""Small cosearch studies written with plain optuna calls in the study contract of cosearch.study
(user_attrs scenario/metrics/feasible per trial, user_attrs["cosearch"] per study), for the
report, dashboard and browser tests."""
from __future__ import annotations

import copy
import math

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from cosearch.model import evaluate
from cosearch.scenario import parse_scenario, scenario_columns

BASE = {
    "model": "gpt3-175b",
    "training": {"global_batch": 1536, "precision": "bf16", "tokens": 3.0e11},
    "cluster": {"gpu": "a100-80gb", "gpus": 1024},
    "plan": {"tp": 8, "pp": 16, "microbatch": 1, "interleave": 1, "recompute": "full", "sequence_parallel": True, "zero": 1},
}
CHOICES = {
    "cluster.gpu": ["a100-80gb", "h100-sxm"],
    "cluster.gpus": [256, 512, 1024, 2048],
    "plan.tp": [1, 2, 4, 8],
    "plan.pp": [1, 2, 4, 8, 16],
    "plan.microbatch": [1, 2, 4],
    "plan.recompute": ["none", "selective", "full"],
    "plan.sequence_parallel": [False, True],
    "plan.zero": [0, 1, 2, 3],
}
OBJECTIVES = ["time_to_train_days", "cost_to_train_usd"]
MAXIMIZE = {"mfu", "tokens_per_s"}


def _param(name, choices):
    if isinstance(choices[0], (str, bool)):
        return name, CategoricalDistribution(choices)
    if name == "plan.zero":
        return name, IntDistribution(0, 3)
    return f"{name}:index", IntDistribution(0, len(choices) - 1)


def make_study(storage, name: str, n_trials: int = 80, objectives=OBJECTIVES, seed: int = 0, kind: str = "sampled",
               constraints: dict | None = None) -> optuna.Study:
    """A study of ``n_trials`` random GPT-3 plans (an exhaustive-style one keeps only its front,
    without parameters, like ``cosearch run --sampler exhaustive``)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = np.random.default_rng(seed)
    directions = ["maximize" if o in MAXIMIZE else "minimize" for o in objectives]
    study = optuna.create_study(study_name=name, storage=storage, directions=directions)
    scenarios, params, dists = [], [], []
    for _ in range(n_trials):
        sc = copy.deepcopy(BASE)
        p, d = {}, {}
        for path, choices in CHOICES.items():
            pick = int(rng.integers(len(choices)))
            section, key = path.split(".")
            sc[section][key] = choices[pick]
            pname, dist = _param(path, choices)
            p[pname] = choices[pick] if not pname.endswith(":index") else pick
            if pname == "plan.zero":
                p[pname] = choices[pick]
            d[pname] = dist
        scenarios.append(sc)
        params.append(p)
        dists.append(d)
    cols = [scenario_columns(parse_scenario(sc)) for sc in scenarios]
    stacked = {k: np.array([c[k] for c in cols]) for k in cols[0]}
    out = evaluate(stacked)
    trials = []
    for i, sc in enumerate(scenarios):
        metrics = {}
        for k, v in out.items():
            x = float(np.broadcast_to(v, (n_trials,))[i])
            metrics[k] = None if math.isnan(x) else x
        feasible = bool(metrics["feasible"])
        values = [metrics[o] if metrics[o] is not None and math.isfinite(metrics[o]) else 1e30 for o in objectives]
        trials.append(create_trial(
            state=TrialState.COMPLETE, params=params[i], distributions=dists[i], values=values,
            user_attrs={"scenario": parse_scenario(sc).model_dump(mode="json"), "metrics": metrics, "feasible": feasible},
            system_attrs={"constraints": [0.0 if feasible else 1.0]},
        ))
    if kind == "exhaustive":
        from cosearch.visualization._data import pareto_mask

        pts = np.array([[t.user_attrs["metrics"][o] if t.user_attrs["feasible"] else np.nan for o in objectives] for t in trials],
                       dtype=float)
        keep = pareto_mask(pts, directions)
        trials = [create_trial(state=TrialState.COMPLETE, values=t.values, user_attrs=t.user_attrs)
                  for t, k in zip(trials, keep) if k]
    study.add_trials(trials)
    study.set_user_attr("cosearch", {
        "space": {"name": "test-gpt3", **copy.deepcopy(BASE)}, "objectives": list(objectives), "directions": directions,
        "constraints": constraints or {}, "method": "exhaustive" if kind == "exhaustive" else "random", "kind": kind,
        "summary": {"points": int(np.prod([len(c) for c in CHOICES.values()])), "feasible": int(sum(bool(out["feasible"][i]) for i in range(n_trials)))},
    })
    return study


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def real_study(journal, name: str, sampler: str = "tpe", n_trials: int = 120,
               space: str = "searchspaces/codesign-70b.yaml") -> optuna.Study:
    """A study made by cosearch itself (``cosearch.study.run_study``, what ``cosearch run`` calls)."""
    from cosearch.study import run_study

    return run_study(ROOT / space, name, storage=str(journal), sampler=sampler, n_trials=n_trials, seed=0).study


_BUILT: dict = {}


def built_report() -> dict:
    """A journal-file study made by ``run_study`` (TPE on the shipped co-design space) and its report (HTML + PNGs) written once per test session through
    ``cosearch report``; shared by the report and browser tests. Keys: dir, journal, study, html,
    png_dir, plots (expected plot div ids), stdout."""
    if _BUILT:
        return _BUILT
    import atexit
    import contextlib
    import io
    import shutil
    import tempfile
    from pathlib import Path

    from cosearch.cli import main
    d = Path(tempfile.mkdtemp(prefix="cosearch-report-"))
    atexit.register(shutil.rmtree, d, True)
    journal = d / "studies.journal"
    real_study(journal, "codesign-tpe")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["report", "--study", "codesign-tpe", "--storage", str(journal), "--out", str(d / "report.html"),
                   "--png", str(d / "png")])
    assert rc == 0, buf.getvalue()
    _BUILT.update(dir=d, journal=journal, study="codesign-tpe", html=d / "report.html", png_dir=d / "png",
                  plots=["pareto-front", "time-breakdown", "memory-breakdown", "param-importance", "search-history"],
                  stdout=buf.getvalue())
    return _BUILT
