"""The probe container is fenced in: seen from the engine while it runs, and from inside."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.integration.conftest import ROOT, DemoBuild

SLIM = "2.13.0-cpu-py3.11-slim"

# Looks at its own sandbox from inside and reports what it finds as checks.
FENCE = """import os

from _probekit import Recorder, probe_name

PROBE = {"needs_gpu": False, "timeout_s": 30, "flavours": ["slim", "full"]}
NAME = probe_name(__file__)


def writable(path):
    try:
        with open(path, "w") as handle:
            handle.write("x")
        os.unlink(path)
        return True
    except OSError:
        return False


def run(device, expected):
    rec = Recorder(NAME, device)
    with open("/proc/self/status") as handle:
        status = dict(line.split(":", 1) for line in handle if ":" in line)
    cap_eff = status["CapEff"].strip()
    rec.check("no effective capabilities", int(cap_eff, 16) == 0, cap_eff)
    rec.check("no new privileges", status.get("NoNewPrivs", "").strip() == "1", "")
    rec.check("the root filesystem is read-only", not writable("/fence-test"), "")
    rec.check("/usr is read-only", not writable("/usr/fence-test"), "")
    rec.check("/tmp is writable", writable("/tmp/fence-test"), "")
    rec.check("the nonce file is gone", not os.path.exists("/imagekit/probes/.nonce"), "")
    return rec.report()
"""

# Keeps the container running long enough to be inspected from the engine.
LINGER = """from _probekit import Recorder, probe_name

PROBE = {"needs_gpu": False, "timeout_s": 60, "flavours": ["slim", "full"]}
NAME = probe_name(__file__)


def run(device, expected):
    import time

    time.sleep(8)
    rec = Recorder(NAME, device)
    rec.check("lingered", True, "8 s")
    return rec.report()
"""


def test_a_running_probe_container_has_no_capabilities_a_read_only_root_and_limits(
    demo_build: DemoBuild, engine: docker.DockerClient, tmp_path: Path
) -> None:
    probes = tmp_path / "probes"
    shutil.copytree(ROOT / "probes", probes)
    (probes / "fence.py").write_text(FENCE)
    (probes / "linger.py").write_text(LINGER)
    image = demo_build.records[SLIM]["build"]["reference"]
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "imagekit", "verify", image),
            *("--probes", "fence,linger", "--no-structure", "--probes-dir", str(probes)),
            *("--results", str(tmp_path / "results"), "--json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        running: list = []
        while time.monotonic() < deadline and not running:
            running = [
                c
                for c in engine.containers.list(filters={"label": "io.imagekit.image"})
                if c.attrs["Image"] == engine.images.get(image).id
            ]
            time.sleep(0.3)
        assert running, "no probe container ran"
        host = running[0].attrs["HostConfig"]
        verify_run_id = running[0].labels["io.imagekit.run-id"]
        mounts = running[0].attrs["Mounts"]
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-2000:]
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True
    assert "/tmp" in host["Tmpfs"] and "size=1073741824" in host["Tmpfs"]["/tmp"]
    assert host["PidsLimit"] == 4096
    # The probes' declared need (3 GiB each here) plus /dev/shm (2 GiB) and /tmp (1 GiB).
    assert host["Memory"] == (3 << 30) + (2 << 30) + (1 << 30)
    # Every CPU of the engine but one where it has more than two (probe_container.cpu_limit).
    cpus = engine.info()["NCPU"]
    assert host["NanoCpus"] == (cpus - 1 if cpus > 2 else cpus) * 1_000_000_000
    assert host["NetworkMode"] == "none" and host["Privileged"] is False
    assert [(m["Type"], m["Destination"]) for m in mounts] == [("volume", "/imagekit")]
    verify = next(iter(json.loads(stdout)["images"].values()))["verify"]
    fence = next(r for r in verify["probes"] if r["probe"] == "fence")
    assert fence["status"] == "pass", fence["checks"]
    # The container and its volume are gone (this run's: another run may share the engine).
    mine = {"label": f"io.imagekit.run-id={verify_run_id}"}
    assert engine.containers.list(all=True, filters=mine) == []
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(mounts[0]["Name"])
