"""The engines the contract suite runs against besides the default one, each started and
stopped by the test session on sockets and folders of its own:

- `docker-classic`: Docker 26 with the classic image store, listening on 127.0.0.1:PORT as a
  remote engine would (and on a unix socket for what needs this machine's files, `imagekit
  run`), on a bridge of its own. A second daemon with `--bridge none` would delete the host's
  docker0.
- `docker-containerd`: the same Docker 26 with the containerd image store.
- `podman`: Debian's Podman 4.3 serving the Docker API (`podman system service`) with its
  own storage root, as RHEL and rootless users reach it.
- `podman5`: trixie's Podman 5.4, boxed like Docker 26 (a Debian 12 host cannot take it: it
  would upgrade glibc and systemd), serving the Docker API on a socket under /tmp.
- `docker20` (the benchmark's, scripts/bench_speed.py): Debian 12's own Docker 20.10, boxed
  from a bookworm root filesystem (`BOX_DOCKER20`), for a machine whose host engine is another.

Both Docker engines and Podman 5 are *boxed*: dockerd (or podman) runs in a container of the
default engine, made from a Debian 13 root filesystem with trixie's docker.io 26 or podman 5.4
(`imagekit base bootstrap`, kept on the default engine as `BOX_DOCKER` or `BOX_PODMAN` and
reused), so the engine under test does not depend on which engine the host can take (a Debian
12 host: Docker 20.10 and Podman 4.3). The box shares the host's network
and /tmp (its sockets, data and the tests' workspaces are the same paths inside and out) and
nothing else: its own libc, its own process tree, its containers in a cgroup of their own.

Whatever the engines add to the host's network (a bridge, Podman's CNI bridge, iptables
rules and chains) is removed when they stop: the host is left as it was found.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker

START_TIMEOUT_S = 90
# The box Docker 26 runs in: trixie's engine with what dockerd calls (iptables for its checks,
# ps for `docker top`). The tag's include list is the cache key: another list, another box.
BOX_DOCKER = "imagekit-box/docker26:trixie"
BOX_DOCKER_INCLUDE = ("docker.io", "ca-certificates", "iptables", "procps")
# Debian 12's own Docker, 20.10, boxed alike: what a fresh Debian 12 host's `make engine`
# installs, for the benchmark to measure on a host that now runs another.
BOX_DOCKER20 = "imagekit-box/docker20:bookworm"
# The box Podman 5 runs in. runc, not crun: crun 1.21 refuses a host with hybrid cgroups
# ("cgroups in hybrid mode not supported"), which these machines have. No fuse-overlayfs: the
# kernel's overlay serves rootful and rootless storage alike (on a real file system).
BOX_PODMAN = "imagekit-box/podman5:trixie"
BOX_PODMAN_INCLUDE = (
    "podman", "runc", "netavark", "aardvark-dns", "catatonit", "uidmap", "passt", "iptables",
    "ca-certificates", "procps",
)  # fmt: skip
BOX_LABEL = "io.imagekit.base.include"
BOX_LOCK = Path("/tmp/imagekit-box.lock")
# The capabilities an engine in a container is given: each one the host's bounding set holds,
# by name. Neither `--privileged` nor `--cap-add ALL` works everywhere: where the bounding set
# lacks one (these machines lack CAP_SYS_RESOURCE), runc fails to apply it under Docker 20.10
# ("unable to apply caps"), and Docker 26 refuses to drop it ("invalid CapDrop: capability not
# supported"). Names up to CAP_AUDIT_READ (37): what both engines know; none later is needed.
CAPABILITY_NAMES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
)  # fmt: skip


def bounding_capabilities(status: str) -> list[str]:
    """The capability names a /proc/PID/status text's bounding set (CapBnd) holds."""
    match = re.search(r"^CapBnd:\s*([0-9a-f]+)$", status, re.MULTILINE)
    mask = int(match.group(1), 16) if match else 0
    return [name for bit, name in enumerate(CAPABILITY_NAMES) if mask >> bit & 1]


