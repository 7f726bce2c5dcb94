"""Adapter: what an engine's `info` says about it (its image store, its CDI devices) and what
its `image inspect` says of an image, and what the containers it runs are given because of it
(GPU device requests, resource limits). Reads only the engine's answers and this machine's CDI
spec folders; calls no engine itself."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import TypedDict

import docker.types
import yaml

from imagekit.kernel.engine import EngineInfo, LocalImage
from imagekit.kernel.json import JsonObject, as_list, as_number, as_object
from imagekit.kernel.vocabulary import EngineName, GpuMechanism, ImageStore

# Where CDI specs live when the engine does not say (Podman's and the CDI spec's defaults).
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def image_store(info: JsonObject) -> ImageStore:
    """`containerd` when Docker keeps images in containerd (`driver-type
    io.containerd.snapshotter.v1`, Docker 29's default), else `classic`."""
    pairs = [p for p in as_list(info.get("DriverStatus")) if isinstance(p, list) and len(p) == 2]
    for key, value in pairs:
        if key == "driver-type" and "snapshotter" in str(value):
            return ImageStore.CONTAINERD
    return ImageStore.CLASSIC


def cdi_devices(info: JsonObject, *, podman: bool, local: bool) -> tuple[str, ...]:
    """The CDI devices the engine can inject: what Docker 28.2+ reports (`DiscoveredDevices`),
    else, for an engine on this machine with CDI on (Docker's `CDISpecDirs`; Podman always),
    the devices of the specs in its spec folders. A remote engine's folders are not ours to
    read: there only what it reports counts."""
    found = {
        str(d.get("ID"))
        for d in as_list(info.get("DiscoveredDevices"))
        if isinstance(d, dict) and d.get("Source") == GpuMechanism.CDI and d.get("ID")
    }
    if found or not local:
        return tuple(sorted(found))
    folders = [str(f) for f in as_list(info.get("CDISpecDirs"))]
    for folder in folders or (CDI_SPEC_DIRS if podman else ()):
        found |= spec_devices(Path(folder))
    return tuple(sorted(found))


def spec_devices(folder: Path) -> set[str]:
    """`kind=name` of each device in the CDI spec files (YAML or JSON) of `folder`."""
    found: set[str] = set()
    try:
        files = sorted(folder.iterdir())
    except OSError:
        return found
    for file in files:
        if file.suffix not in (".yaml", ".yml", ".json"):
            continue
        try:
            spec = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # the engine ignores a spec it cannot read, and so do we
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            continue
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and device.get("name"):
                found.add(f"{spec['kind']}={device['name']}")
    return found


def image_from_inspect(attrs: JsonObject) -> LocalImage:
    """The image `docker image inspect` describes (`attrs`, its output)."""
    config = as_object(attrs.get("Config"))
    parts = [str(attrs.get(k) or "") for k in ("Os", "Architecture", "Variant")]
    env = [str(e) for e in as_list(config.get("Env"))]
    return LocalImage(
        id=str(attrs["Id"]),
        tags=tuple(str(t) for t in as_list(attrs.get("RepoTags"))),
        labels={k: str(v) for k, v in as_object(config.get("Labels")).items()},
        size_bytes=int(as_number(attrs.get("Size"))),
        layers=tuple(str(x) for x in as_list(as_object(attrs.get("RootFS")).get("Layers"))),
        created=str(attrs.get("Created", "")),
        env={k: v for k, _, v in (e.partition("=") for e in env if "=" in e)},
        platform="/".join(p for p in parts if p) if parts[0] and parts[1] else "",
    )


def gpu_device_requests(info: EngineInfo, device: str = "all") -> list[docker.types.DeviceRequest]:
    """What asks this engine for GPU `device` (`all` or an index): the NVIDIA runtime's
    `--gpus` request, or the CDI device `nvidia.com/gpu=<device>` (`--device` on the CLI)."""
    if info.gpu_mechanism == GpuMechanism.CDI:
        return [docker.types.DeviceRequest(driver="cdi", device_ids=[f"nvidia.com/gpu={device}"])]
    if device == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(device_ids=[device], capabilities=[["gpu"]])]


# Podman's service lowers its own process limit to this where it may not keep the host's, and
# a container may not ask for more than the service has; it is ample for probes and services.
PODMAN_NPROC = 32768


class ContainerLimits(TypedDict, total=False):
    """The keyword arguments of a container's creation that set its limits (docker-py's)."""

    ulimits: list[docker.types.Ulimit]


def container_limits(info: EngineInfo) -> ContainerLimits:
    """Explicit open-file and process limits for Podman, whose defaults (nofile 1048576) fail
    every start on a host where the service may not raise its own limits ("error setting
    rlimit type 7"). Open files: this process's hard limit, one the host grants; processes:
    at most 32768, what the service itself runs with there. Docker keeps its defaults."""
    if info.name != EngineName.PODMAN:
        return {}
    limits = []
    for name, which, most in (
        ("nofile", resource.RLIMIT_NOFILE, None),
        ("nproc", resource.RLIMIT_NPROC, PODMAN_NPROC),
    ):
        _, hard = resource.getrlimit(which)
        if hard == resource.RLIM_INFINITY:
            if most is None:
                continue
            hard = most
        value = min(hard, most) if most is not None else hard
        limits.append(docker.types.Ulimit(name=name, soft=value, hard=value))
    return {"ulimits": limits}
