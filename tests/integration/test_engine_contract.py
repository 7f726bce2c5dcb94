"""The engine contract: what imagekit promises on every engine its users run, run against the
engines the default one is not (the rest of the suite runs against the default engine, whatever
`make engine` installed: Docker 26, or 20.10 on a Debian 12 host that trixie's engine would
half-upgrade). A boxed engine that is the default engine's twin (the same Docker major version
on the same image store) is skipped, saying so: the whole main session already runs on it.

- `docker-classic`: Docker 26 with the classic image store, boxed (tests/integration/engines.py:
  it does not depend on the host's Docker), reached over tcp://127.0.0.1:PORT as a remote engine
  (a shared build box, a GPU node) is;
- `docker-containerd`: the same Docker 26 with the containerd image store (image ids are manifest
  digests), boxed, over tcp too;
- `podman`: Podman 4.3 through its Docker API (`podman system service`);
- `podman5`: Podman 5.4, boxed like Docker 26, through its Docker API on a socket; the one
  engine here whose Docker API passes a CDI GPU request on (the fake GPU of engines.py).

On each: `base bootstrap`, `build` as a user types it (no --builder: BuildKit on Docker, the
legacy builder on Podman, each recorded with why; an explicit buildx refused where there is no
BuildKit),
`verify`, `publish` to a local registry (immutable versioned tag, moving alias, digest read
back), `run --user`, `gc`, `doctor`, a stop signal that leaves no container, slim without
torch.compile (its label and its first compile's notice), and a GPU request (Podman's two
answers to it). The real CLI
runs in a child process with DOCKER_HOST pointing at the engine, as a user runs it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import docker
import docker.errors
import pytest

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.engine_facts import container_limits
from imagekit.build.venv_layers import STAGING, venv_slots
from imagekit.errors import ImagekitError
from tests.children import default_stop_signals
from tests.integration.conftest import ROOT, TEST_LABELS, CliResult, imagekit, matrix_text
from tests.integration.engines import (
    FAKE_GPU_ENV,
    FAKE_GPU_LIBRARY,
    FAKE_GPU_NODE,
    NetworkState,
    OtherEngine,
    fake_gpu_on_host,
    start_docker_classic,
    start_docker_containerd,
    start_podman,
    start_podman_boxed,
    stop,
)
from tests.integration.test_publish import free_port, running_registry
from tests.integration.test_run_ends import CONTAINER_LINE, answers_with_token, wait_for_url

pytestmark = [pytest.mark.integration, pytest.mark.contract]

SLIM = "2.13.0-cpu-py3.11-slim"
FULL = "2.13.0-cpu-py3.11-full"
BRIDGE = "ikt-br0"
SUBNET = "10.213.7.1/24"
STORE_BRIDGE, STORE_SUBNET = "ikt-br4", "10.213.11.1/24"
PUSH_OPTIONS: dict = {}
MARKERS = {
    "docker-classic": (BRIDGE, "10.213.7."),
    "docker-containerd": (STORE_BRIDGE, "10.213.11."),
    "podman": ("cni-podman", "CNI-", "10.88.", "podman", "NETAVARK"),
    "podman5": ("podman0", "10.213.12.", "NETAVARK", "netavark"),
}
# What each engine's records and doctor call it: its image store, what its image ids digest,
# and how doctor names it.
STORES = {
    "podman": ("podman", "config", "containers/storage", "engine: Podman 4.3.1"),
    "podman5": ("podman", "config", "containers/storage", "engine: Podman 5.4"),
    "docker-classic": ("classic", "config", "classic image store", "engine: Docker 26."),
    "docker-containerd": ("containerd", "manifest", "containerd image store", "engine: Docker 26."),
}


# What `imagekit build` picks unasked on each engine (issue 49): BuildKit wherever the engine has
# it and the buildx plugin answers, the legacy builder on Podman, whose Docker API has none.
# With the legacy builder, slim and full took 189 s on docker-classic and 298 s on
# docker-containerd (where it commits and compresses every step's layer), the slowest fixtures.
def default_builder(engine: str) -> str:
    return "sdk" if engine.startswith("podman") else "buildx"


@dataclass
class Contract:
    """One engine with the demo matrix built on it."""

    engine: OtherEngine
    matrix: Path
    results: Path
    repository: str
    builds: dict[str, CliResult]  # each flavour's build
    records: dict[str, dict]
    wheelhouse: Path
    base: str  # the base image the matrix builds on, bootstrapped on the engine

    def cli(self, *args: str, local: bool = False, timeout_s: int = 1800) -> CliResult:
        return imagekit(*args, env=self.engine.env(local=local), timeout_s=timeout_s)

    def reference(self, name: str) -> str:
        return str(self.records[name]["build"]["reference"])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_registry(tmp_path_factory.mktemp("contract-registry")) as host:
        yield host


# The boxed engines are Docker 26 (BOX_DOCKER); which store each uses.
BOXED_STORES = {"docker-classic": "classic", "docker-containerd": "containerd"}


def host_twin(name: str) -> str | None:
    """The default engine, described, when boxed engine `name` is the same engine: Docker 26
    on the same image store. None otherwise (or when the default engine does not answer)."""
    if name not in BOXED_STORES:
        return None
    try:
        info = DockerEngine(docker.from_env(version="auto", timeout=30)).info()
    except (docker.errors.DockerException, ImagekitError):
        return None
    if info.server_version.split(".")[0] != "26" or info.image_store != BOXED_STORES[name]:
        return None
    return info.describe()


# Module scope: the last engine (Podman's service) stops when this module ends, not when the
# session does (an idle service kept a quarter of a core busy through the tests after it).
@pytest.fixture(scope="module", params=["docker-classic", "docker-containerd", "podman", "podman5"])
def contract(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    wheelhouse: Path,
    registry: str,
) -> Iterator[Contract]:
    """The engine, started; a base bootstrapped into it; slim and full built as a user types it
    (the builder imagekit picks)."""
    name = request.param
    if (twin := host_twin(name)) is not None:
        pytest.skip(f"{name} is the default engine's twin ({twin}): the main session runs on it")
    root = Path(f"/tmp/imagekit-it-{name}-{secrets.token_hex(3)}")
    before = NetworkState.read()
    if name == "docker-classic":
        engine = start_docker_classic(root, BRIDGE, SUBNET)
    elif name == "docker-containerd":
        engine = start_docker_containerd(root, STORE_BRIDGE, STORE_SUBNET)
    elif name == "podman":
        # Docker treats a loopback registry as plain http by default; Podman must be told.
        engine = start_podman(root, insecure_registries=(registry,))
    else:
        engine = start_podman_boxed(root, insecure_registries=(registry,))
    try:
        folder = tmp_path_factory.mktemp(name)
        namespace = f"imagekit-it-{secrets.token_hex(4)}"
        base = f"{namespace}-base/debian:bookworm"
        env = engine.env()
        made = imagekit("base", "bootstrap", "--suite", "bookworm", "--tag", base, env=env)
        assert made.code == 0, made.stderr[-3000:]
        matrix = folder / "matrix.yaml"
        # Slim without torch.compile's compiler: what compiles in the container does not
        # depend on the engine, and the default engine's images prove it (the demo's slim);
        # here it would add an apt step to each build and the compile probe to each verify.
        text = matrix_text(f"{namespace}/pytorch", base)
        text = text.replace("  slim:\n", "  slim:\n    compile: false\n", 1)
        required = "required_probes: [env, autograd, matmul, higher_order, compile, ddp]"
        assert required in text  # slim's, first: without compile, it cannot require it
        text = text.replace(required, required.replace(" compile,", ""), 1)
        matrix.write_text(text)
        results = folder / "results"
        builds, records = {}, {}
        for flavour in ("slim", "full"):
            builds[flavour] = build = imagekit(
                "build", "--matrix", str(matrix), "--flavour", flavour,
                "--wheelhouse", str(wheelhouse),
                "--results", str(results), "--json",
                env=env,
            )  # fmt: skip
            assert build.code == 0, build.stderr[-3000:] + engine.log_tail()
            run = results / json.loads(build.stdout)["run_id"]
            records |= {p.stem: json.loads(p.read_text()) for p in (run / "images").glob("*.json")}
        repository = f"{namespace}/pytorch"
        yield Contract(engine, matrix, results, repository, builds, records, wheelhouse, base)
    finally:
        stop(engine)
        # Podman's cleanup processes may still be tearing its network down (a CNI DEL makes
        # its chains again): repeat until three reads in a row find nothing of it.
        quiet = 0
        for _ in range(30):
            removed = before.restore_from(NetworkState.read(), MARKERS[name])
            print(f"{name}: stopped; removed from the host's network: {removed}")
            quiet = 0 if removed else quiet + 1
            if quiet == 3:
                break
            time.sleep(1)


def test_build_makes_slim_and_full_and_a_second_build_is_up_to_date(contract: Contract) -> None:
    client = contract.engine.client()
    for name in (SLIM, FULL):
        record = contract.records[name]["build"]
        assert record["status"] == "built", record
        image = client.images.get(contract.reference(name))
        # The recorded size is the unpacked size, comparable across stores.
        assert record["size_bytes"] > 600e6 and image.labels["io.imagekit.flavour"] in name
        # Unasked, the builder this engine allows, said first and kept in the record.
        assert record["builder"] == default_builder(contract.engine.name), record
        said = contract.builds["slim" if name == SLIM else "full"].stderr.splitlines()
        assert said[0].startswith(f"builder: {record['builder']} ("), said[:3]
        assert said[0] == f"builder: {record['builder']} ({record['builder_why']})"
    statuses = {}
    for flavour in ("slim", "full"):
        again = contract.cli(
            "build", "--matrix", str(contract.matrix), "--flavour", flavour,
            "--wheelhouse", str(contract.wheelhouse),
            "--results", str(contract.results), "--json",
        )  # fmt: skip
        assert again.code == 0, again.stderr[-2000:]
        statuses |= {r["name"]: r["status"] for r in json.loads(again.stdout)["results"]}
    assert statuses == {SLIM: "up-to-date", FULL: "up-to-date"}


def test_buildx_builds_where_the_engine_has_buildkit_and_is_refused_in_one_line_elsewhere(
    contract: Contract,
) -> None:
    if default_builder(contract.engine.name) == "buildx":
        # The contract's own builds were BuildKit's on this engine, unasked.
        for flavour in ("slim", "full"):
            said = contract.builds[flavour].stderr
            assert "building with buildx" in said, said[-3000:]
        return
    done = contract.cli(
        "build", "--matrix", str(contract.matrix), "--flavour", "slim", "--builder", "buildx",
        "--no-cache", "--wheelhouse", str(contract.wheelhouse),
        "--results", str(contract.results), "--json",
    )  # fmt: skip
    assert done.code == 3
    assert "its Docker API has no BuildKit" in done.stderr and "Traceback" not in done.stderr
    assert "use --builder sdk" in done.stderr


@pytest.fixture(scope="module")
def verified(contract: Contract) -> dict:
    """Slim verified with every probe; full with its structure checks and the env probe."""
    slim = contract.cli(
        "verify", "--matrix", str(contract.matrix), "--flavour", "slim",
        "--results", str(contract.results), "--json",
    )  # fmt: skip
    assert slim.code == 0, slim.stderr[-3000:] + contract.engine.log_tail()
    full = contract.cli(
        "verify", "--matrix", str(contract.matrix), "--flavour", "full", "--probes", "env",
        "--results", str(contract.results), "--json",
    )  # fmt: skip
    return {"slim": json.loads(slim.stdout), "full": full}


def test_verify_runs_the_probes_and_the_structure_checks(
    contract: Contract, verified: dict
) -> None:
    record = verified["slim"]["images"][SLIM]["verify"]
    assert record["status"] == "pass" and record["level"] == "cpu"
    passed = {r["probe"] for r in record["probes"] if r["status"] == "pass"}
    assert {"env", "autograd", "matmul", "higher_order", "ddp"} <= passed
    (compiled,) = [r for r in record["probes"] if r["probe"] == "compile"]
    # The image says it cannot compile (its label), and the probe says what still works.
    assert compiled["status"] == "skip" and "aot_eager" in compiled["reason"], compiled
    assert record["structure"] and all(c["ok"] for c in record["structure"])
    run = contract.results / verified["slim"]["run_id"]
    engine = json.loads((run / "run.json").read_text())["engine"]
    store, kind, _, _ = STORES[contract.engine.name]
    assert engine["image_store"] == store and engine["image_id_kind"] == kind
    assert engine["endpoint"] == contract.engine.docker_host
    full = verified["full"]
    assert "Traceback" not in full.stderr, full.stderr[-2000:]
    checks = json.loads(full.stdout)["images"][FULL]["verify"]["structure"]
    assert checks and all(c["ok"] for c in checks), checks


def test_publish_pushes_reads_the_digest_back_and_keeps_versioned_tags_immutable(
    contract: Contract,
    verified: dict,
    registry: str,
) -> None:
    def publish(to: str) -> CliResult:
        return contract.cli(
            "publish", "--matrix", str(contract.matrix), "--only", SLIM,
            "--registry", to, "--results", str(contract.results), "--json",
        )  # fmt: skip

    first = publish(registry)
    assert first.code == 0, first.stderr[-3000:]
    (image,) = json.loads(first.stdout)["images"]
    assert image["status"] == "published"
    versioned, *aliases = image["tags"]
    assert versioned["status"] == "published" and versioned["digest"].startswith("sha256:")
    assert aliases and all(t["status"] == "published" for t in aliases)
    again = publish(registry)
    assert again.code == 0, again.stderr[-3000:]
    (image,) = json.loads(again.stdout)["images"]
    assert image["tags"][0]["status"] == "unchanged"
    assert image["tags"][0]["digest"] == versioned["digest"]
    # Other content already under the versioned tag of another repository: the base, whose
    # one layer is a tenth of what full would add to the push (Podman 4.3 compresses on push).
    client = contract.engine.client()
    occupied = f"{registry}/occupied/{contract.repository}"
    tag = contract.reference(SLIM).rsplit(":", 1)[1]
    client.api.tag(contract.base, occupied, tag)
    pushed = [*client.api.push(occupied, tag, stream=True, decode=True, **PUSH_OPTIONS)]
    assert not [p for p in pushed if "error" in p], pushed
    client.api.remove_image(f"{occupied}:{tag}")
    other = publish(f"{registry}/occupied")
    assert other.code != 0 and "Traceback" not in other.stderr
    (image,) = json.loads(other.stdout)["images"]
    assert image["status"] == "refused"
    assert "already exists with other content" in image["reasons"][-1]


def test_a_slim_without_compile_says_so_in_its_label_and_at_its_first_compile(
    contract: Contract,
) -> None:
    """The contract's slim is built with `compile: false`: its label says so, and the first
    torch.compile in it says, in one line, what to use instead. (The demo's slim, which
    compiles, passes the compile probe in the main session's verify.)"""
    client = contract.engine.client()
    try:
        image = client.images.get(contract.reference(SLIM))
        assert image.labels["io.imagekit.torch-compile"] == "no"
        code = "import torch; f = torch.compile(lambda x: x.sin()); f(torch.ones(2))"
        container = client.containers.run(
            image.id, ["python3", "-c", code], detach=True, shm_size="2g", labels=TEST_LABELS,
            # Podman's default nofile (1048576) is above what its service may grant here.
            **container_limits(DockerEngine(client).info()),
        )  # fmt: skip
        try:
            container.wait(timeout=300)
            said = container.logs(stdout=False, stderr=True).decode()
        finally:
            container.remove(force=True)
    finally:
        client.close()
    notice = [line for line in said.splitlines() if line.startswith("imagekit:")]
    assert len(notice) == 1 and 'backend="aot_eager"' in notice[0] and "full image" in notice[0]


SITE = "/opt/venv/lib/python3.11/site-packages"


def write_unused_slots_context(folder: Path, base: str, slots: tuple[str, ...]) -> None:
    """A build context whose builder stage makes a venv of one distribution (`demo`) on `base`
    and sorts it into `slots` with templates/layer_venv.py, and whose last stage copies each
    slot in a step of its own, as slim's Dockerfile does."""
    record = "demo/__init__.py,,\\ndemo-1.0.dist-info/METADATA,,\\ndemo-1.0.dist-info/RECORD,,\\n"
    (folder / "layer_venv.py").write_text((ROOT / "templates" / "layer_venv.py").read_text())
    (folder / "Dockerfile").write_text(
        f"FROM {base} AS builder\n"
        "COPY layer_venv.py /tmp/\n"
        f"RUN python3.11 -m venv --without-pip /opt/venv"
        f" && mkdir -p {SITE}/demo {SITE}/demo-1.0.dist-info"
        f" && echo 'x = 1' > {SITE}/demo/__init__.py"
        f" && printf 'Name: demo\\nVersion: 1.0\\n' > {SITE}/demo-1.0.dist-info/METADATA"
        f" && printf '{record}' > {SITE}/demo-1.0.dist-info/RECORD"
        f" && SOURCE_DATE_EPOCH=0 python3.11 /tmp/layer_venv.py /opt/venv {STAGING}"
        f" --slots {','.join(slots)}\n"
        f"FROM {base}\n" + "".join(f"COPY --from=builder {STAGING}/{slot}/ /\n" for slot in slots)
    )


def archived_names(client: docker.DockerClient, image: str, folders: list[str]) -> set[str]:
    """The base names of the files in `folders` of `image`, read with the engine's archive API
    from a container that is created and removed without running."""
    container = client.containers.create(image, ["true"], labels=TEST_LABELS)
    try:
        names: set[str] = set()
        for folder in folders:
            stream, _ = container.get_archive(folder)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                names |= {PurePosixPath(m.name).name for m in archive.getmembers() if m.isfile()}
        return names
    finally:
        container.remove(force=True)


def test_the_venv_layers_build_where_slots_are_unused(contract: Contract, tmp_path: Path) -> None:
    """slim's builder stage sorts the venv into a folder per slot (templates/layer_venv.py) and
    its runtime stage copies each in a step of its own; a CUDA cell whose torch installs fewer
    NVIDIA libraries than there are slots leaves some unused. On the classic store the legacy
    builder fails a COPY of an empty folder followed by another COPY (moby/moby#40591: the CUDA
    example failed so), so an unused slot holds one file. Here a venv with one distribution
    and no NVIDIA, Triton or torch fills the CUDA cell's slots, with the script and the slot
    names slim's Dockerfile uses, on the SDK's builder (Podman's: Buildah)."""
    slots = venv_slots(cuda=True)
    write_unused_slots_context(tmp_path, contract.base, slots)
    client = contract.engine.client()
    tag = f"{contract.repository}:layers-{secrets.token_hex(3)}"
    try:
        # A failed step raises BuildError with the engine's message.
        client.images.build(
            path=str(tmp_path), tag=tag, nocache=True, rm=True, forcerm=True, labels=TEST_LABELS
        )
        # The files are read from a created, never started, container: Podman's logs of a
        # container that ran `ls` were once empty (a race of its compat API), and no process
        # is needed to list a folder.
        listed = archived_names(client, tag, ["/opt/venv/.imagekit-unused-layers", f"{SITE}/demo"])
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, force=True)
        client.close()
    unused = {n.split(".", 1)[1] for n in listed if n.startswith("imagekit-layers.")}
    assert unused == {s for s in slots if s.startswith("nvidia-")} | {"triton", "torch"}
    assert "__init__.py" in listed


