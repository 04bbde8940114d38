"""The one error type capture raises for bad arguments and unusable set-ups."""

from __future__ import annotations


class CaptureError(Exception):
    """A capture cannot run as asked: bad argument, missing model, unavailable backend.

    The message is one line meant for the user; the CLI prints it and exits with 2.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
