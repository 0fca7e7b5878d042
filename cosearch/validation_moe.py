"""Published mixture-of-experts training runs (issue 13's validation data), with the measured step time.

Reads ``experiments/data/validation/published_runs_moe.csv`` (sources in that folder's SOURCES.md) and
derives each row's step time from what its source states, in this order of preference:

1. a stated step time (``iteration_time_s``);
2. tokens per second, whole job or per GPU: ``GBS x seq / tokens_per_s``;
3. GPU-hours per trillion tokens (DeepSeek-V2/V3 reports): tokens/s/GPU = 1e12 / (hours x 3600);
4. model TFLOP/s per GPU with the FLOPs per token the row states: ``GBS x seq x flops_per_token /
   (TFLOP/s x 1e12 x GPUs)``.

The scenario mapping of these rows waits for the MoE model fields (issue 13); this module only reads
and converts, so that the numbers can be checked by hand.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: The MoE published-runs CSV (a clone or editable install; not shipped in a wheel).
MOE_PATH = Path(__file__).resolve().parents[1] / "experiments" / "data" / "validation" / "published_runs_moe.csv"
SECONDS_PER_HOUR = 3600.0
TOKENS_PER_TRILLION = 1e12


def _num(x: Any) -> float | None:
    """A CSV cell as a float, or None when empty."""
    if x is None or (isinstance(x, str) and not x.strip()):
        return None
    v = float(x)
    return None if math.isnan(v) else v


def tokens_per_s_per_gpu_from_gpu_hours(gpu_hours_per_trillion_tokens: float) -> float:
    """Average tokens/s per GPU of a run that spent ``gpu_hours`` GPU-hours per 1e12 tokens."""
    return TOKENS_PER_TRILLION / (gpu_hours_per_trillion_tokens * SECONDS_PER_HOUR)


def measured_step_time(row: pd.Series | dict) -> tuple[float | None, str]:
    """(step time in seconds, the stated quantity it came from) of one published run; (None, reason)
    when the row states too little (e.g. no GPU count)."""
    get = row.get
    tokens_per_step = (_num(get("global_batch_size")) or math.nan) * (_num(get("seq_len")) or math.nan)
    gpus = _num(get("num_gpus"))
    if (t := _num(get("iteration_time_s"))) is not None:
        return t, "iteration_time_s"
    if math.isnan(tokens_per_step):
        return None, "no global_batch_size x seq_len"
    if (tps := _num(get("tokens_per_s"))) is not None:
        return tokens_per_step / tps, "tokens_per_s"
    if gpus is None:
        return None, "no num_gpus"
    if (tpg := _num(get("tokens_per_s_per_gpu"))) is not None:
        return tokens_per_step / (tpg * gpus), "tokens_per_s_per_gpu"
    if (hours := _num(get("gpu_hours_per_trillion_tokens"))) is not None:
        return tokens_per_step / (tokens_per_s_per_gpu_from_gpu_hours(hours) * gpus), "gpu_hours_per_trillion_tokens"
    tflops, fpt = _num(get("tflops_per_gpu")), _num(get("model_flops_per_token"))
    if tflops is not None and fpt is not None:
        return tokens_per_step * fpt / (tflops * 1e12 * gpus), "tflops_per_gpu x model_flops_per_token"
    return None, "no stated time, throughput or FLOP rate with FLOPs per token"


def load_moe_runs(path: str | Path = MOE_PATH) -> pd.DataFrame:
    """The MoE published runs with ``step_time_s`` (NaN where underivable), ``step_time_from`` (which
    stated quantity it came from), the implied ``measured_tokens_per_s_per_gpu`` and, where a row
    states both a FLOP rate and a throughput, ``implied_flops_per_token`` (a consistency check)."""
    df = pd.read_csv(path)
    pairs = [measured_step_time(r) for r in df.to_dict("records")]
    df["step_time_s"] = np.array([np.nan if t is None else t for t, _ in pairs], dtype=float)
    df["step_time_from"] = [src for _, src in pairs]
    tokens = df["global_batch_size"] * df["seq_len"]
    df["measured_tokens_per_s_per_gpu"] = tokens / (df["step_time_s"] * df["num_gpus"])
    hours = df["gpu_hours_per_trillion_tokens"]
    df.loc[hours.notna(), "measured_tokens_per_s_per_gpu"] = tokens_per_s_per_gpu_from_gpu_hours(hours[hours.notna()])
    df["implied_flops_per_token"] = df["tflops_per_gpu"] * 1e12 / df["measured_tokens_per_s_per_gpu"]
    return df
