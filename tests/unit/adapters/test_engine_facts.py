"""What imagekit reads off an engine: which engine, its image store, its GPU mechanism, and how
"this exact image" is compared with a registry on each store."""

from __future__ import annotations

import hashlib
import json
import resource
from pathlib import Path

import pytest

from imagekit.adapters.engine import endpoint
from imagekit.adapters.engine_facts import (
    cdi_devices,
    container_limits,
    gpu_device_requests,
    image_store,
    spec_devices,
)
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.vocabulary import EngineName, ImageStore
from imagekit.publish.ports import RemoteManifest

CONFIG = "sha256:" + "c" * 64
MANIFEST = "sha256:" + "m" * 64
INDEX = "sha256:" + "i" * 64

NVIDIA_SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}
  - name: all
    containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}
containerEdits: {}
"""


def test_the_containerd_store_is_told_by_its_snapshotter_driver_type() -> None:
    containerd = {
        "Driver": "overlayfs",
        "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]],
    }
    classic = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
    assert image_store(containerd) == "containerd"
    assert image_store(classic) == "classic"
    assert image_store({}) == "classic"


def test_image_ids_are_manifest_digests_only_on_the_containerd_store() -> None:
    assert EngineInfo(image_store=ImageStore.CONTAINERD).image_id_kind == "manifest"
    assert EngineInfo(image_store=ImageStore.CLASSIC).image_id_kind == "config"
    assert (
        EngineInfo(name=EngineName.PODMAN, image_store=ImageStore.PODMAN).image_id_kind == "config"
    )


def test_a_registry_image_is_compared_like_with_like() -> None:
    # The classic store (and Podman) name an image by its config; the containerd store by the
    # manifest or index it pushes unchanged. Either digest is a hash of the whole content.
    single = RemoteManifest(MANIFEST, CONFIG)
    assert single.holds(CONFIG) and single.holds(MANIFEST)
    index = RemoteManifest(INDEX, "")
    assert index.holds(INDEX) and not index.holds(CONFIG) and not index.holds("")
    assert not single.holds("sha256:" + "0" * 64)


def test_cdi_devices_come_from_what_the_engine_reports_first() -> None:
    info = {"DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=all"}]}
    assert cdi_devices(info, podman=False, local=False) == ("nvidia.com/gpu=all",)


def test_cdi_specs_are_read_from_a_local_engines_folders(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(NVIDIA_SPEC)
    (tmp_path / "broken.yaml").write_text("kind: [unclosed")
    (tmp_path / "notes.txt").write_text("kind: nope")
    assert spec_devices(tmp_path) == {"nvidia.com/gpu=0", "nvidia.com/gpu=all"}
    docker = {"CDISpecDirs": [str(tmp_path)]}
    assert cdi_devices(docker, podman=False, local=True) == (
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=all",
    )
    # Docker without CDI switched on lists no folders; a remote engine's folders are not ours.
    assert cdi_devices({}, podman=False, local=True) == ()
    assert cdi_devices(docker, podman=False, local=False) == ()
    assert spec_devices(tmp_path / "missing") == set()


def test_the_gpu_request_follows_the_engines_mechanism() -> None:
    runtime = EngineInfo(runtimes=("nvidia", "runc"))
    (request,) = gpu_device_requests(runtime)
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    (one,) = gpu_device_requests(runtime, "1")
    assert one["DeviceIDs"] == ["1"]
    cdi = EngineInfo(cdi_devices=("nvidia.com/gpu=all",))
    assert cdi.gpu_mechanism == "cdi"
    (request,) = gpu_device_requests(cdi)
    assert request["Driver"] == "cdi" and request["DeviceIDs"] == ["nvidia.com/gpu=all"]
    assert gpu_device_requests(cdi, "1")[0]["DeviceIDs"] == ["nvidia.com/gpu=1"]


def test_podman_gets_explicit_limits_that_this_host_grants_and_docker_keeps_its_own() -> None:
    assert container_limits(EngineInfo()) == {}
    limits = container_limits(EngineInfo(name=EngineName.PODMAN, image_store=ImageStore.PODMAN))
    by_name = {u["Name"]: (u["Soft"], u["Hard"]) for u in limits["ulimits"]}
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert by_name["nofile"] == (hard, hard)


def test_the_endpoint_is_docker_host_else_the_current_context(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2399")
    assert endpoint() == "tcp://127.0.0.1:2399"
    assert EngineInfo(endpoint=endpoint()).remote
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no context chosen: the default socket
    assert endpoint() == "unix:///var/run/docker.sock"
    assert not EngineInfo(endpoint=endpoint()).remote


def test_a_docker_context_chosen_with_docker_context_use_is_the_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What `docker context create build-box --docker host=tcp://...` and `docker context use`
    # write: buildx and the docker CLI follow it, so the SDK must too.
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "build-box"}))
    meta = tmp_path / "contexts" / "meta" / hashlib.sha256(b"build-box").hexdigest()
    meta.mkdir(parents=True)
    endpoints = {"docker": {"Host": "tcp://10.0.0.7:2375", "SkipTLSVerify": False}}
    (meta / "meta.json").write_text(
        json.dumps({"Name": "build-box", "Metadata": {}, "Endpoints": endpoints})
    )
    assert endpoint() == "tcp://10.0.0.7:2375"


def test_podman_before_5_4_hands_over_no_gpu_even_with_cdi_devices_on_its_host() -> None:
    # Its Docker API drops device requests without a word (containers/podman#25171).
    old = EngineInfo(
        name=EngineName.PODMAN, server_version="4.3.1", cdi_devices=("nvidia.com/gpu=all",)
    )
    assert old.gpu_mechanism == "none" and not old.gpu_runtime
    assert "drops device requests" in old.gpu_note and "drops device requests" in old.describe()
    new = EngineInfo(
        name=EngineName.PODMAN, server_version="5.4.0", cdi_devices=("nvidia.com/gpu=all",)
    )
    assert new.gpu_mechanism == "cdi" and new.gpu_note == ""
    assert EngineInfo(name=EngineName.PODMAN, server_version="4.3.1").gpu_note == ""


class _Container:
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.removed = False

    def start(self) -> None:
        if self.refuse:
            import docker.errors

            raise docker.errors.APIError("error setting rlimit type 7: operation not permitted")

    def wait(self) -> dict:
        return {"StatusCode": 0}

    def logs(self, **_: object) -> bytes:
        return b"1000\n"

    def remove(self, **_: object) -> None:
        self.removed = True


class _Client:
    def __init__(self, refuse: bool) -> None:
        self.made: list[tuple[list[str], dict]] = []
        self.container = _Container(refuse)
        self.containers = self

    def create(self, image: str, command: list[str], **options: object) -> _Container:
        self.made.append((command, options))
        return self.container


def test_a_start_the_engine_refuses_leaves_no_created_container_behind() -> None:
    import docker.errors

    from imagekit.adapters.engine import DockerEngine

    client = _Client(refuse=True)
    with pytest.raises(docker.errors.APIError):
        DockerEngine(client).started_container("img:1", ["sleep", "600"])  # type: ignore[arg-type]
    assert client.container.removed
    ok = _Client(refuse=False)
    assert DockerEngine(ok).container_output("img:1", ["id", "-u"]) == b"1000\n"  # type: ignore[arg-type]
    assert ok.container.removed


def test_a_command_runs_as_it_is_whatever_the_images_entrypoint() -> None:
    # Podman's Docker API takes an empty entrypoint for "not set" and runs the image's own.
    from imagekit.adapters.engine import DockerEngine

    client = _Client(refuse=False)
    engine = DockerEngine(client)  # type: ignore[arg-type]
    engine.container_output("img:1", ["python3", "-c", "1"])
    command, options = client.made[0]
    assert options["entrypoint"] == ["python3"] and command == ["-c", "1"]
    engine.container_output("img:1", ["id", "-u"], through_entrypoint=True)
    command, options = client.made[1]
    assert "entrypoint" not in options and command == ["id", "-u"]
