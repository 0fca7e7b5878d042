"""User-facing errors: one line that names the field and what is allowed."""
from __future__ import annotations

import re

#: Longest run of non-blank characters kept from user input echoed in a message (a 400-digit
#: number or a megabyte of junk is cut in the middle, so the error stays one short line).
MAX_TOKEN = 160
_LONG = re.compile(r"\S{%d,}" % (MAX_TOKEN + 1))


def _short(text: str) -> str:
    text = " ".join(str(text).split())  # one line
    return _LONG.sub(lambda m: f"{m.group()[:60]}...{m.group()[-60:]} ({len(m.group())} chars)", text)


class CosearchError(ValueError):
    """Bad input. ``str(err)`` is a single line fit for a terminal; the CLI exits with code 2."""

    def __init__(self, field: str, message: str) -> None:
        self.field = _short(field)
        self.message = _short(message)
        super().__init__(f"{self.field}: {self.message}" if self.field else self.message)
