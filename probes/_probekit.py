"""Shared by every probe: its name, how it records checks and reports its one JSON object.

Standard library only: this file runs inside images that do not contain imagekit.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("pass", "fail", "skip", "error", "timeout")
EXIT_CODES = {"pass": 0, "fail": 1, "skip": 0, "error": 2, "timeout": 3}  # in STATUSES order


def probe_name(file: str) -> str:
    """A probe's name is its file's name: `probe_name(__file__)` in `matmul.py` is "matmul"."""
    return Path(file).stem


class Recorder:
    """Collects one probe's checks, metrics and facts, and turns them into its report."""

    def __init__(self, probe: str, device: str) -> None:
        self.probe = probe
        self.device = device
        self.started = time.monotonic()
        self.checks: list[dict[str, Any]] = []
        self.metrics: dict[str, float] = {}
        self.facts: dict[str, Any] = {}

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        """Record one check; returns `ok` so callers can branch on it."""
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        return bool(ok)

    def equal(self, name: str, seen: Any, expected: Any) -> bool:
        """Check `seen == expected`, naming both values."""
        return self.check(name, seen == expected, f"expected {expected!r}, saw {seen!r}")

    def close_to(self, name: str, seen: float, expected: float, tol: float = 1e-6) -> bool:
        """Check two numbers agree within a relative/absolute tolerance."""
        ok = math.isclose(seen, expected, rel_tol=tol, abs_tol=tol)
        return self.check(name, ok, f"expected {expected!r}, saw {seen!r} (tol {tol:g})")

    def metric(self, name: str, value: float) -> None:
        """Record a number; its name carries its unit (`..._ms`, `..._tflops`)."""
        self.metrics[name] = round(float(value), 6)

    def report(self) -> dict[str, Any]:
        """The probe's result: pass only with at least one check and all of them ok."""
        if not self.checks:
            status, reason = "error", "the probe checked nothing"
        elif all(c["ok"] for c in self.checks):
            status, reason = "pass", ""
        else:
            status = "fail"
            failed = [c["name"] for c in self.checks if not c["ok"]]
            reason = "failed: " + ", ".join(failed)
        return result(self.probe, status, reason, self)


def result(
    probe: str, status: str, reason: str = "", recorder: Recorder | None = None
) -> dict[str, Any]:
    """A report object in the protocol's shape."""
    return {
        "schema_version": SCHEMA_VERSION,
        "probe": probe,
        "status": status,
        "reason": reason,
        "device": recorder.device if recorder else "",
        "checks": recorder.checks if recorder else [],
        "metrics": recorder.metrics if recorder else {},
        "facts": recorder.facts if recorder else {},
        "duration_s": round(time.monotonic() - recorder.started, 4) if recorder else 0.0,
    }


def skip(probe: str, reason: str) -> dict[str, Any]:
    """A probe that does not apply here (e.g. needs a GPU)."""
    return result(probe, "skip", reason)


def error(probe: str, exc: BaseException) -> dict[str, Any]:
    """A probe that could not run (import error, crash): never a pass."""
    last = traceback.format_exception(type(exc), exc, exc.__traceback__)[-1].strip()
    return result(probe, "error", f"{type(exc).__name__}: {exc}" if str(exc) else last)


def main_for(probe: str, run: Any) -> None:
    """Run one probe as a script: print its JSON, exit with the code of its status.

    `python env.py [DEVICE [EXPECTED_JSON]]`; DEVICE defaults to cpu, EXPECTED_JSON to {}.
    """
    expected = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    try:
        report = run(device, expected)
    except Exception as exc:
        report = error(probe, exc)
    print(json.dumps(report, sort_keys=True))
    sys.exit(EXIT_CODES[report["status"]])
