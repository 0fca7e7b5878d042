"""Cloud provisioning: the instance catalog, the ``cloud`` scenario section and transient-server economics.

* :mod:`.catalog`: instance types with on-demand/spot prices and revocation rates (``data/instances.yaml``).
* :mod:`.transient`: checkpoint/restart/revocation math (Young/Daly interval, expected time and
  cost, P10/P50/P90 spread), vectorized.
* :mod:`.provision`: the scenario's ``cloud`` section and :func:`evaluate_cloud` for search.
"""
from .catalog import Catalog, InstanceType, load_catalog
from .provision import (CLOUD_COLUMNS, INSTANCE_COLUMNS, CloudSpec, apply_cloud, cloud_estimate, evaluate_cloud,
                        instance_codes, instance_columns)
from .transient import (checkpoint_write_s, expected_wall_time, optimal_interval, transient_metrics,
                        wall_time_moments, wall_time_quantiles)

__all__ = [
    "Catalog", "InstanceType", "load_catalog", "CloudSpec", "CLOUD_COLUMNS", "INSTANCE_COLUMNS", "apply_cloud", "cloud_estimate", "evaluate_cloud",
    "instance_codes", "instance_columns", "checkpoint_write_s", "expected_wall_time", "optimal_interval",
    "transient_metrics", "wall_time_moments", "wall_time_quantiles",
]
