"""What the structure checks use of pytest-testinfra's docker backend (it ships no types)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class CommandResult(Protocol):
    """What a command run in the container gave (testinfra's, which ships no types)."""

    @property
    def rc(self) -> int: ...
    @property
    def stdout(self) -> str: ...
    @property
    def stderr(self) -> str: ...


class FileState(Protocol):
    """A file of the container, as testinfra's `host.file` sees it."""

    @property
    def exists(self) -> bool: ...


class Backend(Protocol):
    """What runs testinfra's commands in the container (its docker backend)."""

    name: str  # the container's
    run: Callable[..., CommandResult]
    imagekit_checked: bool  # set once `engine_checked` wrapped `run` (read with getattr)


class Host(Protocol):
    """A testinfra host of the container, as the checks use it."""

    @property
    def backend(self) -> Backend: ...
    def run(self, command: str, *args: str) -> CommandResult: ...
    def file(self, path: str) -> FileState: ...
