"""What the HPC tests start: a non-root account, and a real Slurm cluster from Debian's packages.

The cluster is what a small lab runs, without systemd: `munged` and `slurmctld` on this host
(each on a socket, port and state folder of its own, so a host's own Slurm is never touched),
and two compute nodes, each a box (a container of Debian 12 with `slurmd`, `munged` and
Charliecloud's runtime) on a network of its own. A folder of this host is bound into both at
the same path: the cluster filesystem. Jobs run as the account, which the nodes know by the
same uid. Everything is removed when the block ends: boxes, network, daemons, folders.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from docker.models.networks import Network

from tests.integration.conftest import TEST_LABELS
from tests.integration.engines import box_image
from tests.integration.test_first_hour import Person

BOX_SLURM = "imagekit-box/slurm:bookworm"
BOX_SLURM_INCLUDE = ("slurmd", "slurm-client", "munge", "charliecloud-runtime", "procps")
NODES = ("ikn1", "ikn2")
HELD = "held"  # a partition that is down: its jobs stay pending
# The nodes' /dev/shm: a cluster node's is large; Docker's 64 MB default fails the env probe.
NODE_SHM = "2g"


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its slurm.conf and the folder every node shares."""

    root: Path
    conf: Path
    shared: Path

    def env(self) -> dict[str, str]:
        """What Slurm's commands need to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster, as root."""
        return subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=60,
            env={**os.environ, **self.env()},
        )  # fmt: skip

    def jobs(self, user: str) -> list[str]:
        """`user`'s jobs Slurm still holds, each `ID STATE`."""
        done = self.command("squeue", "-h", "-u", user, "-o", "%i %T")
        return done.stdout.split("\n")[:-1] if done.returncode == 0 else [done.stderr]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def _network(client: docker.DockerClient) -> tuple[Network, str]:
    """A bridge network of the cluster's own, on a subnet no other network holds: (it, the
    subnet's first three numbers)."""
    for _ in range(20):
        prefix = f"172.30.{secrets.randbelow(128) + 64}"
        with contextlib.suppress(docker.errors.APIError):
            pool = docker.types.IPAMPool(subnet=f"{prefix}.0/24", gateway=f"{prefix}.1")
            network = client.networks.create(
                f"ikt-slurm-{secrets.token_hex(3)}",
                driver="bridge",
                ipam=docker.types.IPAMConfig(pool_configs=[pool]),
                labels=TEST_LABELS,
            )
            return network, prefix
    raise RuntimeError("no free subnet for the cluster's network")


def _conf(root: Path, prefix: str, controller_port: int) -> str:
    nodes = "".join(
        f"NodeName={name} NodeAddr={prefix}.{11 + index} CPUs=2 State=UNKNOWN\n"
        for index, name in enumerate(NODES)
    )
    return (
        "ClusterName=imagekit-test\n"
        f"SlurmctldHost={socket.gethostname().split('.')[0]}({prefix}.1)\n"
        f"SlurmctldPort={controller_port}\nSlurmdPort=6818\n"
        f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={root}/munge/socket\n"
        "SlurmUser=root\nSlurmdUser=root\n"
        f"StateSaveLocation={root}/state\nSlurmdSpoolDir=/var/spool/slurmd\n"
        f"SlurmctldPidFile={root}/slurmctld.pid\nSlurmdPidFile=/run/slurmd.pid\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nMpiDefault=none\n"
        "ReturnToService=2\nMinJobAge=300\nSlurmctldTimeout=30\nSlurmdTimeout=30\n"
        "KillWait=5\n"
        f"{nodes}PartitionName=imagekit Nodes={','.join(NODES)} Default=YES "
        "MaxTime=INFINITE State=UP\n"
        # Down: it takes jobs and never starts them (Reason=PartitionDown), a queue that
        # does not move, for verify's --pending-limit.
        f"PartitionName={HELD} Nodes={','.join(NODES)} MaxTime=INFINITE State=DOWN\n"
    )


def _munged(root: Path) -> list[str]:
    munge = root / "munge"
    return [
        "munged", "--force", f"--socket={munge}/socket", f"--key-file={munge}/munge.key",
        f"--pid-file={munge}/munged.pid", f"--log-file={root}/log/munged.log",
        f"--seed-file={munge}/seed",
    ]  # fmt: skip


