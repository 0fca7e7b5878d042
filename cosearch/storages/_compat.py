"""Guard for the storage formats cosearch writes by hand (journal operations, RDB rows).

The fast paths in :mod:`cosearch.storages._writer` and :mod:`cosearch.storages.rdb_batch` write optuna's journal
operations and ORM rows directly. They are tested against :data:`TESTED_OPTUNA` only
(``tests/test_storage_compat.py`` writes through them and reads back with optuna's public API,
and the reverse). Any other optuna version is refused at start-up with one line, unless
``COSEARCH_ALLOW_UNTESTED_OPTUNA=1``, which keeps cosearch running on optuna's public storage
API only (correct, slower).
"""
from __future__ import annotations

import os

from ..errors import CosearchError

#: Optuna versions the hand-written formats are tested with: ``>= lower, < upper`` (major, minor).
TESTED_OPTUNA = ((5, 0), (5, 1))
ALLOW_ENV = "COSEARCH_ALLOW_UNTESTED_OPTUNA"


def _version(text: str) -> tuple[int, int]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit()) or "0"
        parts.append(int(digits))
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def optuna_tested(version: str | None = None) -> bool:
    """Whether ``version`` (default: the installed optuna) is in the tested range."""
    if version is None:
        import optuna

        version = optuna.__version__
    lo, hi = TESTED_OPTUNA
    return lo <= _version(version) < hi


def fast_paths_enabled() -> bool:
    """True when cosearch may write optuna's formats by hand (tested optuna version)."""
    return optuna_tested()


def check_optuna(version: str | None = None) -> None:
    """Refuse an untested optuna with a one-line :class:`CosearchError` (unless overridden)."""
    if optuna_tested(version):
        return
    if os.environ.get(ALLOW_ENV) == "1":
        return
    import optuna

    (a, b), (c, d) = TESTED_OPTUNA
    raise CosearchError("optuna", f"version {version or optuna.__version__} is untested with cosearch's storage "
                        f"writers (tested: >={a}.{b},<{c}.{d}); install 'optuna>={a}.{b},<{c}.{d}' or set "
                        f"{ALLOW_ENV}=1 to use optuna's public storage API only (slower)")
