"""DDP across two containers of each demo image: a rendezvous, a network of their own, and
nothing left behind however it ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.children import default_stop_signals
from tests.integration.conftest import (
    ROOT,
    DemoBuild,
    Session,
    SessionCa,
    imagekit,
    matrix_text,
)

SLIM = "2.13.0-cpu-py3.11-slim"
FULL = "2.13.0-cpu-py3.11-full"


def nodes_left(engine: docker.DockerClient) -> tuple[list, list]:
    """Containers of multi-node runs, and their networks, still on the engine."""
    containers = engine.containers.list(all=True, filters={"label": "io.imagekit.node"})
    networks = [n for n in engine.networks.list() if n.name.startswith("imagekit-nodes-")]
    return containers, networks


def verify_nodes(image: str, tmp_path: Path, *extra: str):
    return imagekit(
        "verify",
        image,
        "--probes",
        "env",
        "--no-structure",
        "--nodes",
        "2",
        "--results",
        str(tmp_path / "results"),
        "--json",
        *extra,
    )


@pytest.mark.parametrize("flavour", [SLIM, FULL])
def test_two_containers_train_one_ddp_step_together(
    demo_build: DemoBuild, engine: docker.DockerClient, tmp_path: Path, flavour: str
) -> None:
    started = time.monotonic()
    result = verify_nodes(demo_build.records[flavour]["build"]["reference"], tmp_path)
    wall_s = time.monotonic() - started
    assert result.code == 0, result.stderr[-3000:]
    verify = next(iter(json.loads(result.stdout)["images"].values()))["verify"]
    nodes = next(r for r in verify["probes"] if r["probe"] == "ddp_nodes")
    assert nodes["status"] == "pass", nodes
    assert nodes["facts"]["backend"] == "gloo" and nodes["facts"]["world_size"] == 2
    assert nodes["facts"]["transport"] == "TCP" and nodes["facts"]["nodes"] == 2
    names = {c["name"] for c in nodes["checks"]}
    assert "node 1 rank 0: gradients are the average over every rank of every node" in names
    assert "node 0 rank 0: ranks of every node took part" in names
    assert nodes_left(engine) == ([], [])
    print(f"{flavour}: verify --nodes 2 took {wall_s:.1f}s")


def _probes_with(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "probes"
    shutil.copytree(ROOT / "probes", folder)
    original = (folder / "ddp_nodes.py").read_text()
    # The broken node misbehaves before the probe's own code runs its step.
    (folder / "ddp_nodes.py").write_text(
        original.replace("def main() -> int:\n", "def main() -> int:\n" + text, 1)
    )
    return folder


def test_a_node_that_crashes_is_reported_on_that_node(
    demo_build: DemoBuild, engine: docker.DockerClient, tmp_path: Path
) -> None:
    folder = _probes_with(
        tmp_path,
        '    if os.environ.get("GROUP_RANK") == "1":\n'
        '        raise SystemExit("node 1 fell over on purpose")\n',
    )
    image = demo_build.records[SLIM]["build"]["reference"]
    # The node that fell over is named whichever way the run ends: by node 0's time limit
    # (30 s, as for the node that never joins) or by the rendezvous giving up first.
    result = verify_nodes(image, tmp_path, "--probes-dir", str(folder), "--timeout-s", "30")
    assert result.code == 5, result.stderr[-3000:]
    verify = next(iter(json.loads(result.stdout)["images"].values()))["verify"]
    nodes = next(r for r in verify["probes"] if r["probe"] == "ddp_nodes")
    assert nodes["status"] in ("error", "timeout"), nodes
    assert "node 1" in nodes["reason"], nodes["reason"]
    assert nodes_left(engine) == ([], [])


def test_a_node_that_never_joins_ends_in_a_timeout_within_the_limit(
    demo_build: DemoBuild, engine: docker.DockerClient, tmp_path: Path
) -> None:
    folder = _probes_with(
        tmp_path,
        '    if os.environ.get("GROUP_RANK") == "1":\n'
        "        import time\n\n"
        "        time.sleep(3600)\n",
    )
    image = demo_build.records[SLIM]["build"]["reference"]
    started = time.monotonic()
    # 30 s: time enough for a healthy node to start and wait at the rendezvous on a busy
    # machine; the bound is what is tested, and each second of it is waited out in full.
    result = verify_nodes(image, tmp_path, "--probes-dir", str(folder), "--timeout-s", "30")
    elapsed = time.monotonic() - started
    assert result.code == 5, result.stderr[-3000:]
    verify = next(iter(json.loads(result.stdout)["images"].values()))["verify"]
    nodes = next(r for r in verify["probes"] if r["probe"] == "ddp_nodes")
    assert nodes["status"] == "timeout", nodes
    assert elapsed < 30 + 60 + 60  # the probes' limit, the nodes' limit, start-up
    assert nodes_left(engine) == ([], [])


def test_sigterm_during_a_multi_node_probe_leaves_no_container_and_no_network(
    demo_build: DemoBuild, engine: docker.DockerClient, tmp_path: Path
) -> None:
    folder = _probes_with(tmp_path, "    import time\n\n    time.sleep(3600)\n")
    image = demo_build.records[SLIM]["build"]["reference"]
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "imagekit", "verify", image, "--probes", "env"),
            *("--no-structure", "--nodes", "2", "--probes-dir", str(folder)),
            *("--results", str(tmp_path / "results")),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CI": "true"},
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            running = engine.containers.list(filters={"label": "io.imagekit.node"})
            if len(running) == 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the two nodes never ran")
        time.sleep(2)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr[-2000:]
    assert nodes_left(engine) == ([], [])


@dataclass(frozen=True)
class RdmaSlim:
    matrix: Path
    results: Path
    image_id: str


@pytest.fixture(scope="module")
def rdma_slim(
    session: Session,
    session_ca: SessionCa,
    wheelhouse: Path,
    demo_base: str,
    demo_build: DemoBuild,
    tmp_path_factory: pytest.TempPathFactory,
) -> RdmaSlim:
    """The demo's slim with the RDMA stack: a neighbour of the demo's slim, built after it by
    the same builder from the same inputs but the runtime stage's (the session's CA bundle too,
    as the demo build's), so its builder stage comes from the demo's build cache, as on a CI
    runner that built the neighbour first. That both make the same venv cold is
    test_build_cache.py's (two cold builds on two engines)."""
    folder = tmp_path_factory.mktemp("rdma")
    text = matrix_text(session.repository.replace("/", "-rdma/"), demo_base)
    matrix = folder / "matrix.yaml"
    matrix.write_text(text.replace("  slim:\n", "  slim:\n    rdma: true\n", 1))
    built = imagekit(
        "build", "--matrix", str(matrix), "--flavour", "slim", "--wheelhouse", str(wheelhouse),
        "--ca-cert", str(session_ca.path), "--results", str(folder / "results"), "--json",
    )  # fmt: skip
    assert built.code == 0, built.stderr[-3000:]
    (record,) = json.loads(built.stdout)["results"]
    assert record["builder"] == demo_build.records[SLIM]["build"]["builder"]
    return RdmaSlim(matrix, folder / "results", str(record["image_id"]))


