"""Code written once where it was written twice: the one version gives what each copy gave."""
from __future__ import annotations

import math

import pytest

from cosearch import hardware
from cosearch.errors import CosearchError
from cosearch.inventory import type_hardware
from cosearch.model.hetero import HARDWARE_COLUMNS
from cosearch.scenario import ClusterSpec, hardware_values


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("gpu", hardware.gpu_ids())
@pytest.mark.parametrize("precision", hardware.PRECISIONS)
def test_type_hardware_is_the_scenario_path(gpu, precision):
    """An inventory type's columns (hardware.type_columns + its peak) equal what a one-GPU-type scenario's
    hardware_values gives for them, and a precision the type lacks fails with the same error."""
    try:
        want = {k: v for k, v in hardware_values(ClusterSpec(gpu=gpu, gpus=1), precision).items()
                if k in HARDWARE_COLUMNS}
    except CosearchError as e:
        with pytest.raises(CosearchError) as got:
            type_hardware(gpu, precision)
        assert (got.value.field, str(got.value)) == (e.field, str(e))
        return
    got = type_hardware(gpu, precision)
    assert set(got) == set(want) == set(HARDWARE_COLUMNS)
    assert all(_same(got[k], want[k]) for k in want), gpu