def _capability_options() -> tuple[str, ...]:
    status = Path("/proc/self/status").read_text()
    return tuple(option for name in bounding_capabilities(status) for option in ("--cap-add", name))


# What a container needs to run an engine on these machines: the capabilities above, no
# seccomp or AppArmor filter, and the cgroup hierarchy writable for the inner engine's
# containers.
BOX_RUN_OPTIONS = (
    *_capability_options(),
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
)  # fmt: skip
CGROUP_ROOT = Path("/sys/fs/cgroup")
CNI_STATE = Path("/var/lib/cni")
STOP_TIMEOUT_S = 60


@dataclass
class OtherEngine:
    """An engine started for the tests: how the CLI reaches it, and how to stop it."""

    name: str
    docker_host: str  # what the CLI is given as DOCKER_HOST (tcp:// for docker-classic)
    local_host: str  # a unix socket to the same engine, for `imagekit run`
    root: Path
    process: subprocess.Popen[bytes]
    cleanups: list[list[str]] = field(default_factory=list)
    cgroup: str = ""  # a boxed engine's cgroup parent, removed when it stops
    argv: list[str] = field(default_factory=list)  # how a boxed engine is started (again)

    def env(self, *, local: bool = False) -> dict[str, str]:
        """The environment of a CLI call against this engine."""
        return {"DOCKER_HOST": self.local_host if local else self.docker_host}

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.local_host, version="auto", timeout=600)

    def version(self) -> str:
        """The engine's version, as `docker version` reports it."""
        client = self.client()
        try:
            return str(client.version()["Version"])
        finally:
            client.close()

    def log_tail(self, lines: int = 30) -> str:
        log = self.root / "engine.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_registry(folder: Path) -> Iterator[str]:
    """Debian's docker-registry on a free 127.0.0.1 port, its data in `folder`; its host."""
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RuntimeError("docker-registry is not installed; run `make engine`")
    port = free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {folder / 'data'}}}, "
        "delete: {enabled: true}}\n"
        f"http: {{addr: 127.0.0.1:{port}}}\n"
    )
    process = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    host = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://{host}/v2/", timeout=2)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError("docker-registry did not start") from exc
                time.sleep(0.2)
        yield host
    finally:
        process.terminate()
        process.wait(timeout=10)


def copy_image(source: docker.DockerClient, engine: OtherEngine, reference: str) -> None:
    """Put an image of `source` into `engine` (docker save | docker load), as a pull would."""
    other = engine.client()
    try:
        # Saved by the name asked for: `save(named=True)` names the image by its first tag.
        other.images.load(b"".join(source.api.get_image(reference)))
    finally:
        other.close()


@contextlib.contextmanager
def holding(
    source: docker.DockerClient, reference: str, started: OtherEngine
) -> Iterator[OtherEngine]:
    """The engine `started`, with the image `reference` of `source` put into it (as a pull
    would); stopped, with all it holds, when the block ends."""
    try:
        copy_image(source, started, reference)
        yield started
    finally:
        stop(started)


def _wait_until_it_answers(engine: OtherEngine) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            break
        with contextlib.suppress(Exception):
            client = engine.client()
            client.ping()
            client.close()
            return
        time.sleep(0.5)
    tail = engine.log_tail()  # before stop() removes its folder
    stop(engine)
    raise RuntimeError(f"{engine.name} did not answer:\n{tail}")


