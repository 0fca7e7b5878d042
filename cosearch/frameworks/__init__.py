"""Plans out as launch arguments of training frameworks, and existing launch arguments in.

One module per framework, each with ``export(scenario) -> str`` (the text to paste or save) and
``VERSION`` (the framework release whose argument names it follows; its docstring cites them):

* :mod:`.megatron` - Megatron-LM command-line flags (and :func:`.megatron.parse_args`, the inverse)
* :mod:`.nemo` - NeMo 2 recipe overrides (NeMo-Run CLI ``key=value``)
* :mod:`.torchtitan` - a torchtitan job TOML
* :mod:`.deepspeed` - a DeepSpeed config JSON

A plan a framework cannot express raises :class:`cosearch.errors.CosearchError` naming the
scenario field and the reason. Fields that are modelling inputs only (``training.target_tokens``,
``training.critical_batch_tokens``, the cluster's hardware overrides, ``cloud``) have no launch
argument and are left out.
"""
from __future__ import annotations

import importlib
from typing import Any

from ..errors import CosearchError

#: format name -> module under cosearch.frameworks
FORMATS = {"megatron": "megatron", "nemo": "nemo", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}


def module(fmt: str):
    if fmt not in FORMATS:
        raise CosearchError("--format", f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    return importlib.import_module(f"{__name__}.{FORMATS[fmt]}")


def export(scenario: Any, fmt: str, **options: Any) -> str:
    """The launch arguments / config text of ``scenario`` (path, dict or Scenario) for ``fmt``; ``options`` go to the
    framework's ``export`` (torchtitan's ``version``, the job TOML's layout)."""
    from ..scenario import load_scenario

    sc = load_scenario(scenario)
    if sc.cluster.inventory is not None:  # an inventory plan that uses one GPU type is an ordinary plan
        from ..inventory import homogeneous_scenario

        sc = homogeneous_scenario(sc)
    return module(fmt).export(sc, **options)
