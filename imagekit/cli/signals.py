"""SIGINT, SIGTERM and SIGHUP end a command the same way: cleaned up, records kept.

GitHub Actions cancels a job with SIGINT then SIGTERM, Kubernetes and `timeout` send SIGTERM,
a closed terminal sends SIGHUP. Each is raised in the main thread as `Stopped` (a
KeyboardInterrupt, so every `finally` that removes a container runs, as for Ctrl-C), and the
exit status is 128 + the signal's number (130, 143, 129). From the first signal on, the others
are ignored, so that a second one cannot cut the cleanup short and leave a container behind.
A signal the process was started with ignored (a background job's SIGINT) stays ignored.
"""

from __future__ import annotations

import signal
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by a signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended."""
        return 128 + self.signum


def _stop(signum: int, frame: FrameType | None) -> None:
    for sig in HANDLED:
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def install() -> None:
    """Handle the stop signals (in the main thread, before any command runs)."""
    for sig in HANDLED:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _stop)
