"""Hostile input benchmark (issue 11): each bad file through the CLI, with wall time and peak memory.

Every case builds its file in a temporary directory, runs ``cosearch estimate`` (scenarios,
profiles), ``cosearch run --sampler random --trials 5`` (spaces, storages) or ``cosearch
calibrate`` (measured CSVs) in a subprocess with a timeout and a 4 GiB address-space cap, and
records the exit code, the first line of stderr, the wall time and the child's peak RSS
(``os.wait4``). A case passes when the command exits 2 with one ``error:`` line, no traceback,
under 5 s and 1 GiB.

    python experiments/bench_hostile.py          # ~1 minute; writes experiments/results/bench_hostile.json
"""
from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "bench_hostile.json"
TIME_LIMIT_S, MEM_LIMIT_MIB, KILL_AFTER_S = 5.0, 1024.0, 60.0

SCENARIO = """model: gpt3-175b
training: {global_batch: 1536, tokens: 3.0e11}
cluster: {gpu: a100-80gb, gpus: 1024}
plan: {tp: 8, pp: 16}
"""
SPACE = """model: gpt3-175b
training: {global_batch: 1536, tokens: 3.0e11}
cluster: {gpu: a100-80gb, gpus: 1024}
plan: {tp: [1, 2, 4, 8], pp: [1, 2, 4, 8, 16]}
objectives: [time_to_train_days]
"""
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def _write(name: str, data: str | bytes):
    def build(d: Path) -> str:
        p = d / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        return str(p)
    return build


