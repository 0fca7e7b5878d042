"""``cosearch report --study NAME [--storage URL] --out report.html [--png DIR]``."""
from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

from ..errors import CosearchError

DEFAULT_JOURNAL = "cosearch_studies.journal"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report of a study (optionally PNGs too)")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", help=f"journal file or RDB URL (default ./{DEFAULT_JOURNAL})")
    p.add_argument("--out", required=True, help="HTML file to write")
    p.add_argument("--png", metavar="DIR", help="also write static PNGs (matplotlib) to this folder")
    p.set_defaults(func=run)


def open_study(name: str, storage_url: str | None):
    """Load an existing study by name; one-line errors for a missing storage or study."""
    import optuna

    from ..storages import resolve_storage

    if storage_url is None and not Path(DEFAULT_JOURNAL).exists():
        raise CosearchError("--storage", f"no ./{DEFAULT_JOURNAL} here; run `cosearch run` first or pass --storage")
    if storage_url is not None and "://" not in storage_url and not Path(storage_url).expanduser().exists():
        raise CosearchError("--storage", f"journal file {storage_url!r} does not exist")
    storage = resolve_storage(storage_url, must_exist=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = [s.study_name for s in storage.get_all_studies()]
    if name not in names:
        known = ", ".join(sorted(names)[:20]) or "none"
        raise CosearchError("--study", f"no study named {name!r} in this storage (studies: {known})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna.load_study(study_name=name, storage=storage)


def run(args: argparse.Namespace) -> int:
    from .._files import refuse_overwrite
    from ..storages import storage_file
    from ..study_queries import unfinished_note
    from ..visualization import write_report

    refuse_overwrite("--out", args.out, {"study's storage": storage_file(args.storage)})
    study = open_study(args.study, args.storage)
    note = unfinished_note(study)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    rep = write_report(study, args.out, png_dir=args.png)
    logging.getLogger(__name__).info("plots: %s", ", ".join(rep.plots))
    print(f"wrote {rep.path} ({rep.path.stat().st_size / 1e6:.1f} MB; plots: {', '.join(rep.plots) or 'none'})")
    for note in rep.notes:
        print(f"note: {note}")
    for p in rep.pngs:
        print(f"wrote {p}")
    return 0
