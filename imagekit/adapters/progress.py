"""Adapter: the event sinks that show the use cases' progress as it happens: a live table on a
terminal, plain lines in CI, `::group::` folding on GitHub Actions."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from imagekit.events import Event, EventKind, EventSink


class PlainView:
    """One line per start, step and finish; in GitHub Actions each image's log is folded."""

    def __init__(self, stream: TextIO | None = None, github: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.github = os.environ.get("GITHUB_ACTIONS") == "true" if github is None else github
        self.started: dict[str, float] = {}
        self.lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self.lock:
            if event.kind is EventKind.STARTED:
                self.started[event.image] = time.monotonic()
                self._write(f"{event.image}: {event.message}")
            elif event.kind is EventKind.STEP:
                elapsed = time.monotonic() - self.started.get(event.image, time.monotonic())
                self._write(f"{event.image}: [{elapsed:5.0f}s] {event.message}")
            elif event.kind is EventKind.FINISHED:
                self._write(f"{event.image}: {event.message}")
                log = event.log_lines
                if self.github and log:
                    self._write(f"::group::{event.image} build log")
                    for line in log:
                        self._write(line)
                    self._write("::endgroup::")

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


class LiveView:
    """A live table of the images being built (rich, on a terminal)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.rows: dict[str, tuple[float, str]] = {}
        self.lock = threading.Lock()
        self.live = Live(self._table(), console=self.console, refresh_per_second=4)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(box=None, show_header=True, header_style="bold")
        table.add_column("image")
        table.add_column("elapsed", justify="right")
        table.add_column("step")
        now = time.monotonic()
        for name, (start, step) in self.rows.items():
            table.add_row(name, f"{now - start:.0f}s", step[:90])
        return table

    def __call__(self, event: Event) -> None:
        with self.lock:
            if event.kind is EventKind.STARTED:
                self.rows[event.image] = (time.monotonic(), event.message)
            elif event.kind is EventKind.STEP and event.image in self.rows:
                self.rows[event.image] = (self.rows[event.image][0], event.message)
            elif event.kind is EventKind.FINISHED:
                self.rows.pop(event.image, None)
                self.console.print(f"{event.image}: {event.message}")
            self.live.update(self._table())


@contextmanager
def event_view() -> Iterator[EventSink]:
    """A live table on a terminal, plain lines otherwise."""
    if sys.stderr.isatty() and os.environ.get("CI") is None:
        with LiveView() as view:
            yield view
    else:
        yield PlainView()
