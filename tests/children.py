"""Helpers for the child processes the tests start and send signals to."""

from __future__ import annotations

import signal

# Every signal a test sends to a child to stop it.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def default_stop_signals() -> None:
    """In the child (a `preexec_fn`): the default disposition of every stop signal, as under a
    terminal.

    Started from a background job (`make test &`) a process inherits SIGINT and SIGQUIT
    ignored, and under `nohup` SIGHUP too; imagekit rightly keeps an ignored signal ignored.
    A 45-minute suite is exactly what people start that way, and the tests stand in for a
    person at a terminal.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