def test_run_with_user_serves_jupyter_as_that_user_and_a_stop_removes_it(
    contract: Contract, tmp_path: Path
) -> None:
    # A root-owned folder anyone may write: without --user the image would serve as its own
    # user (1000), so a file of 4321 shows that --user decided.
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    workspace.chmod(0o777)
    port = free_port()
    argv = [
        sys.executable, "-m", "imagekit", "run", contract.reference(FULL), "--jupyter",
        "--workspace", str(workspace), "--port", f"{port}:8888", "--user", "4321:4321",
    ]  # fmt: skip
    if contract.engine.name.startswith("docker-"):
        # Over tcp the engine is another machine: its bind mounts are not this folder.
        remote = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, **contract.engine.env()},
        )  # fmt: skip
        assert remote.returncode == 2 and "is another machine" in remote.stderr
        assert "Traceback" not in remote.stderr
    process = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **contract.engine.env(local=True)}, preexec_fn=default_stop_signals,
    )  # fmt: skip
    try:
        url = wait_for_url(process, port)
        assert answers_with_token(url)
        token = url.split("token=")[1]
        body = json.dumps({"type": "file", "format": "text", "content": "hi"}).encode()
        put = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/contents/note.txt",
            data=body, method="PUT", headers={"Authorization": f"token {token}"},
        )  # fmt: skip
        urllib.request.urlopen(put, timeout=30).close()
        assert (workspace / "note.txt").stat().st_uid == 4321
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    found = CONTAINER_LINE.search(stderr)
    assert found
    client = contract.engine.client()
    left = client.containers.list(all=True, filters={"name": f"imagekit-{found.group(1)}"})
    assert left == []


