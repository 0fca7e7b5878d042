"""Thin command-line front end: parse, call the library, print. Bad input exits with code 2.

Each sub-command lives in its own module with ``register(subparsers)``; add new ones to
:data:`COMMANDS`.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from ..errors import CosearchError

#: Modules under cosearch.cli that define sub-commands, in help order.
COMMANDS = ("estimate", "catalog", "calibrate", "explain", "report", "study", "worker", "export")


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line and exit with code 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse hook
        self.exit(2, f"error: {self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cosearch", description="Performance/cost model and search for distributed transformer training.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"cosearch {__version__}", help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details (also accepted after the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    for cmd in sub.choices.values():  # `cosearch run -v ...` as well as `cosearch -v run ...`
        if not any("-v" in a.option_strings for a in cmd._actions):
            # SUPPRESS: when absent after the command, the value given before it (or False) stays
            cmd.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress details")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except CosearchError as err:
        from ..storages._storage import mask_url

        print(f"error: {mask_url(str(err))}", file=sys.stderr)  # never a password
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cosearch best --json | head`: the reader left; say nothing more
        _quiet_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of the closed pipe raises nothing
    (the Python documentation's recipe for SIGPIPE, "Note on SIGPIPE" in the signal module)."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
