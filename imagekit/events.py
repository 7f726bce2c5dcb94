"""Progress events that orchestration emits.

Orchestration never prints; it calls an `EventSink`. The CLI picks the view that shows them
(imagekit/cli/views.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Event:
    """Something happened to one image: `kind` is started | step | line | finished."""

    kind: str
    image: str
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)


class EventSink(Protocol):
    """Receives events; must be safe to call from several build threads."""

    def __call__(self, event: Event) -> None: ...
