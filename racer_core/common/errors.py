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
