"""Command-line options that build a scenario from an existing launch (``cosearch estimate``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from ..errors import CosearchError


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("plan in from an existing launch (instead of SCENARIO)")
    g.add_argument("--megatron-args", metavar="ARGS", help="a Megatron-LM command line (quoted); needs --vocab-size "
                   "among the flags and the cluster from --gpu/--gpus, --cluster or a torchrun prefix")
    g.add_argument("--torchtitan-toml", metavar="FILE", help="a torchtitan job TOML; needs --model and the cluster")
    g.add_argument("--model", help="with --torchtitan-toml: a model preset name or a YAML file of model fields")
    g.add_argument("--gpu", help="catalog GPU id of the cluster (see cosearch catalog)")
    g.add_argument("--gpus", type=int, help="GPUs in the job (the launcher's world size)")
    g.add_argument("--cluster", help="cluster fields as a YAML file or inline YAML, e.g. '{gpu: h100-sxm, gpus: 64}'")


def _cluster(args: argparse.Namespace) -> dict[str, Any]:
    cl: dict[str, Any] = {}
    if args.cluster:
        path = Path(args.cluster)
        from ..scenario import read_yaml

        data = read_yaml(path) if path.suffix in (".yaml", ".yml") or path.is_file() else yaml.safe_load(args.cluster)
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
            data = data["cluster"]  # a whole scenario file: take its cluster
        if not isinstance(data, dict):
            raise CosearchError("--cluster", "expects a mapping of cluster fields, e.g. '{gpu: h100-sxm, gpus: 64}'")
        cl.update(data)
    if args.gpu:
        cl["gpu"] = args.gpu
    if args.gpus is not None:
        cl["gpus"] = args.gpus
    return cl


def scenario_from_args(args: argparse.Namespace) -> Any:
    """The scenario ``cosearch estimate`` should run: SCENARIO, or one built from launch arguments."""
    given = [x for x in (args.scenario, args.megatron_args, args.torchtitan_toml) if x]
    if len(given) != 1:
        raise CosearchError("scenario", "give exactly one of SCENARIO, --megatron-args, --torchtitan-toml")
    if args.megatron_args:
        from .megatron import parse_args

        return parse_args(args.megatron_args, _cluster(args))
    if args.torchtitan_toml:
        from .torchtitan import parse_toml

        if not args.model:
            raise CosearchError("--model", "required with --torchtitan-toml (torchtitan names its model by flavor)")
        model: Any = args.model
        if Path(args.model).suffix in (".yaml", ".yml"):
            from ..scenario import read_yaml

            model = read_yaml(args.model)
            model = model.get("model", model) if isinstance(model, dict) else model
        try:
            text = Path(args.torchtitan_toml).read_text()
        except OSError as err:
            raise CosearchError("--torchtitan-toml", f"cannot read file ({err.strerror or err})") from None
        return parse_toml(text, model, _cluster(args))
    return args.scenario
