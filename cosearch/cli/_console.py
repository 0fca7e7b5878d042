"""The rich console every command prints tables with. It prints text literally: a study name, path or catalog
entry such as ``[/]`` is user text, never markup (rich would raise MarkupError or swallow it), and no highlighter
scans it (rich's regex highlighter took 13 s on a 20,000-character name). Styles are given as ``style=`` or
:class:`rich.text.Text` parts."""
from __future__ import annotations

from rich.console import Console

#: Width when output is piped or captured: rich's 80-column default truncates or wraps table cells.
PIPED_WIDTH = 160


def console(stderr: bool = False) -> Console:
    """A console on stdout (``stderr``: on stderr): the terminal's width on a terminal, :data:`PIPED_WIDTH` otherwise."""
    c = Console(stderr=stderr, markup=False, highlight=False)
    return c if c.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH, markup=False, highlight=False)
