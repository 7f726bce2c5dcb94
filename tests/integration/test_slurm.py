"""`imagekit verify --slurm` on a real Slurm cluster (tests/integration/hpc.py: Debian's
slurmctld and munged here, two slurmd compute nodes in boxes sharing a folder), submitted by a
real non-root account, the probes under Charliecloud on the nodes (issue 48).

- The CPU demo images pass with the same levels and results as Docker's verify, `--nodes 2`
  runs ddp_nodes across both Slurm nodes with the rendezvous taken from Slurm, and the records
  land in the account's `results/<run>/` as a local verify writes them.
- A job that runs out of its time limit is that image's clear result (timeout, naming Slurm's
  TIMEOUT), and SIGTERM to the verify cancels its running job: none is left in the queue and
  the run's folder is kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import ROOT, DemoBuild
from tests.integration.hpc import HELD, Cluster, slurm_cluster
from tests.integration.test_first_hour import Person, host_account

pytestmark = [pytest.mark.integration]

SLIM, FULL = "2.13.0-cpu-py3.11-slim", "2.13.0-cpu-py3.11-full"
HANG = """PROBE = {"needs_gpu": False, "timeout_s": 600, "flavours": ["slim", "full"]}


def run(device, expected):
    import time

    time.sleep(3600)
"""


@pytest.fixture(scope="module")
def researcher() -> Iterator[Person]:
    with host_account("iks") as person:
        yield person


@pytest.fixture(scope="module")
def cluster(engine: docker.DockerClient, researcher: Person) -> Iterator[Cluster]:
    with slurm_cluster(engine, [researcher]) as running:
        yield running


@pytest.fixture
def project(cluster: Cluster, researcher: Person) -> Path:
    """The account's folder on the cluster filesystem, where it types its commands."""
    folder = cluster.shared / f"{researcher.name}-{os.urandom(3).hex()}"
    folder.mkdir()
    shutil.chown(folder, researcher.uid, researcher.gid)
    return folder


def typed(person: Person, cluster: Cluster, folder: Path, *args: str) -> list[str]:
    """`imagekit ARGS` as `person` types it on the cluster's login node (this host)."""
    return [
        "env", f"SLURM_CONF={cluster.conf}", f"PATH={os.environ['PATH']}",
        sys.executable, "-m", "imagekit", *args,
    ]  # fmt: skip


def test_the_demo_images_pass_under_slurm_as_under_docker_with_ddp_across_two_nodes(
    researcher: Person, cluster: Cluster, project: Path, demo_build: DemoBuild, demo_verify: dict
) -> None:
    matrix = project / "matrix.yaml"
    shutil.copyfile(demo_build.matrix, matrix)
    matrix.chmod(0o644)
    argv = typed(researcher, cluster, project, "verify", "--matrix", str(matrix), "--slurm",
                 "--runtime", "charliecloud", "--nodes", "2", "--json")  # fmt: skip
    done = researcher.run(*argv, cwd=project, timeout_s=1500)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    run = project / "results" / data["run_id"]
    for name in (SLIM, FULL):
        verify = data["images"][name]["verify"]
        docker_verify = demo_verify["data"]["images"][name]["verify"]
        assert verify["runtime"] == "charliecloud", name
        assert verify["levels"] == docker_verify["levels"], (name, verify["levels"])
        statuses = {p["probe"]: p["status"] for p in verify["probes"]}
        assert statuses["ddp_nodes"] == "pass", (name, statuses)
        nodes = next(p for p in verify["probes"] if p["probe"] == "ddp_nodes")
        assert nodes["facts"]["nodes"] == 2 and nodes["facts"]["world_size"] == 2, nodes
        assert json.loads((run / "images" / f"{name}.json").read_text())["verify"] == verify
    assert "under charliecloud" in (run / "summary.md").read_text()
    assert cluster.jobs(researcher.name) == []
    assert not any((run / "slurm").glob("*")), "the exports and job folders went"
    site = researcher.run(
        *typed(researcher, cluster, project, "report", "--html", "site"), cwd=project
    )
    assert site.returncode == 0, site.stderr[-2000:]
    pages = "".join(p.read_text() for p in (project / "site").rglob("*.html"))
    assert "linux/amd64 under charliecloud" in pages


