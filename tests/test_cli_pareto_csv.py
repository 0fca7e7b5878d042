"""The Pareto front table writes its counts (GPUs, parallel degrees) as integers: 512, not 512.0."""
from __future__ import annotations

import csv

import yaml

from cosearch.cli import main
from cosearch.study import load_study, pareto_front
from test_search_cli import SPACE

COUNTS = ("gpus", "cluster.gpus", "plan.tp", "plan.pp", "plan.microbatch")


def test_pareto_csv_writes_counts_as_integers(tmp_path, capsys):
    space, url = tmp_path / "space.yaml", str(tmp_path / "s.journal")
    space.write_text(yaml.safe_dump(SPACE))
    assert main(["run", str(space), "--study", "s", "--sampler", "tpe", "--trials", "40", "--storage", url]) == 0
    assert main(["pareto", "--study", "s", "--storage", url, "--csv", str(tmp_path / "f.csv")]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader((tmp_path / "f.csv").open()))
    assert rows
    for r in rows:
        assert r["gpus"] in ("512", "1024") and r["gpus"] == r["cluster.gpus"]  # the metric was written 1024.0
        assert all(r[c].isdigit() for c in COUNTS), {c: r[c] for c in COUNTS}
    front = pareto_front(load_study("s", url))
    assert all(front[c].dtype.kind == "i" for c in COUNTS)
    assert front["mfu"].dtype.kind == "f"  # only the counts


def test_only_whole_gap_free_count_columns_become_integers():
    """A count column with a missing value or a fraction stays float; other metrics are left alone."""
    import numpy as np
    import pandas as pd

    from cosearch.study_queries import _counts_as_int

    df = _counts_as_int(pd.DataFrame({"gpus": [64.0, 128.0], "plan.ep": [1.0, np.nan], "plan.tp": [2.5, 1.0],
                                      "cluster.inventory.h100-sxm": [8.0, 16.0], "memory_gib": [70.0, 64.0]}))
    assert df.to_csv(index=False).splitlines() == [
        "gpus,plan.ep,plan.tp,cluster.inventory.h100-sxm,memory_gib", "64,1.0,2.5,8,70.0", "128,,1.0,16,64.0"]
