"""Notebook API: sweep, front, the Estimate repr, and the example notebook executes (nbclient, offline)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

import cosearch
from cosearch.errors import CosearchError
from cosearch.search.pareto import pareto_mask

ROOT = Path(__file__).resolve().parents[1]
SPACE = {"model": "gpt3-1.3b", "training": {"global_batch": 64, "tokens": 1e10},
         "cluster": {"gpu": "h100-sxm", "gpus": [8, 16]},
         "plan": {"tp": [1, 2, 4], "pp": [1, 2], "recompute": ["none", "full"]},
         "objectives": ["step_time_s", "gpus"]}


def test_sweep_has_every_point_knobs_metrics_and_feasibility():
    df = cosearch.sweep(SPACE)
    assert len(df) == 2 * 3 * 2 * 2
    assert {"cluster.gpus", "plan.tp", "plan.pp", "plan.recompute", "step_time_s", "mfu", "feasible"} <= set(df.columns)
    assert df["plan.tp"].dtype.kind == "i" and set(df["plan.recompute"]) == {"none", "full"}
    row = df.iloc[5]
    sc = {**SPACE, "cluster": {"gpu": "h100-sxm", "gpus": int(row["cluster.gpus"])},
          "plan": {"tp": int(row["plan.tp"]), "pp": int(row["plan.pp"]), "recompute": row["plan.recompute"]}}
    sc.pop("objectives")
    assert cosearch.estimate(sc)["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)


def test_sweep_refuses_large_spaces_and_suggests_run():
    with pytest.raises(CosearchError, match="cosearch run"):
        cosearch.sweep(SPACE, limit=10)


def test_front_matches_the_pareto_kernel_and_directions():
    df = cosearch.sweep(SPACE)
    f = cosearch.front(df)  # the space's objectives
    pts = np.where(df.feasible.to_numpy()[:, None], df[["step_time_s", "gpus"]].to_numpy(float), np.nan)
    assert sorted(f.index) == sorted(np.flatnonzero(pareto_mask(pts, ["min", "min"])))
    fm = cosearch.front(df, ["mfu", "gpus"])  # mfu is maximized
    assert df[df.feasible]["mfu"].max() == pytest.approx(fm["mfu"].max())
    with pytest.raises(CosearchError, match="no column 'nope'"):
        cosearch.front(df, ["nope"])


def test_front_keeps_the_fastest_plan_whose_cost_is_unknown():
    """b300 has no catalog price: its cost is missing, and the front over time and cost dropped it."""
    df = cosearch.sweep({**SPACE, "cluster": {"gpu": ["h100-sxm", "b300"], "gpus": [8]},
                         "objectives": ["time_to_train_days", "cost_to_train_usd"]})
    f = cosearch.front(df)
    fastest = df[df.feasible].sort_values("time_to_train_days").iloc[0]
    assert fastest["cluster.gpu"] == "b300" and np.isnan(fastest["cost_to_train_usd"])
    assert f.iloc[0]["time_to_train_days"] == fastest["time_to_train_days"]
    assert (f["cluster.gpu"] == "h100-sxm").any()  # the priced plans trade cost for time behind it


def test_estimate_is_still_a_dict_with_an_html_repr():
    res = cosearch.estimate(ROOT / "examples" / "gpt3-175b.yaml")
    assert isinstance(res, dict) and type(res).__name__ == "Estimate"
    html = res._repr_html_()
    assert "<table" in html and "step time" in html
    assert yaml.safe_load(yaml.safe_dump(res))["params"] == res["params"]


def test_quickstart_notebook_executes():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    env_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path or "") if p)
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    finally:
        if env_path is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = env_path
    html = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "text/html" in o.get("data", {})]
    assert any("step time" in o["data"]["text/html"] for o in html)