def test_the_seeds_autograd_examples_run_through_srun_ch_run_with_no_extra_flag(
    researcher: Person, cluster: Cluster, project: Path, demo_build: DemoBuild
) -> None:
    """As docs/how-to/hpc.md says: export, then `srun ... ch-run -b DIR:/mnt IMAGE -- python3
    SCRIPT` on both nodes; no --set-env."""
    slim = str(demo_build.records[SLIM]["build"]["reference"])
    exported = researcher.run(
        *typed(researcher, cluster, project, "export", slim, "--out", "slim"), cwd=project
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    examples = project / "examples"
    examples.mkdir()
    for name in ("_probekit.py", "autograd.py", "higher_order.py"):
        shutil.copyfile(ROOT / "probes" / name, examples / name)
    subprocess.run(["chown", "-R", f"{researcher.uid}:{researcher.gid}", str(examples)], check=True)
    for example in ("autograd.py", "higher_order.py"):
        done = researcher.run(
            "env", f"SLURM_CONF={cluster.conf}", "srun", "-N2", "--ntasks-per-node=1", "ch-run",
            f"--bind={examples}:/mnt", str(project / "slim"), "--", "python3", f"/mnt/{example}",
            cwd=project, timeout_s=300,
        )  # fmt: skip
        assert done.returncode == 0, (example, done.stderr[-2000:])
        reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert [r["status"] for r in reports] == ["pass", "pass"], (example, done.stdout)


def test_a_job_out_of_time_is_its_images_result_and_sigterm_cancels_the_jobs(
    researcher: Person, cluster: Cluster, project: Path, demo_base: str
) -> None:
    """On the demo's base (Python, no torch: the runner needs none, and its export is a
    quarter of the slim's), a probe that hangs. Beside them (the minute the time limit takes),
    a third verify in a partition that never starts its jobs gives up at --pending-limit."""
    probes = project / "probes"
    shutil.copytree(ROOT / "probes", probes, ignore=shutil.ignore_patterns("__pycache__"))
    (probes / "hang.py").write_text(HANG)
    subprocess.run(["chown", "-R", f"{researcher.uid}:{researcher.gid}", str(probes)], check=True)
    common = ("verify", demo_base, "--slurm", "--runtime", "charliecloud", "--probes-dir",
              str(probes), "--probes", "hang", "--no-structure", "--json")  # fmt: skip
    # Both at once: the time limit takes a minute, and the cluster has a node for each.
    out_of_time = researcher.popen(
        *typed(researcher, cluster, project, *common, "--time-limit", "1", "--results", "late"),
        cwd=project,
    )
    stopped = researcher.popen(
        *typed(researcher, cluster, project, *common, "--results", "stopped"), cwd=project
    )
    held = researcher.popen(
        *typed(researcher, cluster, project, *common, "--results", "held", "--partition", HELD,
               "--pending-limit", "1"),
        cwd=project,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while len([j for j in cluster.jobs(researcher.name) if j.endswith("RUNNING")]) < 2:
            assert time.monotonic() < deadline, cluster.jobs(researcher.name)
            assert stopped.poll() is None and out_of_time.poll() is None
            time.sleep(1)
        stopped.send_signal(signal.SIGTERM)
        _, said = stopped.communicate(timeout=60)
        assert stopped.returncode not in (0, None) and "Traceback" not in said, said
        assert "interrupted" in said
        (run,) = (project / "stopped").iterdir()
        assert (run / "run.json").exists()
        deadline = time.monotonic() + 30
        while len([j for j in cluster.jobs(researcher.name) if not j.endswith("PENDING")]) > 1:
            assert time.monotonic() < deadline, cluster.jobs(researcher.name)  # one runs on
            time.sleep(1)
        out, err = out_of_time.communicate(timeout=400)
        gave_up, gave_up_said = held.communicate(timeout=300)
    finally:
        for process in (stopped, out_of_time, held):
            if process.poll() is None:
                process.kill()
    assert out_of_time.returncode == 5, err[-3000:]
    (record,) = json.loads(out)["images"].values()
    (hang,) = record["verify"]["probes"]
    assert hang["status"] == "timeout", hang
    run = project / "late" / json.loads(out)["run_id"]
    log = next((run / "logs").glob("*.verify.log")).read_text()
    assert "ended TIMEOUT: Slurm ended it at its time limit" in log
    # The held job: its reason said while it waited, then cancelled, a clear result.
    assert held.returncode == 5 and "Traceback" not in gave_up_said, gave_up_said[-3000:]
    assert re.search(r"slurm: job \d+ of \S+ is pending: PartitionDown", gave_up_said), gave_up_said
    (record,) = json.loads(gave_up)["images"].values()
    assert [p["status"] for p in record["verify"]["probes"]] == ["error"], record
    run = project / "held" / json.loads(gave_up)["run_id"]
    log = next((run / "logs").glob("*.verify.log")).read_text()
    assert "never started: it was still pending (PartitionDown) at --pending-limit" in log
    assert cluster.jobs(researcher.name) == []
