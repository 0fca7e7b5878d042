"""User-facing errors: one line that names the field and what is allowed."""
from __future__ import annotations


class CosearchError(ValueError):
    """Bad input. ``str(err)`` is a single line fit for a terminal; the CLI exits with code 2."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)
