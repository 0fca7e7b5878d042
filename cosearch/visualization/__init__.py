"""Pictures of cosearch studies (optuna-style ``plot_*`` functions returning plotly figures) and
the self-contained HTML report (:func:`write_report`); :mod:`._static` draws the same with matplotlib.

The public names are imported on first use (PEP 562): importing a light submodule (``._data``, ``._budget``)
does not load plotly (~1 s).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

#: public name -> the submodule that defines it
_EXPORTS = {
    "StudyData": "._data", "study_data": "._data", "plot_pareto_front": "._pareto",
    "plot_time_breakdown": "._breakdown", "plot_memory_breakdown": "._breakdown", "plot_history": "._history",
    "param_importances": "._importance", "plot_param_importances": "._importance", "best_per_budget": "._budget",
    "write_report": ".report", "Report": ".report", "PLOT_IDS": ".report",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # the names as static imports, for type checkers and editors
    from ._breakdown import plot_memory_breakdown, plot_time_breakdown
    from ._budget import best_per_budget
    from ._data import StudyData, study_data
    from ._history import plot_history
    from ._importance import param_importances, plot_param_importances
    from ._pareto import plot_pareto_front
    from .report import PLOT_IDS, Report, write_report
