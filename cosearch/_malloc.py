"""Keep glibc from handing every chunk-sized numpy temporary back to the kernel.

The exhaustive enumeration evaluates the model on chunks of 32-64k rows, so each of its hundreds
of temporaries is 0.25-0.5 MB, above glibc's initial 128 KiB mmap threshold: each becomes a fresh
mmap whose pages fault in again on every chunk. glibc raises the threshold adaptively, but when
depends on the allocation history, which made a 1.08-million-point enumeration take 0.58 s or
0.75-1.36 s from one run of the same code to the next (2-core VM; experiments/bench_search.py).
Fixed thresholds (32 MiB mmap, glibc's maximum; 512 MiB trim) make the heap reuse those blocks.
dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``, which disables the adaptive threshold entirely
(about 2x slower), so dask workers need the same call. The cost: up to 512 MiB of freed heap stays
with the process. No-op off glibc; done once per process.
"""
from __future__ import annotations

_DONE = False


def keep_heap() -> None:
    """Fixed glibc mmap (32 MiB) and trim (512 MiB) thresholds for this process (once)."""
    global _DONE
    if _DONE:
        return
    _DONE = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt parameter numbers from <malloc.h>
        libc.mallopt(m_mmap_threshold, 32 << 20)
        libc.mallopt(m_trim_threshold, 512 << 20)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass
