"""make bench's HPC section: what it costs to take the CPU demo slim to a cluster.

`imagekit export` of the slim to a folder and to a squashfs file, and `imagekit verify --slurm
--runtime charliecloud` of it on the test cluster (tests/integration/hpc.py: slurmctld here,
two slurmd boxes), typed by a non-root account in the cluster's shared folder. Figures only:
the issue names no targets for them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.hpc import slurm_cluster  # noqa: E402
from tests.integration.test_first_hour import host_account  # noqa: E402


def _timed(argv: list[str], **kwargs: object) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:4])} failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def hpc_figures(client: docker.DockerClient, slim: str, work: Path) -> dict[str, float]:
    """Export seconds (folder, squashfs) and the Slurm verify's wall seconds of `slim`."""
    imagekit = [sys.executable, "-m", "imagekit"]
    print("bench: export to a folder, then to squashfs ...", file=sys.stderr)
    dir_s = _timed([*imagekit, "export", slim, "--out", str(work / "slim")], cwd=ROOT)
    sqfs_s = _timed(
        [*imagekit, "export", slim, "--format", "squashfs", "--out", str(work / "slim.sqfs")],
        cwd=ROOT,
    )
    sqfs_bytes = (work / "slim.sqfs").stat().st_size
    shutil.rmtree(work / "slim", ignore_errors=True)
    print("bench: verify --slurm on the test cluster ...", file=sys.stderr)
    with host_account("ikb") as person, slurm_cluster(client, [person]) as cluster:
        project = cluster.shared / person.name
        project.mkdir()
        shutil.chown(project, person.uid, person.gid)
        started = time.monotonic()
        done = person.run(
            "env", f"SLURM_CONF={cluster.conf}", *imagekit, "verify", slim, "--slurm",
            "--runtime", "charliecloud", cwd=project, timeout_s=1800,
        )  # fmt: skip
        slurm_s = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(f"bench: verify --slurm failed:\n{done.stderr[-3000:]}")
    return {
        "export_dir_s": round(dir_s, 1),
        "export_squashfs_s": round(sqfs_s, 1),
        "export_squashfs_bytes": sqfs_bytes,
        "verify_slurm_wall_s": round(slurm_s, 1),
    }
