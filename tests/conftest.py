import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A100 = dict(peak_tflops=312.0, matmul_efficiency=0.8, hbm_gib=80.0, hbm_tbps=2.039, nvlink_gbps=300.0,
            nvlink_domain=8.0, gpus_per_node=8.0, network_gbps=200.0, power_w=400.0, price_usd_per_gpu_hour=2.0)
GPT3 = dict(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152, vocab=51200, seq_len=2048)


@pytest.fixture
def gpt3_columns():
    """GPT-3 175B on 1024 A100-80GB, Megatron-style 8x16 plan (plain numbers, no catalog)."""
    return dict(**A100, **GPT3, global_batch=1536, gpus=1024, tp=8, pp=16, microbatch=1, recompute=2,
                sequence_parallel=1, tokens=3e11)


@pytest.fixture
def gpt3_scenario():
    return {
        "model": "gpt3-175b",
        "training": {"global_batch": 1536, "precision": "bf16", "tokens": 3.0e11},
        "cluster": {"gpu": "a100-80gb", "gpus": 1024},
        "plan": {"tp": 8, "pp": 16, "microbatch": 1, "interleave": 1, "recompute": "full",
                 "sequence_parallel": True, "zero": 1},
    }


#: A 216-point search space (GPT-3 175B on 512-1,024 A100/H100, TP x PP x micro-batch x recompute), time vs cost,
#: no constraints: the small space the study, query and API tests share (each adds its own budgets).
GPT3_SMALL_SPACE = {
    "model": "gpt3-175b",
    "training": {"global_batch": 1536, "tokens": 3.0e11, "precision": "bf16"},
    "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [512, 1024]},
    "plan": {"tp": [2, 4, 8], "pp": [4, 8, 16], "microbatch": [1, 2], "recompute": ["none", "selective", "full"]},
    "objectives": ["time_to_train_days", "cost_to_train_usd"],
}


def random_rows(space, n: int, seed: int):
    """``n`` random points (rows of choice indices) of a finite search space."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, len(d.choices), n) for d in space.dims], axis=1).astype(float)


def experiment_script(name: str):
    """The module ``experiments/<name>.py``, loaded by path (experiments/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_cli(capsys, *args):
    """(exit code, stdout, stderr) of ``cosearch ARGS`` run in this process."""
    from cosearch.cli import main

    try:
        rc = main(list(args))
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


# PostgreSQL for the scale-out and storage-compat tests (one server per session)
@pytest.fixture(scope="session")
def pg_url():
    own = os.environ.get("COSEARCH_TEST_PG_URL")
    if own:
        yield own
        return
    pgdir = f"/tmp/cosearch-pg-test-{os.getpid()}"
    env = dict(os.environ, COSEARCH_PG_DIR=pgdir, COSEARCH_PG_DURABLE="0")
    script = str(ROOT / "scripts" / "postgres.sh")
    res = subprocess.run(["bash", script, "start"], env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        msg = f"PostgreSQL could not be started: {res.stderr.strip()[-500:]}"
        if os.environ.get("CI") or os.environ.get("COSEARCH_REQUIRE_SERVERS"):
            pytest.fail(msg)  # scripts/test.sh (the CI command) sets COSEARCH_REQUIRE_SERVERS
        pytest.skip(msg)
    try:
        yield res.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", script, "stop"], env=env, capture_output=True, timeout=120)
