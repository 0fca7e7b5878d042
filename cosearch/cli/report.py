"""``cosearch report --study NAME [--storage URL] --out report.html [--png DIR]``."""
from __future__ import annotations

import argparse
import logging
import sys

from ..storages import DEFAULT_JOURNAL


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report of a study (optionally PNGs too)")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", help=f"journal file or RDB URL (default ./{DEFAULT_JOURNAL})")
    p.add_argument("--out", required=True, help="HTML file to write")
    p.add_argument("--png", metavar="DIR", help="also write static PNGs (matplotlib) to this folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._files import refuse_overwrite
    from ..storages import storage_file
    from ..study import load_study
    from ..study_queries import unfinished_note
    from ..visualization import write_report

    refuse_overwrite("--out", args.out, {"study's storage": storage_file(args.storage)})
    study = load_study(args.study, args.storage)
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
