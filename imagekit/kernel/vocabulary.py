"""The domain's closed sets, each spelled once: platforms, flavours, engines, stores, states.

Every value is a `StrEnum`, so it compares equal to the text it stands for, serialises to it in
JSON and records, and is what Typer offers as `choices=`; a typo becomes a type error rather
than a silent mismatch. Pure.
"""

from __future__ import annotations

# The Docker platforms imagekit builds for, and the machine name their wheels carry.
AMD64 = "linux/amd64"
ARM64 = "linux/arm64"
WHEEL_MACHINES = {AMD64: "x86_64", ARM64: "aarch64"}
