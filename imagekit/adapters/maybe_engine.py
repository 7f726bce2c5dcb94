"""The engine where one answers, for commands that merely read from it when they can: `doctor`
on a GPU node with no engine, `bake` reading its bases' epochs."""

from __future__ import annotations

import os

from imagekit.adapters.engine import DockerEngine, open_engine
from imagekit.build.reproducible import epoch_from
from imagekit.errors import ImagekitError
from imagekit.kernel.engine import EngineInfo


def engine_or_why() -> tuple[EngineInfo | None, str]:
    """The engine's facts, or None and why not: `doctor` also runs on GPU nodes with no
    engine, where that is a finding, not a failure."""
    try:
        return open_engine().info(), ""
    except ImagekitError as exc:
        return None, exc.message


def engine_if_answering(ping_timeout_s: int = 5) -> DockerEngine | None:
    """The engine, where one answers within `ping_timeout_s`; None where none does."""
    try:
        return open_engine(ping_timeout_s=ping_timeout_s)
    except ImagekitError:
        return None


def bake_epochs() -> tuple[int | None, DockerEngine | None]:
    """Where bake's epochs come from: the caller's SOURCE_DATE_EPOCH, else the bases in the
    local engine where one answers (no engine is asked when the epoch is given)."""
    epoch = epoch_from(os.environ)
    return epoch, None if epoch is not None else engine_if_answering()
