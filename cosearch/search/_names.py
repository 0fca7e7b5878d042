"""Names a search space speaks: objective metrics, budget constraints, sections, structural knobs."""
from __future__ import annotations

from ..presets import ARCH_FIELDS, MOE_ARCH_FIELDS

#: Metrics a study may optimize, and their direction.
MAXIMIZE = {"mfu", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "total_tokens_per_s",
            "background_tokens_per_s"}
OBJECTIVE_METRICS = (
    "step_time_s", "time_to_train_days", "cost_to_train_usd", "cost_usd_per_step", "gpus", "energy_to_train_mwh",
    "memory_gib", "mfu", "tokens_per_s", "model_tflops_per_gpu", "time_to_accuracy_days", "cost_to_accuracy_usd",
    "p90_time_to_train_days", "p90_cost_to_train_usd",
    "step_time_high_s", "time_to_train_high_days", "cost_to_train_high_usd",
    "total_tokens_per_s", "background_tokens_per_s", "idle_gpu_s",
)
#: Budget constraints: key -> metric it bounds from above.
CONSTRAINT_METRICS = {
    "max_cost_usd": "cost_to_train_usd", "max_gpus": "gpus", "max_days": "time_to_train_days",
    "max_step_time_s": "step_time_s", "max_energy_mwh": "energy_to_train_mwh", "max_cost_usd_per_step": "cost_usd_per_step",
    "max_p90_days": "p90_time_to_train_days", "max_p90_cost_usd": "p90_cost_to_train_usd",
    "max_days_to_accuracy": "time_to_accuracy_days", "max_cost_usd_to_accuracy": "cost_to_accuracy_usd",
    "max_days_high": "time_to_train_high_days", "max_cost_usd_high": "cost_to_train_high_usd",
}
#: Metrics that need an input the space must fix: metric -> (field, why).
METRIC_NEEDS = {
    **{m: ("training.tokens", "time_to_train_days / cost_to_train_usd / energy objectives and budgets")
       for m in ("time_to_train_days", "cost_to_train_usd", "energy_to_train_mwh", "p90_time_to_train_days",
                 "p90_cost_to_train_usd", "time_to_train_high_days", "cost_to_train_high_usd")},
    **{m: ("training.target_tokens", "time_to_accuracy_days / cost_to_accuracy_usd (docs/codesign.md)")
       for m in ("time_to_accuracy_days", "cost_to_accuracy_usd")},
}
#: Metrics that need a GPU price (the catalog's, or cluster.price_usd_per_gpu_hour): missing on a GPU without one.
PRICED_METRICS = ("cost_to_train_usd", "cost_usd_per_step", "cost_to_accuracy_usd", "p90_cost_to_train_usd",
                  "cost_to_train_high_usd")
#: Metrics that exist only for rented clusters (a ``cloud`` section).
_CLOUD_ONLY = ("p90_time_to_train_days", "p90_cost_to_train_usd")
#: Pessimistic metrics: the upper end of the 80 % prediction interval (cosearch.model.interval).
_BAND = ("step_time_high_s", "time_to_train_high_days", "cost_to_train_high_usd")
#: DeepPool metrics (cosearch.model.burst): computed only when the space sets plan.burst or plan.multiplex.
_DEEPPOOL = ("total_tokens_per_s", "background_tokens_per_s", "idle_gpu_s")
SECTIONS = ("model", "training", "cluster", "plan", "cloud")
#: Cluster fields an instance type decides; a space with a ``cloud`` section may not set them.
_CLOUD_DECIDES = ("gpu", "gpus", "nodes", "gpus_per_node", "nvlink_domain", "network_gbps", "price_usd_per_gpu_hour")
_SIZE_KEYS = ("gpus", "dp")  # derived below from gpus / nodes / dp
#: Dimensions that the divisibility rules read (pruning enumerates their sub-product).
STRUCTURAL = {
    "model", "training.global_batch", "training.attention", "training.precision", "cluster.gpu", "cluster.gpus",
    "cluster.nodes", "cluster.gpus_per_node", "plan.tp", "plan.pp", "plan.cp", "plan.dp", "plan.microbatch",
    "plan.interleave", "plan.zero_group", "plan.schedule", "cloud.instance", "cloud.instances",
} | {f"model.{k}" for k in ARCH_FIELDS} | {f"model.{k}" for k in MOE_ARCH_FIELDS} | {"plan.ep", "plan.etp"}
#: Plan knobs whose null choice means their default (issue 13: etp = tp, capacity_factor none = dropless).
NULLABLE_PLAN = ("plan.etp", "plan.capacity_factor")
#: Largest structural sub-product enumerated for pruning.
PRUNE_LIMIT = 1 << 21


def direction(metric: str) -> str:
    return "maximize" if metric in MAXIMIZE else "minimize"

