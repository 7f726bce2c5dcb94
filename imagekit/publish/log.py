"""What the publishers of every mode share: the log of the
records they finish (publish.json, rewritten after each image, and one event per image)."""

from __future__ import annotations

from dataclasses import dataclass, field

from imagekit.events import Event, EventKind, EventSink
from imagekit.kernel.publish_records import PublishRecord
from imagekit.kernel.store import RunStore


@dataclass
class PublishLog:
    """The records of one publish, written to publish.json as each image finishes, so an
    interrupted run keeps what it did."""

    store: RunStore
    events: EventSink
    done: list[PublishRecord] = field(default_factory=list)

    def finished(self, name: str, record: PublishRecord) -> PublishRecord:
        """Record `record` in publish.json and report it."""
        self.done.append(record)
        self.store.write_publish(self.done)
        message = record.status + (": " + "; ".join(record.reasons) if record.reasons else "")
        self.events(Event(EventKind.FINISHED, name, message, record.status))
        return record