def test_a_flavour_that_asks_for_rdma_carries_a_libibverbs_that_loads(rdma_slim: RdmaSlim) -> None:
    result = imagekit(
        "verify",
        "--matrix",
        str(rdma_slim.matrix),
        "--flavour",
        "slim",
        "--probes",
        "env",
        "--no-structure",
        "--results",
        str(rdma_slim.results),
        "--json",
    )
    assert result.code == 0, result.stderr[-3000:]
    verify = next(iter(json.loads(result.stdout)["images"].values()))["verify"]
    assert verify["labels"]["io.imagekit.rdma"] == "yes"
    env = next(r for r in verify["probes"] if r["probe"] == "env")
    check = next(c for c in env["checks"] if "RDMA" in c["name"])
    assert check["ok"] and check["detail"] == "loads"


def test_its_venv_layers_are_the_demo_slims_byte_for_byte(
    engine: docker.DockerClient, rdma_slim: RdmaSlim, demo_build: DemoBuild
) -> None:
    """Two slims of one cell, each with its own runtime stage (the RDMA stack) and the same
    venv: the venv's layers (build/venv_layers.py), copied onto another parent, have the same
    diff ids, so a host that pulled one fetches only the other's runtime stage."""
    slots = 3  # a CPU cell's: deps, torch, imagekit, the last of slim's layers

    def layers(image_id: str) -> list[str]:
        return list(engine.images.get(image_id).attrs["RootFS"]["Layers"])

    demo = layers(demo_build.records[SLIM]["build"]["image_id"])
    rdma = layers(rdma_slim.image_id)
    assert demo[:1] == rdma[:1] and demo[1] != rdma[1]  # the same base, another runtime stage
    assert demo[-slots:] == rdma[-slots:]
