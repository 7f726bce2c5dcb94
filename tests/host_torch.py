"""The mark of a unit test that runs torch on this machine (host mode).

ci.yml's unit job installs imagekit without torch, so these tests skip there; `make test`
installs the CPU torch into the venv and runs them itself, beside the engines' tests, while the
rest of the unit tests run once, in ci.yml's own unit job under act (tests/integration/
test_act.py, scripts/run-tests.sh). So a torch test must be marked here, or it runs nowhere:
test_the_ci_unit_job_passes_under_act fails on any skip in that job with another reason.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TypeVar

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
REASON = "host-mode tests need torch (make test installs it)"

# The marker `make test` selects these by, and the skip where this Python has no torch.
MARK = pytest.mark.host_torch
SKIP = pytest.mark.skipif(not HAS_TORCH, reason=REASON)

Test = TypeVar("Test", bound=Callable[..., object])


def needs_torch(test: Test) -> Test:
    """Mark `test` as a host-mode torch test, skipped where torch is not installed."""
    return MARK(SKIP(test))