def test_a_stop_signal_during_verify_leaves_no_container_and_keeps_the_results(
    contract: Contract, verified: dict
) -> None:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "imagekit", "verify", "--matrix", str(contract.matrix),
            "--flavour", "slim", "--results", str(contract.results),
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **contract.engine.env()}, preexec_fn=default_stop_signals,
    )  # fmt: skip
    client = contract.engine.client()
    deadline = time.monotonic() + 120
    probes: list = []
    while time.monotonic() < deadline and not probes:
        probes = client.containers.list(filters={"label": "io.imagekit.run-id"})
        time.sleep(0.5)
    assert probes, "no probe container appeared"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-2000:]
    assert "Traceback" not in stderr
    assert client.containers.list(all=True, filters={"label": "io.imagekit.run-id"}) == []


def test_doctor_names_the_engine_and_gc_finds_nothing_left(contract: Contract) -> None:
    doctor = contract.cli("doctor", "--image", contract.reference(SLIM))
    assert doctor.code == 0, doctor.stderr[-2000:]
    _, kind, store, expected = STORES[contract.engine.name]
    assert expected in doctor.stdout
    assert store in doctor.stdout
    assert f"image ids on this engine are {kind} digests" in doctor.stdout
    if contract.engine.name.startswith("docker-"):
        assert "not the engine's" in doctor.stdout  # reached over tcp: a remote engine
    gc = contract.cli("gc", "--dry-run")
    assert gc.code == 0, gc.stderr[-2000:]
    assert "would remove container" not in gc.stdout


