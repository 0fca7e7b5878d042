"""The rich console every command prints tables with."""
from __future__ import annotations

from rich.console import Console

#: Width when output is piped or captured: rich's 80-column default truncates or wraps table cells.
PIPED_WIDTH = 160


def console() -> Console:
    """A console on stdout: the terminal's width on a terminal, :data:`PIPED_WIDTH` otherwise."""
    c = Console()
    return c if c.is_terminal else Console(width=PIPED_WIDTH)
