"""Errors whose message is meant for the user: one line, no traceback."""


class RacerError(Exception):
    """Base class; front ends print str(error) and exit or show an error view."""


class ModelLoadError(RacerError):
    """A model could not be found, read or used."""


class InputError(RacerError):
    """A prompt, question file or parameter the engine cannot accept."""