def test_a_gpu_request_reaches_the_probe_container_on_podman_5_and_is_refused_on_4(
    contract: Contract, verified: dict
) -> None:
    """With a (fake) GPU in the host's CDI folder, `verify --gpus all` asks Podman for it the
    way it asks for a real one. Podman 5.4's Docker API passes the CDI request on: the probe
    sees the device, the driver library and the variable. Podman 4.3's drops it without a
    word, so imagekit refuses up front, in one line, and starts no probe container."""
    if not contract.engine.name.startswith("podman"):
        pytest.skip("Docker's CDI path is tests/integration/test_boxed_docker.py's")
    with fake_gpu_on_host():
        done = contract.cli(
            "verify", "--matrix", str(contract.matrix), "--flavour", "slim", "--gpus", "all",
            "--probes", "env", "--results", str(contract.results), "--json",
            local=True,  # a local engine: imagekit reads the host's CDI folders for it
        )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if contract.engine.name == "podman":
        assert done.code == 3 and "would start the probes without GPUs" in done.stderr, done
        assert "Podman 5.4+ with CDI" in done.stderr
        client = contract.engine.client()
        assert client.containers.list(all=True, filters={"label": "io.imagekit.run-id"}) == []
        return
    data = json.loads(done.stdout)
    run = json.loads((contract.results / data["run_id"] / "run.json").read_text())
    assert run["engine"]["gpu_mechanism"] == "cdi"
    (env,) = [p for p in data["images"][SLIM]["verify"]["probes"] if p["probe"] == "env"]
    assert env["facts"]["gpu_device_nodes"] == [FAKE_GPU_NODE]
    assert env["facts"]["driver_libraries"] == [FAKE_GPU_LIBRARY]
    name, value = FAKE_GPU_ENV
    assert env["facts"]["gpu_environment"][name] == value
    # The CPU build of torch cannot use a GPU that is not there: a probe failure, exit 5.
    assert done.code == 5 and env["facts"]["cuda_available"] is False