def box_image(
    tag: str = BOX_DOCKER, include: tuple[str, ...] = BOX_DOCKER_INCLUDE, suite: str = "trixie"
) -> str:
    """The box image `tag` (Debian `suite` with the packages `include` names), made once per
    machine with `imagekit base bootstrap` and kept on the default engine; made again when its
    include list differs. Sessions running side by side
    wait for each other (a lock file), so it is made once."""
    import fcntl

    wanted = ",".join(include)
    with BOX_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        client = docker.from_env(version="auto")
        try:
            with contextlib.suppress(docker.errors.ImageNotFound):
                if client.images.get(tag).labels.get(BOX_LABEL) == wanted:
                    return tag
        finally:
            client.close()
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
        done = subprocess.run(
            [
                sys.executable, "-m", "imagekit", "base", "bootstrap", "--suite", suite,
                "--variant", "apt", "--include", wanted, "--tag", tag,
            ],
            capture_output=True, text=True, env=env, timeout=900, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"could not make the box {tag}:\n{done.stderr[-3000:]}")
    return tag


def start_docker_classic(
    root: Path, bridge: str, subnet_cidr: str, *, fake_gpu: bool = False
) -> OtherEngine:
    """Docker 26 with the classic store, boxed, on its own bridge, socket and tcp port;
    `fake_gpu`: with CDI on and the fake GPU of `write_fake_gpu_spec`."""
    return start_dockerd(root, bridge, subnet_cidr, fake_gpu=fake_gpu)


def start_docker20(root: Path, bridge: str, subnet_cidr: str) -> OtherEngine:
    """Debian 12's Docker 20.10 (the classic store, its only one), boxed, on its own bridge
    and socket."""
    return start_dockerd(root, bridge, subnet_cidr, docker20=True)


def start_docker_containerd(
    root: Path, bridge: str, subnet_cidr: str, *, nat: bool = True
) -> OtherEngine:
    """Docker 26 with the containerd image store, boxed, on its own bridge and socket."""
    return start_dockerd(root, bridge, subnet_cidr, containerd_store=True, nat=nat)


def start_docker_fresh(root: Path, bridge: str, subnet_cidr: str) -> OtherEngine:
    """An empty dockerd with the containerd store, as a CI runner starts: its own bridge and
    socket, and no way out (its builds must come from what they are given)."""
    return start_docker_containerd(root, bridge, subnet_cidr, nat=False)


# The fake GPU's marks: what a probe inside must see when the engine injected it.
FAKE_GPU_NODE = "/dev/nvidia0"
FAKE_GPU_LIBRARY = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
FAKE_GPU_ENV = ("NVIDIA_FAKE_GPU", "imagekit-tests")


def write_fake_gpu_spec(folder: Path) -> None:
    """A CDI spec of a GPU that is not there, in `folder`: `nvidia.com/gpu=0` and `=all`, each
    a character device (/dev/null) at /dev/nvidia0, with a stub NVML library mounted where the
    driver's would be and a variable set. An engine with CDI on injects it through the very
    request it makes for a real GPU (`nvidia-ctk cdi generate` writes specs of this shape)."""
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / "libnvidia-ml.so.1"
    stub.write_bytes(b"")  # a stub: no program may load it, the probes only look for it
    node = {"path": FAKE_GPU_NODE, "hostPath": "/dev/null"}
    spec = {
        "cdiVersion": "0.6.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": name, "containerEdits": {"deviceNodes": [node]}} for name in ("0", "all")
        ],
        "containerEdits": {
            "env": ["=".join(FAKE_GPU_ENV)],
            "mounts": [
                {
                    "hostPath": str(stub),
                    "containerPath": FAKE_GPU_LIBRARY,
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
            ],
        },
    }
    (folder / "fake-nvidia.json").write_text(json.dumps(spec, indent=2) + "\n")


