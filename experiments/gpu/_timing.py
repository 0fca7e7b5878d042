"""CUDA-event timers shared by the GPU measurement scripts (run on the lent H100/H200, never by the tests)."""
from __future__ import annotations

import torch


def timeit_queued(fn, calls=10, reps=7, warm=3):
    """Per-call GPU time of ``calls`` launches queued back to back (one event pair around them): the
    rate a training step sees once the host runs ahead, free of per-call host overhead."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / calls)
    ts.sort()
    return ts[len(ts) // 2]


def timeit(fn, reps=15, warm=3):
    """Median seconds of one ``fn()`` between two CUDA events: a launch the host is slow to issue
    counts its host time too."""
    return timeit_queued(fn, calls=1, reps=reps, warm=warm)
