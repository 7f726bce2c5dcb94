"""Reproducible builds: the time a build stamps into its image. Pure.

An image rebuilt from the same inputs should be the same bytes: publish then pushes nothing and
a node pulls nothing. What varies between two builds is time: the build's clock in the image's
config and history, the files' times in each layer, and Python's bytecode, which records its
source's time. Every build therefore gets one epoch (`SOURCE_DATE_EPOCH`):
- the caller's `SOURCE_DATE_EPOCH` where set (a release pipeline's commit time);
- else the parent image's creation time: the base's (pinned by digest, so fixed), and for full
  the epoch its slim was built with (a label; the same base time). A rebuild on a fresh runner
  picks the same epoch by itself.
The Dockerfile declares `ARG SOURCE_DATE_EPOCH` in each stage, so pip and uv compile hash-based
bytecode (`py_compile` does whenever the variable is set), and gives every path a step writes
the epoch's time itself (templates/Dockerfile.j2, layer_venv.py), so every builder commits the
same layers; BuildKit also stamps the epoch into the config and history. BuildKit's own
`rewrite-timestamp` is not used: on Docker 26's containerd store it needs an OCI archive
exported and loaded again, which took half of a cold slim build (81 s against 40 s, measured)
for layers that were already the same.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from imagekit.errors import InputError
from imagekit.kernel import labels as L
from imagekit.kernel.engine import LocalImage

SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"  # the build arg (and the convention's name)

# Docker prints nanoseconds ("2026-12-02T19:39:04.123456789Z"); datetime takes microseconds.
_CREATED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$")


def epoch_from(environ: Mapping[str, str]) -> int | None:
    """The caller's SOURCE_DATE_EPOCH, checked: seconds since 1970 (a reproducible base or
    image); None where it is not set."""
    text = environ.get(SOURCE_DATE_EPOCH)
    if text is not None and not text.isdigit():
        raise InputError(f"SOURCE_DATE_EPOCH={text!r} is not a number of seconds")
    return int(text) if text else None


def epoch_of(created: str) -> int | None:
    """Whole seconds since 1970 of an engine's `Created` time; None where it says none."""
    match = _CREATED.match(created.strip())
    if not match:
        return None
    zone = match.group(3) or "Z"
    stamp = datetime.fromisoformat(match.group(1) + ("+00:00" if zone == "Z" else zone))
    seconds = int(stamp.timestamp())
    return seconds if seconds > 0 else None  # 0001-01-01 (no time) is no time


def build_epoch(explicit: int | None, parent_created: str, parent_epoch: str = "") -> int | None:
    """The `SOURCE_DATE_EPOCH` of one build: the caller's; else the epoch the parent was built
    with (its `io.imagekit.source-date-epoch` label: a full's slim, whose legacy-builder config
    says when it was built, not from what); else the parent's creation time (a base)."""
    if explicit is not None:
        return explicit
    if parent_epoch.isdigit():
        return int(parent_epoch)
    return epoch_of(parent_created)


def parent_epoch(explicit: int | None, parent: LocalImage | None) -> int | None:
    """`build_epoch` of a build on `parent`: the caller's epoch; else the parent's (its label,
    else its creation time); None where neither is known (no epoch given, no parent here)."""
    if parent is None:
        return explicit
    return build_epoch(explicit, parent.created, parent.labels.get(L.SOURCE_DATE_EPOCH, ""))