def _big_yaml(d: Path) -> str:
    p = d / "big.yaml"
    line = "  - 0123456789012345678901234567890123456789012345678901234567890123456789\n"
    with open(p, "w") as f:
        f.write(SCENARIO + "notes:\n")
        f.write(line * (50_000_000 // len(line)))
    return str(p)


def _fifo(d: Path) -> str:
    p = d / "fifo.yaml"
    os.mkfifo(p)
    return str(p)


def _space_with(plan_line: str) -> str:
    return SPACE.replace("plan: {tp: [1, 2, 4, 8], pp: [1, 2, 4, 8, 16]}", plan_line)


ESTIMATE = ["estimate", "{f}"]
RUN = ["run", "{f}", "--study", "s", "--storage", "{d}/j.journal", "--sampler", "random", "--trials", "5"]
CASES = [
    ("binary scenario", _write("bin.yaml", bytes(range(256)) * 8), ESTIMATE),
    ("non-UTF-8 scenario", _write("latin.yaml", (SCENARIO + "# caf\xe9\n").encode("latin-1")), ESTIMATE),
    ("/dev/zero as scenario", lambda d: "/dev/zero", ESTIMATE),
    ("FIFO as scenario", _fifo, ESTIMATE),
    ("50 MB YAML scenario", _big_yaml, ESTIMATE),
    ("alias bomb scenario", _write("bomb.yaml", BOMB), ESTIMATE),
    ("alias bomb space", _write("bomb-space.yaml", BOMB), RUN),
    ("100k nested [ scenario", _write("deep.yaml", "[" * 100_000), ESTIMATE),
    ("100k nested [ space", _write("deep-space.yaml", "plan: " + "[" * 100_000), RUN),
    ("400-digit integer", _write("bigint.yaml", SCENARIO.replace("pp: 16", "pp: " + "9" * 400)), ESTIMATE),
    (".inf tokens", _write("inf.yaml", SCENARIO.replace("tokens: 3.0e11", "tokens: .inf")), ESTIMATE),
    (".inf hbm_gib", _write("inf2.yaml", SCENARIO.replace("gpus: 1024", "gpus: 1024, hbm_gib: .inf")), ESTIMATE),
    (".nan network_gbps", _write("nan.yaml", SCENARIO.replace("gpus: 1024", "gpus: 1024, network_gbps: .nan")), ESTIMATE),
    ("1e308 oversubscription", _write("huge.yaml", SCENARIO.replace("gpus: 1024", "gpus: 1024, oversubscription: 1.0e+308")), ESTIMATE),
    ("tp: true", _write("tptrue.yaml", SCENARIO.replace("tp: 8", "tp: true")), ESTIMATE),
    ("space float range step 0.5 to 1e12",
     _write("range.yaml", _space_with("plan: {tp: [1, 2, 4, 8], pp: [1, 2]}\n").replace(
         "cluster: {gpu: a100-80gb, gpus: 1024}", "cluster: {gpu: a100-80gb, gpus: 1024, hbm_gib: {min: 1.0, max: 1.0e+12, step: 0.5}}")), RUN),
    ("space range max .inf",
     _write("rangeinf.yaml", _space_with("plan: {tp: [1, 2, 4, 8], pp: [1, 2]}\n").replace(
         "cluster: {gpu: a100-80gb, gpus: 1024}", "cluster: {gpu: a100-80gb, gpus: 1024, hbm_gib: {min: 1.0, max: .inf}}")), RUN),
    ("binary profile", _write("prof.yaml", b"\x89PNG\r\n\x1a\n" + bytes(200)), ["estimate", str(ROOT / "examples" / "gpt3-175b.yaml"), "--profile", "{f}"]),
    ("profile .inf constant", _write("prof2.yaml", "profile:\n  gemm_overhead_s: .inf\n"),
     ["estimate", str(ROOT / "examples" / "gpt3-175b.yaml"), "--profile", "{f}"]),
    ("non-UTF-8 measured CSV", _write("m.csv", "model,gpu,gpus,global_batch,measured_step_time_s\ncaf\xe9,a,1,1,1\n".encode("latin-1")),
     ["calibrate", "{f}", "--out", "{d}/p.yaml"]),
    ("unwritable journal", _write("ok-space.yaml", SPACE),
     ["run", "{f}", "--study", "s", "--storage", "/sys/cosearch-bench/j.journal", "--sampler", "random", "--trials", "5"]),
]


def _limit_memory() -> None:
    cap = 4 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.setsid()


def run_case(name: str, build, argv: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        f = build(d)
        args = [a.format(f=f, d=tmp) for a in argv]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "cosearch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=tmp, env=env, preexec_fn=_limit_memory)
        killed = []

        def kill() -> None:
            killed.append(True)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(KILL_AFTER_S, kill)
        timer.start()
        out_chunks: dict[str, bytes] = {}
        readers = [threading.Thread(target=lambda s=s, k=k: out_chunks.__setitem__(k, s.read()))
                   for k, s in (("out", proc.stdout), ("err", proc.stderr))]
        for r in readers:
            r.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        timer.cancel()
        for r in readers:
            r.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    err = out_chunks.get("err", b"").decode("utf-8", "replace").strip()
    lines = err.splitlines()
    peak_mib = usage.ru_maxrss / 1024  # Linux: KiB
    one_line = len(lines) == 1 and lines[0].startswith("error: ")
    ok = proc.returncode == 2 and one_line and "Traceback" not in err and wall < TIME_LIMIT_S and peak_mib < MEM_LIMIT_MIB
    return {"case": name, "command": " ".join(["cosearch", *argv]), "rc": proc.returncode, "killed": bool(killed),
            "wall_s": round(wall, 3), "peak_mib": round(peak_mib, 1), "one_line_error": one_line,
            "message": (lines[0] if lines else "")[:200] if one_line else (lines[-1] if lines else "")[:200], "ok": ok}


def main() -> int:
    results = []
    print(f"{'case':38s} {'rc':>3s} {'wall s':>7s} {'peak MiB':>9s}  ok  message")
    for name, build, argv in CASES:
        r = run_case(name, build, argv)
        results.append(r)
        print(f"{name:38s} {r['rc']:>3d} {r['wall_s']:7.2f} {r['peak_mib']:9.1f}  {'yes' if r['ok'] else 'NO '} {r['message'][:110]}",
              flush=True)
    bad = [r["case"] for r in results if not r["ok"]]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"host": platform.node(), "python": platform.python_version(), "limits":
                               {"wall_s": TIME_LIMIT_S, "peak_mib": MEM_LIMIT_MIB}, "cases": results, "failed": bad},
                              indent=2) + "\n")
    print(f"\n{len(results) - len(bad)}/{len(results)} cases pass" + (f"; failing: {', '.join(bad)}" if bad else ""))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