def start_dockerd(
    root: Path,
    bridge: str,
    subnet_cidr: str,
    *,
    containerd_store: bool = False,
    nat: bool = True,
    fake_gpu: bool = False,
    docker20: bool = False,
) -> OtherEngine:
    """Docker 26 (`docker20`: Debian 12's 20.10), boxed (see the module's docstring), on its
    own bridge, socket and tcp port; `nat`: its containers reach the outside through rules of
    its own. `root` must lie under /tmp, the folder the box shares with the host."""
    if not str(root).startswith("/tmp/"):
        raise ValueError(f"a boxed engine's folder must lie under /tmp: {root}")
    if docker20 and containerd_store:
        raise ValueError("Docker 20.10 has no containerd image store")
    image = box_image(BOX_DOCKER20, suite="bookworm") if docker20 else box_image()
    root.mkdir(parents=True, exist_ok=True)
    gateway, prefix = subnet_cidr.split("/")
    network = gateway.rsplit(".", 1)[0] + f".0/{prefix}"
    cleanups = [["ip", "link", "delete", bridge]]
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", f"{gateway}/{prefix}", "dev", bridge], check=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
    # No iptables of its own: a second dockerd that manages iptables rewrites the shared
    # DOCKER and DOCKER-ISOLATION chains and drops the host daemon's docker0 rules (seen with
    # Docker 26). Its builds reach the mirror through these rules; published ports go through
    # docker-proxy. Each is deleted again when it stops.
    rules = (
        ("nat", "POSTROUTING", ["-s", network, "!", "-o", bridge, "-j", "MASQUERADE"]),
        ("filter", "FORWARD", ["-i", bridge, "-j", "ACCEPT"]),
        ("filter", "FORWARD", ["-o", bridge, "-j", "ACCEPT"]),
    )
    for table, chain, rule in rules if nat else ():
        subprocess.run(["iptables", "-t", table, "-I", chain, "1", *rule], check=True)
        cleanups.append(["iptables", "-t", table, "-D", chain, *rule])
    config = root / "daemon.json"
    # The store is chosen here, whatever /etc/docker/daemon.json says.
    features = {"containerd-snapshotter": True} if containerd_store else {}
    settings: dict[str, object] = {}
    if fake_gpu:
        # CDI on, its specs in a folder this machine sees too (imagekit reads the devices from
        # the folders a local engine names).
        features["cdi"] = True
        settings["cdi-spec-dirs"] = [str(root / "cdi")]
        write_fake_gpu_spec(root / "cdi")
    config.write_text(json.dumps({"features": features, **settings} if features else {}) + "\n")
    sock = root / "docker.sock"
    port = free_port()
    name = root.name
    argv = [
        "docker", "run", "--rm", "--name", name, "--init", "--network", "host",
        *BOX_RUN_OPTIONS, "-v", "/tmp:/tmp", "--label", "io.imagekit.test-box=1",
        image,
        "dockerd",
        "--cgroup-parent", f"/{name}",
        "--config-file", str(config),
        "--data-root", str(root / "data"),
        "--exec-root", str(root / "exec"),
        "--pidfile", str(root / "dockerd.pid"),
        "--host", f"unix://{sock}",
        "--host", f"tcp://127.0.0.1:{port}",
        "--bridge", bridge,
        "--iptables=false",
    ]  # fmt: skip
    # The box goes first, whatever the engine left running in it.
    cleanups.insert(0, ["docker", "rm", "--force", "--volumes", name])
    process = _launch_box(argv, root)
    engine = OtherEngine(
        "docker20" if docker20 else "docker-containerd" if containerd_store else "docker-classic",
        f"tcp://127.0.0.1:{port}",
        f"unix://{sock}",
        root,
        process,
        cleanups,
        cgroup=name,
        argv=argv,
    )
    _wait_until_it_answers(engine)
    return engine


