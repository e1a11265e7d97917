"""Errors whose message is meant for the user: one line, no traceback."""

import json


class RacerError(Exception):
    """Base class; front ends print str(error) and exit or show an error view."""


class ModelLoadError(RacerError):
    """A model could not be found, read or used."""


class InputError(RacerError):
    """A prompt, question file or parameter the engine cannot accept."""


def json_error_text(exc: json.JSONDecodeError, line: int = 1) -> str:
    """json's message whole, as "Expecting ',' delimiter: line 2 column 12";
    `line` is the file's line where the parsed text began (a JSON Lines file
    is parsed a line at a time)."""
    return f"{exc.msg}: line {exc.lineno + line - 1} column {exc.colno}"


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its class name when it has none), for a one-line report."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
