"""The model's kernel rates on a catalog GPU, for the comparison scripts (no torch needed)."""
from __future__ import annotations

from cosearch.model.columns import ATTENTION_CODES
from cosearch.model.evaluate import KernelRates, kernel_rates
from cosearch.model.profile import Profile
from cosearch.scenario import ClusterSpec, hardware_values


def bf16_rates(gpu_id: str, attention: str, p: Profile) -> KernelRates:
    """:func:`cosearch.model.evaluate.kernel_rates` of a bf16 run on ``gpu_id`` with the ``training.attention``
    kernel ``attention``: evaluate's own rate chain from the catalog."""
    cols = hardware_values(ClusterSpec(gpu=gpu_id, gpus=1), "bf16")
    return kernel_rates({**cols, "precision": 0.0, "attention": float(ATTENTION_CODES[attention])}, p)