def _launch_box(argv: list[str], root: Path, *, append: bool = False) -> subprocess.Popen[bytes]:
    """Start a box (`docker run` of the default engine, whatever DOCKER_HOST the caller has),
    its output in `root`/engine.log."""
    host_env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    with (root / "engine.log").open("ab" if append else "wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, env=host_env)


def new_cgroup(name: str) -> str:
    """`name` when no cgroup hierarchy has it yet (an engine that makes it removes it when it
    stops); "" when it was there before, and so is not ours to remove."""
    return "" if any((h / name).exists() for h in CGROUP_ROOT.iterdir() if h.is_dir()) else name


def kill(engine: OtherEngine) -> None:
    """Kill a boxed engine as a crash or an OOM kill would: SIGKILL, no clean-up of its own.
    Its containers die with it (they live in the box's process namespace); what it had made
    stays in its folder, as on a machine whose engine is restarted."""
    host_env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    subprocess.run(
        ["docker", "kill", "--signal", "KILL", engine.cgroup],
        capture_output=True, env=host_env, check=False,
    )  # fmt: skip
    engine.process.wait(timeout=STOP_TIMEOUT_S)
    subprocess.run(
        ["docker", "rm", "--force", engine.cgroup], capture_output=True, env=host_env, check=False
    )


def restart(engine: OtherEngine) -> None:
    """Start a killed boxed engine again on its folder, socket and port."""
    # Runtime state of the engine that died: its pid files name pids that, in the new box's
    # process namespace, are other processes (dockerd would wait on "containerd still running").
    (engine.root / "dockerd.pid").unlink(missing_ok=True)
    shutil.rmtree(engine.root / "exec", ignore_errors=True)
    engine.process = _launch_box(engine.argv, engine.root, append=True)
    _wait_until_it_answers(engine)


def start_podman(root: Path, insecure_registries: tuple[str, ...] = ()) -> OtherEngine:
    """`podman system service` on a socket of its own, with storage of its own; the registries
    named are plain http (`insecure = true` in a registries.conf of its own)."""
    if shutil.which("podman") is None:
        raise RuntimeError("no podman: run `make test` (it installs Debian's podman)")
    root.mkdir(parents=True, exist_ok=True)
    sock = root / "podman.sock"
    cleanups = []
    if not CNI_STATE.exists():  # CNI's cached results and IPAM leases of Podman's network
        cleanups.append(["rm", "-rf", str(CNI_STATE)])
    argv = [
        "podman",
        "--root", str(root / "storage"),
        "--runroot", str(root / "run"),
        "system", "service", "--time=0", f"unix://{sock}",
    ]  # fmt: skip
    conf = root / "registries.conf"
    conf.write_text(
        "".join(f'[[registry]]\nlocation = "{h}"\ninsecure = true\n' for h in insecure_registries)
    )
    env = {**os.environ, "CONTAINERS_REGISTRIES_CONF": str(conf)}
    # Its cgroupfs manager's /libpod_parent (conmon's cgroups), removed when it stops unless it
    # was there before (seen left behind on the blkio hierarchy).
    cgroup = new_cgroup("libpod_parent")
    with (root / "engine.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, env=env)
    engine = OtherEngine(
        "podman", f"unix://{sock}", f"unix://{sock}", root, process, cleanups,
        cgroup=cgroup,
    )  # fmt: skip
    _wait_until_it_answers(engine)
    return engine


# Where a GPU host's CDI specs are (nvidia-ctk writes there); the boxed Podman sees the same
# folder, as an engine on that host does, and so does imagekit on this machine.
HOST_CDI = Path("/var/run/cdi")
# Rootful Podman 5's default network, on a subnet of its own (Podman 4.3's is 10.88.0.0/16),
# its rules in iptables, where NetworkState sees them.
PODMAN5_SUBNET = "10.213.12.0/24"
# Its containers' open-file and process limits, explicit: its defaults (nofile 1048576) lie above
# what the box may grant, and then every start, a build's RUN steps included, fails ("error
# setting rlimit type 7"). imagekit sets them for its own containers; a build's are Podman's.
# runc: crun refuses these machines' hybrid cgroups. No systemd. netavark's rules through
# iptables: trixie's netavark defaults to nftables without depending on it, and the box has
# iptables (rootful, its rules are the host's, where NetworkState sees them).
PODMAN5_CONF = """[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
firewall_driver = "iptables"
"""


def podman5_conf(subnet: str = "") -> str:
    """The containers.conf of a boxed Podman 5 (rootful with `subnet`, its default network's;
    rootless without: its network lives in the account's own namespace)."""
    text = PODMAN5_CONF.format(**box_limits())
    return text + (f'default_subnet = "{subnet}"\n' if subnet else "")


def box_limits() -> dict[str, int]:
    """The open-file and process limits a boxed Podman's containers may have: this process's
    hard limits (what the box inherits), processes at most 32768."""
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    unlimited = resource.RLIM_INFINITY
    return {
        "nofile": 1048576 if nofile == unlimited else nofile,
        "nproc": 32768 if nproc == unlimited else min(nproc, 32768),
    }


def podman_box_options(*mounts: Path) -> list[str]:
    """What the Podman 5 box is run with: the host's network and /tmp, each of `mounts` at its
    own path, /dev/net/tun (rootless networking), Podman's settings, and a label."""
    options = [
        "--init", "--network", "host", *BOX_RUN_OPTIONS, "-v", "/tmp:/tmp",
        "--device", "/dev/net/tun", "--label", "io.imagekit.test-box=1",
        "-e", "PODMAN_IGNORE_CGROUPSV1_WARNING=1",
        "--ulimit", "nofile={0}:{0}".format(box_limits()["nofile"]),
    ]  # fmt: skip
    for mount in mounts:
        options += ["-v", f"{mount}:{mount}"]
    return options


def start_podman_boxed(root: Path, insecure_registries: tuple[str, ...] = ()) -> OtherEngine:
    """Podman 5.4 (trixie's), boxed, as root: `podman system service` on a socket under
    `root` (which must lie under /tmp), its storage there too; the registries named are plain
    http. The host's CDI folder is the box's, so a spec written there is a device it has."""
    if not str(root).startswith("/tmp/"):
        raise ValueError(f"a boxed engine's folder must lie under /tmp: {root}")
    image = box_image(BOX_PODMAN, BOX_PODMAN_INCLUDE)
    root.mkdir(parents=True, exist_ok=True)
    cleanups: list[list[str]] = []
    if not HOST_CDI.exists():
        HOST_CDI.mkdir(parents=True)
        cleanups.append(["rmdir", str(HOST_CDI)])
    # Podman's cgroupfs manager puts its containers under /libpod_parent, on the host's
    # hierarchies (the box shares them): removed when it stops, unless it was there before.
    cgroup = new_cgroup("libpod_parent")
    conf = root / "containers.conf"
    conf.write_text(podman5_conf(PODMAN5_SUBNET))
    registries = root / "registries.conf"
    registries.write_text(
        "".join(f'[[registry]]\nlocation = "{h}"\ninsecure = true\n' for h in insecure_registries)
    )
    sock = root / "podman.sock"
    name = root.name
    argv = [
        "docker", "run", "--rm", "--name", name, *podman_box_options(HOST_CDI),
        "-e", f"CONTAINERS_CONF={conf}", "-e", f"CONTAINERS_REGISTRIES_CONF={registries}",
        image,
        "podman", "--root", str(root / "storage"), "--runroot", str(root / "run"),
        "system", "service", "--time=0", f"unix://{sock}",
    ]  # fmt: skip
    cleanups.insert(0, ["docker", "rm", "--force", "--volumes", name])
    process = _launch_box(argv, root)
    engine = OtherEngine(
        "podman5", f"unix://{sock}", f"unix://{sock}", root, process, cleanups,
        cgroup=cgroup, argv=argv,
    )  # fmt: skip
    _wait_until_it_answers(engine)
    return engine


@contextlib.contextmanager
def fake_gpu_on_host() -> Iterator[Path]:
    """The fake GPU's CDI spec in the host's CDI folder while the block runs (an engine there
    and imagekit both read it); removed again, with its stub library, when it ends."""
    folder = HOST_CDI / f"imagekit-test-{os.getpid()}"
    spec = HOST_CDI / "imagekit-test-fake-nvidia.json"
    made = not HOST_CDI.exists()
    try:
        write_fake_gpu_spec(folder)
        (folder / "fake-nvidia.json").rename(spec)
        yield spec
    finally:
        spec.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                HOST_CDI.rmdir()


def stop(engine: OtherEngine) -> None:
    """Remove what the engine holds, stop it, and remove its folders and bridge."""
    if engine.process.poll() is None:
        with contextlib.suppress(Exception):
            client = engine.client()
            for container in client.containers.list(all=True):
                container.remove(force=True, v=True)
            client.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(engine.process.pid, signal.SIGTERM)
        try:
            engine.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(engine.process.pid, signal.SIGKILL)
            engine.process.wait()
    # Podman's conmon monitors (of `exec` sessions too) outlive the service by minutes.
    subprocess.run(["pkill", "-KILL", "-f", str(engine.root)], capture_output=True, check=False)
    for argv in engine.cleanups:
        subprocess.run(argv, capture_output=True, check=False)
    # Overlay mounts of the engine's storage outlive it when a container was killed hard.
    mounts = Path("/proc/mounts").read_text().splitlines()
    for line in reversed(mounts):
        target = line.split()[1]
        if target.startswith(str(engine.root)):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)
    if engine.cgroup:
        remove_cgroups(engine.cgroup)
    shutil.rmtree(engine.root, ignore_errors=True)


def remove_cgroups(name: str, root: Path = CGROUP_ROOT) -> None:
    """Remove the cgroup `name` (a boxed engine's parent) from every hierarchy, deepest first:
    the kernel removes only empty cgroups, and only with rmdir."""
    for top in [root / name, *(h / name for h in root.iterdir() if h.is_dir())]:
        if not top.is_dir():
            continue
        for folder in sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


@dataclass(frozen=True)
class NetworkState:
    """The host's network links and iptables rules, to put back what the engines added."""

    links: frozenset[str]
    rules: dict[str, tuple[str, ...]]  # table -> its iptables-save lines

    @classmethod
    def read(cls) -> NetworkState:
        done = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
        links = frozenset(
            line.split(":")[1].strip().split("@")[0] for line in done.stdout.splitlines()
        )
        rules = {}
        for table in ("filter", "nat"):
            saved = subprocess.run(
                ["iptables-save", "-t", table], capture_output=True, text=True, check=False
            )
            rules[table] = tuple(
                line for line in saved.stdout.splitlines() if line.startswith((":", "-A"))
            )
        return cls(links, rules)

    def restore_from(self, now: NetworkState, markers: tuple[str, ...]) -> list[str]:
        """Delete the links, rules and chains in `now` that were not here before and that
        name one of `markers` (the engine's bridge, subnet, CNI chains): the default engine
        may have made others meanwhile, which are its own. What was removed, for the log."""

        def ours(text: str) -> bool:
            return any(marker in text for marker in markers)

        removed = []
        for link in sorted(now.links - self.links):
            if ours(link):
                subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)
                removed.append(f"link {link}")
        for table, lines in now.rules.items():
            before = set(self.rules.get(table, ()))
            new_rules = [
                line
                for line in lines
                if line.startswith("-A") and line not in before and ours(line)
            ]
            for rule in reversed(new_rules):
                # shlex: a rule's --comment is quoted ("CNI firewall plugin rules").
                argv = ["iptables", "-t", table, "-D", *shlex.split(rule)[1:]]
                if subprocess.run(argv, capture_output=True, check=False).returncode == 0:
                    removed.append(f"{table} rule {rule}")
            old_chains = {line.split()[0] for line in before if line.startswith(":")}
            for line in lines:
                chain = line.split()[0]
                if line.startswith(":") and chain not in old_chains and ours(chain):
                    name = chain[1:]
                    subprocess.run(["iptables", "-t", table, "-F", name], capture_output=True)
                    subprocess.run(["iptables", "-t", table, "-X", name], capture_output=True)
                    removed.append(f"{table} chain {name}")
        return removed
