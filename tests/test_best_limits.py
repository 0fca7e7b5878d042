"""The budgets of `best` are listed once (``study_queries._LIMITS``): `best` and `why_nothing` build their limits from
it, and `cosearch best` passes its options to them by those names. These tests hold the other places that must agree
with it (the functions' keyword arguments, the CLI option dests) to it."""
from __future__ import annotations

import argparse
import inspect

import pytest

from cosearch.cli import build_parser
from cosearch.study_queries import _LIMITS, _limits, best, why_nothing


@pytest.mark.parametrize("fn", [best, why_nothing])
def test_best_and_why_nothing_take_every_limit_as_a_keyword(fn):
    params = inspect.signature(fn).parameters
    for k in _LIMITS:
        assert k in params and params[k].default is None and params[k].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


def test_best_command_options_are_the_limits():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    dests = {a.dest: a for a in sub.choices["best"]._actions}
    for k in _LIMITS:
        assert k in dests and f"--{k.replace('_', '-')}" in dests[k].option_strings and dests[k].default is None


def test_limits_keeps_the_limits_order_and_nothing_else():
    values = {"objective": "mfu", "study": None, **{k: float(i + 1) for i, k in enumerate(reversed(list(_LIMITS)))}}
    got = _limits(values)
    assert list(got) == list(_LIMITS) and all(got[k] == values[k] for k in _LIMITS)
