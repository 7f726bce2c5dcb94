"""Progress events that the use cases emit.

A use case never prints; it calls an `EventSink`. The CLI picks the view that shows them
(imagekit/adapters/progress.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class EventKind(StrEnum):
    """What happened to an image."""

    STARTED = "started"  # its work began
    STEP = "step"  # it moved on to the next step (a build step, a probe)
    FINISHED = "finished"  # its work ended, well or not: the message says which


@dataclass(frozen=True)
class Event:
    """Something happened to one image."""

    kind: EventKind
    image: str
    message: str = ""
    status: str = ""  # a finished image's outcome, as its record says it (built, pass ...)
    log_lines: tuple[str, ...] = ()  # a finished build's log, for a view that folds it


class EventSink(Protocol):
    """Receives events; must be safe to call from several build threads."""

    def __call__(self, event: Event) -> None: ...
