"""Pictures of cosearch studies (optuna-style ``plot_*`` functions returning plotly figures) and
the self-contained HTML report (:func:`write_report`); :mod:`._static` draws the same with matplotlib."""
from ._breakdown import plot_memory_breakdown, plot_time_breakdown
from ._budget import best_per_budget
from ._data import StudyData, study_data
from ._history import plot_history
from ._importance import param_importances, plot_param_importances
from ._pareto import plot_pareto_front
from .report import PLOT_IDS, Report, write_report

__all__ = [
    "StudyData", "study_data", "plot_pareto_front", "plot_time_breakdown", "plot_memory_breakdown", "plot_history",
    "param_importances", "plot_param_importances", "best_per_budget", "write_report", "Report", "PLOT_IDS",
]
