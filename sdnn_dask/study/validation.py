"""Checking what a user gives the study layer: :exc:`StudyError`, and the small checks,
messages and keys that problems, run specs and studies share."""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


class StudyError(ValueError):
    """A study, a spec or a problem that cannot be run as given (the message says why)."""


def say(progress: Callable[[str], None] | None, message: str) -> None:
    """Pass ``message`` to ``progress`` when there is one (a step said to the user)."""
    if progress is not None:
        progress(message)


def digest(fields: dict[str, Any]) -> str:
    """A short stable id of ``fields`` (their JSON, sorted, hashed): a spec's key."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def choice(what: str, value: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else :exc:`StudyError` naming the nearest."""
    if value not in choices:
        raise StudyError(f"{what} {value!r}: unknown{nearest(value, choices)}; choose from "
                         f"{', '.join(choices)}")
    return value


def nearest(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word``, or nothing."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (a NumPy one too), and not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
