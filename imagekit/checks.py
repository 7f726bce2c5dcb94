"""One host-side check of an image (structure, labels): pure value, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One check: its name, whether it held, and what was seen."""

    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        """The check as a results-file entry."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}