def _node(
    client: docker.DockerClient, root: Path, name: str, address: str, network: str,
    users: list[Person],
) -> Container:  # fmt: skip
    """One compute node: a box with munged and slurmd, knowing `users` by their uids. ch-run
    makes an unprivileged user namespace, which Docker's default seccomp profile refuses."""
    box = client.containers.create(
        BOX_SLURM, ["sleep", "infinity"], name=f"{network}-{name}", hostname=name,
        labels=TEST_LABELS, shm_size=NODE_SHM,
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        volumes={
            str(root / "shared"): {"bind": str(root / "shared"), "mode": "rw"},
            str(root / "slurm.conf"): {"bind": str(root / "slurm.conf"), "mode": "ro"},
            str(root / "munge" / "munge.key"): {"bind": "/etc/imagekit-munge.key", "mode": "ro"},
        },
        network=network,
    )  # fmt: skip
    client.api.disconnect_container_from_network(str(box.id), network)
    client.api.connect_container_to_network(str(box.id), network, ipv4_address=address)
    box.start()
    munge = root / "munge"
    accounts = " && ".join(f"useradd --uid {u.uid} --no-create-home {u.name}" for u in users)
    setup = (
        f"mkdir -p {munge} /var/spool/slurmd {root}/log && install -m 0400 "
        f"/etc/imagekit-munge.key {munge}/munge.key && chmod 0700 {munge} && "
        f"{' '.join(_munged(root))} && chmod 0755 {munge} && {accounts} && "
        f"slurmd -f {root}/slurm.conf -L /var/log/slurmd.log -N {name}"
    )
    code, output = box.exec_run(["sh", "-c", setup])
    if code != 0:
        raise RuntimeError(f"node {name} did not start: {bytes(output).decode()[-2000:]}")
    return box


@contextlib.contextmanager
def slurm_cluster(client: docker.DockerClient, users: list[Person]) -> Iterator[Cluster]:
    """A Slurm controller here and two compute nodes in boxes, up until the block ends."""
    box_image(BOX_SLURM, BOX_SLURM_INCLUDE, "bookworm")
    root = Path(tempfile.mkdtemp(prefix="imagekit-cluster-"))
    root.chmod(0o755)
    for folder in ("munge", "state", "log", "shared"):
        (root / folder).mkdir(mode=0o755)
    (root / "munge").chmod(0o700)
    (root / "munge" / "munge.key").write_bytes(secrets.token_bytes(1024))
    (root / "munge" / "munge.key").chmod(0o400)
    boxes: list[Container] = []
    network, prefix = _network(client)
    cluster = Cluster(root, root / "slurm.conf", root / "shared")
    try:
        cluster.conf.write_text(_conf(root, prefix, _free_port()))
        subprocess.run(_munged(root), check=True, capture_output=True)
        (root / "munge").chmod(0o755)  # its socket, for every user's sbatch
        subprocess.run(
            ["slurmctld", "-f", str(cluster.conf), "-L", str(root / "log" / "slurmctld.log")],
            check=True, capture_output=True,
        )  # fmt: skip
        for index, name in enumerate(NODES):
            address = f"{prefix}.{11 + index}"
            boxes.append(_node(client, root, name, address, str(network.name), users))
        _wait_idle(cluster)
        yield cluster
    finally:
        for box in boxes:
            with contextlib.suppress(docker.errors.APIError):
                box.remove(force=True, v=True)
        with contextlib.suppress(docker.errors.APIError):
            network.remove()
        for pid_file in (root / "slurmctld.pid", root / "munge" / "munged.pid"):
            _stop(pid_file)
        shutil.rmtree(root, ignore_errors=True)


def _wait_idle(cluster: Cluster, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # One partition's: sinfo -N lists a node once per partition it is in.
        states = cluster.command("sinfo", "-h", "-N", "-p", "imagekit", "-o", "%T").stdout.split()
        if len(states) == len(NODES) and all(s == "idle" for s in states):
            return
        time.sleep(1)
    log = (cluster.root / "log" / "slurmctld.log").read_text()[-3000:]
    raise RuntimeError(f"the nodes did not come up idle ({states}):\n{log}")


def _stop(pid_file: Path) -> None:
    """Stop the daemon `pid_file` names, and wait until it is gone."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
