"""The image is what its labels say: versions, GPU architectures, user, shared memory."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from _probekit import Recorder, main_for

PROBE = {
    "name": "env",
    "level": "static",
    "needs_gpu": False,
    "min_gpus": 0,
    "timeout_s": 60,
    "flavours": ["slim", "full"],
}

# NCCL needs far more than Docker's default 64 MB /dev/shm for multi-GPU runs.
MIN_SHM_BYTES = 1 << 30


def cudnn_text(version: int | None) -> str | None:
    """cuDNN 9 reports 92400 for 9.24.0; turn it into "9.24.0"."""
    if not version:
        return None
    major, rest = divmod(version, 10000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _glibc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return " ".join(platform.libc_ver())


def _driver() -> str | None:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            words = handle.readline().split()
        return next((w for w in words if w[:1].isdigit() and "." in w), None)
    except OSError:
        return None


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    rec = Recorder("env", device)
    facts = rec.facts
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.version.cuda
    facts["python"] = ".".join(map(str, sys.version_info[:3]))
    facts["glibc"] = _glibc()
    facts["uid"] = os.getuid()
    facts["gid"] = os.getgid()
    shm = os.statvfs("/dev/shm")
    facts["shm_bytes"] = shm.f_frsize * shm.f_blocks
    facts["cuda_available"] = torch.cuda.is_available()
    # The compiled list, read from the binary: get_arch_list() is empty without a GPU.
    facts["arch_list"] = torch._C._cuda_getArchFlags().split() if torch.version.cuda else []
    cudnn_runtime = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    facts["cudnn"] = cudnn_text(cudnn_runtime)
    try:
        compiled = torch._C._cudnn.getCompileVersion()  # (major, minor, patch)
        facts["cudnn_compiled"] = ".".join(map(str, compiled))
    except (AttributeError, RuntimeError):
        facts["cudnn_compiled"] = None
    try:
        facts["nccl"] = (
            ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
        )
    except (AttributeError, RuntimeError):
        facts["nccl"] = None
    if torch.cuda.is_available():
        facts["gpu_count"] = torch.cuda.device_count()
        facts["gpu_name"] = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        facts["gpu_capability"] = f"sm_{major}{minor}"
        facts["driver"] = _driver()

    rec.check("torch imports and reports a version", bool(torch.__version__), torch.__version__)
    made = torch.ones(2, device=device).sum().item()
    rec.equal(f"a tensor computes on {device}", made, 2.0)
    want = expected.get
    if want("require_non_root"):
        rec.check("runs as a non-root user", facts["uid"] != 0, f"uid {facts['uid']}")
    if want("torch"):
        rec.equal("torch version", torch.__version__.split("+")[0], want("torch"))
    if "cuda" in expected:
        rec.equal("torch.version.cuda", facts["cuda"], want("cuda"))
    if want("python"):
        rec.equal("python", ".".join(facts["python"].split(".")[:2]), want("python"))
    if want("cudnn"):
        # The library reports major.minor.patch; the label carries the wheel's 4-part version.
        expect = ".".join(str(want("cudnn")).split(".")[:3])
        rec.equal("cuDNN runtime version", facts["cudnn"], expect)
    if facts["cudnn"] and facts["cudnn_compiled"]:
        # A second cuDNN earlier on the library path shows up here as a different version.
        same = facts["cudnn_compiled"].split(".")[:2] == facts["cudnn"].split(".")[:2]
        rec.check(
            "cuDNN runtime == compile version",
            same,
            f"runtime {facts['cudnn']}, compiled against {facts['cudnn_compiled']}",
        )
    if want("nccl"):
        rec.equal("NCCL version", facts["nccl"], want("nccl"))
    if want("glibc_floor"):
        seen = facts["glibc"].split()[-1] if facts["glibc"] else "0"
        ok = tuple(map(int, seen.split("."))) >= tuple(map(int, want("glibc_floor").split(".")))
        rec.check("glibc new enough for the wheels", ok, f"glibc {seen} >= {want('glibc_floor')}")
    if want("min_shm_bytes"):
        rec.check(
            "/dev/shm large enough for NCCL",
            facts["shm_bytes"] >= want("min_shm_bytes"),
            f"{facts['shm_bytes']} bytes >= {want('min_shm_bytes')}",
        )
    if facts.get("gpu_capability"):
        cap = facts["gpu_capability"]
        rec.check(
            "GPU architecture is compiled in",
            cap in facts["arch_list"],
            f"{cap} in {facts['arch_list']}",
        )
    return rec.report()


if __name__ == "__main__":
    main_for("env", run)
