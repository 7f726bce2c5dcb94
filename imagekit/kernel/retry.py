"""When to try again (pure): exponential backoff, a number of tries, and a total time budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """The delays between tries of one operation.

    The first retry waits `backoff_s`, each next one twice as long; there are at most
    `attempts` tries, and no wait may end past `deadline_s` seconds after the first try
    began (None: no budget). `clock` is injectable for tests.
    """

    attempts: int
    backoff_s: float
    deadline_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def delay_after(self, attempt: int) -> float | None:
        """How long to wait after try number `attempt` (1-based) failed; None: give up."""
        if attempt >= self.attempts:
            return None
        delay = float(self.backoff_s * 2 ** (attempt - 1))
        if self.deadline_s is not None and self.elapsed_s() + delay > self.deadline_s:
            return None
        return delay

    def elapsed_s(self) -> float:
        """Seconds since the first try began."""
        return self.clock() - self.started
