"""Moved to :mod:`cosearch.storages.rdb_batch` (storage code lives in ``cosearch/storages``).

This name stays importable: it is the very same module object.
"""
import sys

from .storages import rdb_batch as _moved

sys.modules[__name__] = _moved
