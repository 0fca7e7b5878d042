"""``cosearch export SCENARIO --format megatron|nemo|torchtitan|deepspeed [--torchtitan-version 0.1|0.2] [--out FILE]``.

Also exports a stored study row: ``--study S [--storage X] --rank N`` (row N of ``cosearch
pareto``'s table, 1 = first) or ``--trial N`` (a trial number, e.g. the one ``cosearch best``
prints).

``--torchtitan-version`` picks the job TOML's layout (:data:`cosearch.frameworks.torchtitan.LAYOUTS`): 0.1, the
default, is torchtitan v0.1.0's (``[training] compile``, ``[float8]``), the file this command has always written;
0.2 is v0.2.0 to v0.2.2's (``[compile]``, ``[quantize.linear.float8]``, ``early_stop``, ``dtype``), whose config
manager refuses v0.1.0's ``[training] compile``. A flag rather than a ``--format torchtitan-v0.2``: ``--format``
names the framework, one module of :mod:`cosearch.frameworks` each (``FORMATS``, whose ``export`` takes a format
and nothing else), while the release is a choice within one framework's output, like ``--torch-version`` on the
import side; a second format name would list torchtitan twice among the frameworks and route both names to the
same module. The flag with another format, or a value other than 0.1 and 0.2, is a one-line error (exit 2).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import CosearchError
from .._files import refuse_overwrite, write_output
from ..frameworks import FORMATS, export


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a plan as launch arguments of Megatron-LM, NeMo, torchtitan or DeepSpeed")
    p.add_argument("scenario", nargs="?", help="scenario YAML file (or use --study)")
    p.add_argument("--format", required=True, choices=list(FORMATS), help="target framework")
    p.add_argument("--torchtitan-version", default=None, metavar="0.1|0.2",
                   help="with --format torchtitan: the job TOML's layout, torchtitan v0.1.0's (0.1, the default) or "
                   "v0.2.0 to v0.2.2's (0.2: [compile], [quantize.linear.float8], early_stop, dtype)")
    p.add_argument("--out", help="write to this file instead of standard output")
    p.add_argument("--study", help="export a stored row of this study instead of a scenario file")
    p.add_argument("--storage", default=None, help="study storage (as for cosearch best/pareto)")
    p.add_argument("--rank", type=int, default=None, help="row of the study's Pareto front (1 = first, as printed by "
                   "cosearch pareto; default 1)")
    p.add_argument("--trial", type=int, default=None, help="trial number in the study (as printed by cosearch best)")
    p.set_defaults(func=run)


def study_scenario(name: str, storage: str | None, rank: int | None, trial: int | None) -> dict[str, Any]:
    """The stored scenario of a study's Pareto row ``rank`` (1-based) or of trial ``trial``."""
    from ..study import load_study, pareto_front

    study = load_study(name, storage)
    if rank is not None and trial is not None:
        raise CosearchError("--rank", "give --rank or --trial, not both")
    if trial is None:
        rank = 1 if rank is None else rank
        front = pareto_front(study)
        if rank < 1 or rank > len(front):
            raise CosearchError("--rank", f"the study's front has {len(front)} rows (got {rank})")
        trial = int(front["trial"].iloc[rank - 1])
    for t in study.get_trials(deepcopy=False):
        if t.number == trial and "scenario" in t.user_attrs:
            return dict(t.user_attrs["scenario"])
    raise CosearchError("--trial", f"no stored trial {trial} with a scenario in study {name!r}")


def run(args: argparse.Namespace) -> int:
    version = args.torchtitan_version
    if version is not None:
        from ..frameworks.torchtitan import layout_version

        layout_version(version)
        if args.format != "torchtitan":
            raise CosearchError("--torchtitan-version", f"applies to --format torchtitan only (got --format "
                                f"{args.format})")
    if args.study:
        if args.scenario:
            raise CosearchError("scenario", "give a scenario file or --study, not both")
        source: Any = study_scenario(args.study, args.storage, args.rank, args.trial)
    elif args.scenario:
        if args.rank is not None or args.trial is not None:
            raise CosearchError("--rank", "--rank/--trial select a row of --study")
        source = args.scenario
    else:
        raise CosearchError("scenario", "give a scenario file or --study NAME")
    from ..estimate import estimate
    from ..scenario import load_scenario
    from ..storages import storage_file
    from .estimate import no_fit_line

    refuse_overwrite("--out", args.out, {"scenario file": args.scenario if args.scenario else None,
                                          "study's storage": storage_file(args.storage) if args.study else None})
    sc = load_scenario(source)  # read and validated once: export and estimate both take the Scenario
    text = export(sc, args.format) if version is None else export(sc, args.format, version=version)
    nofit = no_fit_line(estimate(sc))
    if nofit:  # exported as asked, but the user should know before launching it
        print(f"warning: {nofit} (cosearch estimate); the launch would likely run out of memory", file=sys.stderr)
    if args.out:
        write_output("--out", args.out, lambda p: Path(p).write_text(text))
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0

