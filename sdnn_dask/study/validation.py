"""Checking what a user gives the study layer: :exc:`StudyError`, and the small checks,
messages and keys that problems, run specs and studies share."""

from __future__ import annotations

import difflib
import hashlib
import json
import reprlib
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import Any

import numpy as np

#: The most characters of a user's value that a message quotes (:func:`shown`).
SHOWN_CHARS = 200

#: A bounded repr: a few levels, a few items of each container, never the whole of one.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8


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
        raise StudyError(f"{what} {shown(value)}: unknown{nearest(value, choices)}; choose from "
                         f"{', '.join(choices)}")
    return value


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value``'s repr for a message, cut to about ``limit`` characters.

    Every message that quotes what a user gave (a study file's value, an option) goes
    through here, so a megabyte string or a deep structure cannot flood the terminal: text
    is cut after ``limit`` characters with ``...(N chars)``, a container is shown a few
    items and levels deep (never built whole as a repr) with ``...(N items)``.

    Parameters
    ----------
    value
        What the user gave.
    limit
        The most characters of it shown.

    Returns
    -------
    str
        The repr, whole when short.

    Examples
    --------
    >>> shown("abc")
    "'abc'"
    >>> shown("x" * 1000, limit=5)
    "'xxxxx'...(1000 chars)"
    >>> shown(list(range(100)), limit=20)
    '[0, 1, 2, 3, 4, 5, 6...(100 items)'
    """
    if isinstance(value, str | bytes):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}...({len(value)} chars)"
    text = _SHORT.repr(value)
    if len(text) <= limit and "..." not in text:
        return text
    count = f"({len(value)} items)" if isinstance(value, Sized) else ""
    return f"{text[:limit].removesuffix('...')}...{count}"


def clipped(message: str, limit: int = 5 * SHOWN_CHARS) -> str:
    """``message`` cut after ``limit`` characters with ``...(N chars)``: the last guard of
    what the command line prints, should a message quote something :func:`shown` did not
    cut."""
    return message if len(message) <= limit else f"{message[:limit]}...({len(message)} chars)"


def nearest(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word``, or nothing."""
    text = (word if isinstance(word, str) else shown(word))[:SHOWN_CHARS]
    close = difflib.get_close_matches(text, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (a NumPy one too), and not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
