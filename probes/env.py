"""The image is what its labels say: versions, GPU architectures, user, shared memory, glibc."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _cudalibs import (
    LIBRARIES,
    check_cudnn_compiled,
    check_libraries,
    cudnn_compiled_version,
    library_versions,
    verbs,
)
from _probekit import Recorder, main_for, probe_name

NAME = probe_name(__file__)
PROBE = {
    "level": "static",
    "needs_gpu": False,
    "timeout_s": 60,
    "flavours": ["slim", "full"],
}

# NCCL needs far more than Docker's default 64 MB /dev/shm for multi-GPU runs.
MIN_SHM_BYTES = 1 << 30


def _glibc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return " ".join(platform.libc_ver()).strip()


def _driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            words = handle.readline().split()
        return next((w for w in words if w[:1].isdigit() and "." in w), None)
    except OSError:
        return None


# Where a GPU's driver libraries are put into a container: the NVIDIA toolkit and CDI specs
# mount them into the distribution's library folder (Debian/Ubuntu, RHEL) or its own;
# Charliecloud's `ch-fromhost --nvidia` copies them into ldconfig's first folder.
DRIVER_LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/local/lib",
)
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")


def gpu_plumbing() -> dict[str, Any]:
    """What the engine handed this container for its GPUs, whatever torch makes of it: the
    device nodes, the driver libraries mounted in, the NVIDIA_* environment. An engine that
    drops a device request leaves all three empty; a GPU that torch cannot use leaves them
    set."""
    try:
        nodes = sorted(f"/dev/{n}" for n in os.listdir("/dev") if n.startswith("nvidia"))
    except OSError:
        nodes = []
    libraries = sorted(
        f"{folder}/{name}"
        for folder in DRIVER_LIBRARY_DIRS
        for name in DRIVER_LIBRARIES
        if os.path.exists(f"{folder}/{name}")
    )
    environment = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("NVIDIA_") or k == "CUDA_VISIBLE_DEVICES"
    }
    return {
        "gpu_device_nodes": nodes,
        "driver_libraries": libraries,
        "gpu_environment": dict(sorted(environment.items())),
    }


def _version_key(text: str) -> tuple[int, ...]:
    """ "2.28" -> (2, 28); the numbers in a version, for comparing."""
    return tuple(int(part) for part in re.findall(r"\d+", text))


def read_facts(torch: Any) -> dict[str, Any]:
    """What the image holds: versions, user, /dev/shm, compiled architectures, the GPU if any."""
    shm = os.statvfs("/dev/shm")
    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": ".".join(map(str, sys.version_info[:3])),
        "glibc": _glibc(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "shm_bytes": shm.f_frsize * shm.f_blocks,
        "cuda_available": torch.cuda.is_available(),
        # The compiled list, read from the binary: get_arch_list() is empty without a GPU.
        "arch_list": torch._C._cuda_getArchFlags().split() if torch.version.cuda else [],
        "cudnn_compiled": cudnn_compiled_version(torch),
        **library_versions(torch),  # "cudnn" and "nccl": what the loaded libraries report
        **gpu_plumbing(),
    }
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        facts |= {
            "gpu_count": torch.cuda.device_count(),
            "gpu_name": torch.cuda.get_device_name(0),
            "gpu_capability": f"sm_{major}{minor}",
            "driver": _driver(),
        }
    return facts


def check_torch_works(rec: Recorder, torch: Any, device: str) -> None:
    """torch imports and computes on the device."""
    rec.check("torch imports and reports a version", bool(torch.__version__), torch.__version__)
    try:
        made = torch.ones(2, device=device).sum().item()
    except (RuntimeError, AssertionError) as exc:
        # A failed check, not a probe error: the facts read so far (what the engine handed
        # over for the GPU, among them) stay in the report.
        rec.check(f"a tensor computes on {device}", False, f"{type(exc).__name__}: {exc}")
        return
    rec.equal(f"a tensor computes on {device}", made, 2.0)


def check_versions(rec: Recorder, expected: dict[str, Any]) -> None:
    """torch, CUDA, Python, cuDNN and NCCL are the versions the labels promise."""
    facts, want = rec.facts, expected.get
    if want("torch"):
        rec.equal("torch version", facts["torch"].split("+")[0], want("torch"))
    if "cuda" in expected:
        rec.equal("torch.version.cuda", facts["cuda"], want("cuda"))
    if want("python"):
        rec.equal("python", ".".join(facts["python"].split(".")[:2]), want("python"))
    check_libraries(rec, {key: facts[key] for key in LIBRARIES}, want)
    check_cudnn_compiled(rec, facts["cudnn"], facts["cudnn_compiled"])


def check_glibc_floor(rec: Recorder, glibc: str, floor: Any) -> None:
    """The image's glibc is at least the floor its torch wheels need (label glibc-floor)."""
    seen = re.search(r"\d+(\.\d+)+", glibc)
    name = "glibc >= the glibc floor of the torch wheels"
    if seen is None:
        rec.check(name, False, f"no glibc version found (saw {glibc!r}); the floor is {floor}")
        return
    ok = _version_key(seen.group()) >= _version_key(str(floor))
    rec.check(name, ok, f"glibc {seen.group()} {'>=' if ok else '<'} floor {floor}")


def check_container(rec: Recorder, want: Callable[[str], Any]) -> None:
    """What the container runs with: a non-root user, enough /dev/shm, a new enough glibc."""
    facts = rec.facts
    if want("require_non_root"):
        rec.check("runs as a non-root user", facts["uid"] != 0, f"uid {facts['uid']}")
    if want("glibc_floor"):
        check_glibc_floor(rec, facts["glibc"], want("glibc_floor"))
    if want("min_shm_bytes"):
        rec.check(
            "/dev/shm large enough for NCCL",
            facts["shm_bytes"] >= want("min_shm_bytes"),
            f"{facts['shm_bytes']} bytes >= {want('min_shm_bytes')}",
        )
    if want("rdma"):
        loads = verbs()
        rec.check("the RDMA stack the label promises loads (libibverbs)", loads == "loads", loads)


def check_gpu_arch(rec: Recorder) -> None:
    """The GPU this runs on (if any) is among the compiled architectures."""
    cap = rec.facts.get("gpu_capability")
    if cap:
        arch_list = rec.facts["arch_list"]
        rec.check("GPU architecture is compiled in", cap in arch_list, f"{cap} in {arch_list}")


def time_import_torch(rec: Recorder) -> None:
    """How long a new Python takes to `import torch` here: what every script, notebook
    kernel and DDP worker started in this image waits before its first line. A fresh process,
    since the runner's own import is behind it; no figure when that import fails (the checks
    say why)."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import torch"], capture_output=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    if done.returncode == 0:
        rec.metric("import_torch_s", time.monotonic() - started)


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    rec = Recorder(NAME, device)
    time_import_torch(rec)
    rec.facts.update(read_facts(torch))
    check_torch_works(rec, torch, device)
    check_versions(rec, expected)
    check_container(rec, expected.get)
    check_gpu_arch(rec)
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
