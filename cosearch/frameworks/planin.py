"""Command-line options that build a scenario from an existing launch (``cosearch estimate``), and
the integer check the launch readers (:mod:`.megatron`, :mod:`.torchtitan`) share."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping

from .._files import YAML_MAX_BYTES, parse_yaml, read_text
from ..errors import CosearchError

#: Largest job TOML read (a torchtitan job config is a few KiB, as a scenario YAML).
TOML_MAX_BYTES = YAML_MAX_BYTES
#: Suffixes that make ``--cluster`` / ``--model`` a file to read rather than inline YAML or a preset name
#: (JSON is YAML), whether or not it exists (a missing one is an error naming it); an existing file is read whatever
#: its name (:func:`_names_file`).
FILE_SUFFIXES = (".yaml", ".yml", ".json")


def whole(value: Any, field: str, least: int = 1, most: int | None = None, also: tuple[int, ...] = ()) -> int:
    """``value`` if it is an integer in ``least..most`` (or one of ``also``, e.g. torchtitan's -1, "the
    rest"), else a one-line error naming ``field``: a bool, float, text, null or out-of-range number is
    refused rather than truncated (``1.5``), coerced (``true``) or divided by (``0``)."""
    if isinstance(value, bool) or not isinstance(value, int) or (
            value not in also and (value < least or (most is not None and value > most))):
        allowed = f"an integer >= {least}" if most is None else f"an integer in {least}..{most:_}"
        allowed += "".join(f" or {a}" for a in also)
        got = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
        raise CosearchError(field, f"expects {allowed} (got {got})")
    return value


def cluster_gpus(cluster: Mapping[str, Any]) -> int:
    """``cluster.gpus`` as a positive integer within the scenario's bound (``ClusterSpec.gpus``)."""
    from ..scenario import MAX_COUNT

    return whole(cluster["gpus"], "cluster.gpus", most=MAX_COUNT)


def _kind(text: str) -> str | None:
    """"dir" or "file" when ``text`` names an existing one, else None (also for inline YAML too long or odd for
    a path), so that ``--cluster`` tells a file from inline YAML."""
    try:
        path = Path(text)
        return "dir" if path.is_dir() else "file" if path.is_file() else None
    except (OSError, ValueError):
        return None


def _names_file(text: str, flag: str, other: str) -> bool:
    """Whether ``--cluster`` / ``--model`` names a file to read: an existing file (``cluster``, ``llama.cfg``) or a
    path with a YAML/JSON suffix; else it is ``other`` (inline YAML, a preset name). A directory is a one-line
    error naming ``flag``."""
    kind = _kind(text)
    if kind == "dir":
        raise CosearchError(flag, f"{text!r} is a directory; give a YAML file or {other}")
    return kind == "file" or Path(text).suffix in FILE_SUFFIXES


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("plan in from an existing launch (instead of SCENARIO)")
    g.add_argument("--megatron-args", metavar="ARGS", help="a Megatron-LM command line (quoted); needs --vocab-size "
                   "among the flags and the cluster from --gpu/--gpus, --cluster or a torchrun prefix")
    g.add_argument("--torchtitan-toml", metavar="FILE", help="a torchtitan job TOML; needs --model and the cluster")
    g.add_argument("--model", help="with --torchtitan-toml: a model preset name or a YAML file of model fields (any "
                   "existing file, whatever its suffix, unless its name is a preset's)")
    g.add_argument("--torch-version", metavar="X.Y", help="with --torchtitan-toml: the job's PyTorch (SDPA's attention "
                   "kernel: cuDNN from 2.11 on Hopper/Blackwell, FlashAttention-2 before); default: a current release")
    g.add_argument("--gpu", help="catalog GPU id of the cluster (see cosearch catalog)")
    g.add_argument("--gpus", type=int, help="GPUs in the job (the launcher's world size)")
    g.add_argument("--cluster", help="cluster fields as a YAML file or inline YAML, e.g. '{gpu: h100-sxm, gpus: 64}'")


def _cluster(args: argparse.Namespace) -> dict[str, Any]:
    cl: dict[str, Any] = {}
    if args.cluster:
        from ..scenario import read_yaml

        is_file = _names_file(args.cluster, "--cluster", "inline YAML such as '{gpu: h100-sxm, gpus: 64}'")
        data = read_yaml(args.cluster) if is_file else parse_yaml(args.cluster, "--cluster")
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
            data = data["cluster"]  # a whole scenario file: take its cluster
        if not isinstance(data, dict):
            raise CosearchError("--cluster", "expects a mapping of cluster fields, e.g. '{gpu: h100-sxm, gpus: 64}'")
        cl.update(data)
    for flag, key in (("--gpu", "gpu"), ("--gpus", "gpus")):
        value = getattr(args, key)
        if value is not None:
            if key in cl and cl[key] != value:
                raise CosearchError(flag, f"{value} contradicts --cluster's {key}: {cl[key]}; give it once")
            cl[key] = value
    return cl


def scenario_from_args(args: argparse.Namespace) -> Any:
    """The scenario ``cosearch estimate`` should run: SCENARIO, or one built from launch arguments."""
    given = [x for x in (args.scenario, args.megatron_args, args.torchtitan_toml) if x]
    if len(given) != 1:
        raise CosearchError("scenario", "give exactly one of SCENARIO, --megatron-args, --torchtitan-toml")
    if getattr(args, "torch_version", None) and not args.torchtitan_toml:
        raise CosearchError("--torch-version", "only with --torchtitan-toml (a scenario states training.attention)")
    if args.scenario:  # a scenario file states its model and cluster: these would be ignored
        for flag, value in (("--gpu", args.gpu), ("--gpus", args.gpus), ("--cluster", args.cluster), ("--model", args.model)):
            if value is not None:
                raise CosearchError(flag, "only with --megatron-args or --torchtitan-toml (a scenario file states its "
                                    "model and cluster: edit it instead)")
    if args.model is not None and args.megatron_args:
        raise CosearchError("--model", "only with --torchtitan-toml (a Megatron-LM command line states the model)")
    if args.megatron_args:
        from .megatron import parse_args

        return parse_args(args.megatron_args, _cluster(args))
    if args.torchtitan_toml:
        from .torchtitan import parse_toml

        if not args.model:
            raise CosearchError("--model", "required with --torchtitan-toml (torchtitan names its model by flavor)")
        model: Any = args.model
        from ..presets import presets

        # a preset's name stays the preset, whatever file or folder of that name the working directory holds
        if args.model not in presets() and _names_file(args.model, "--model", "a preset name such as llama3-8b"):
            from ..scenario import read_yaml

            model = read_yaml(args.model)
            model = model.get("model", model) if isinstance(model, dict) else model
        text = read_text(args.torchtitan_toml, TOML_MAX_BYTES)  # a FIFO, device or binary file: refused
        return parse_toml(text, model, _cluster(args), torch_version=args.torch_version)
    return args.scenario
