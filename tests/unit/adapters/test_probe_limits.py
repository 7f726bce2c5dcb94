"""The CPUs a probe container may use: a limit always, leaving the host a core where it can."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.adapters.probe_container import cpu_limit, hardening
from imagekit.verify.ports import ProbeRequest
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations


@pytest.mark.parametrize(("cpus", "limit"), [(None, 1), (1, 1), (2, 2), (3, 2), (64, 63)])
def test_every_cpu_but_one_where_the_engine_has_more_than_two(cpus: int | None, limit: int) -> None:
    assert cpu_limit(cpus) == limit * 1_000_000_000


def test_the_probe_containers_fence_carries_the_cpu_limit(tmp_path: Path) -> None:
    request = ProbeRequest(
        "img", tmp_path, ("env",), ProbeExpectations(), ProbeDevice.CPU, False, 60.0, 1 << 30
    )
    fence = hardening(request, 16)
    assert fence["nano_cpus"] == 15_000_000_000
    assert fence["pids_limit"] > 0 and fence["read_only"] and fence["cap_drop"] == ["ALL"]
