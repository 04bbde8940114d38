"""Ctrl-C for the commands: Python's SIGINT handler, put back after Polars takes it.

Importing Polars installs a native SIGINT handler of its own, which cancels the query
running at the time (on whichever thread) and raises there as well as in the main thread:
an analysis running on a worker thread swallowed the interrupt, and a long command went on.
With Python's handler back, Ctrl-C raises KeyboardInterrupt in the main thread only, and
`tracekit.cli.main` turns it into one line and exit 130.
"""

from __future__ import annotations

import signal
import threading


def python_handles_sigint() -> None:
    """Import Polars (a no-op once imported, on any thread: the import lock waits for it to
    finish) and give SIGINT back to Python. Only the main thread may set a handler; called
    elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    import polars  # noqa: F401  (its import is what replaces the handler)

    signal.signal(signal.SIGINT, signal.default_int_handler)
