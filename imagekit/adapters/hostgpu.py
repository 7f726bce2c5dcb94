"""Adapter: what NVIDIA driver and GPUs this host has, read with nvidia-smi.

Only reads; never loads CUDA, so it works where torch is absent and on machines without a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from imagekit.doctor.verdict import Gpu, HostGpus

QUERY = "index,name,driver_version,compute_cap"
PROC_VERSION = Path("/proc/driver/nvidia/version")


def parse_query(text: str) -> tuple[str | None, tuple[Gpu, ...]]:
    """The driver and GPUs from `nvidia-smi --query-gpu=index,name,driver_version,compute_cap
    --format=csv,noheader` output."""
    driver, gpus = None, []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        index, name, version, capability = parts
        driver = driver or version
        gpus.append(Gpu(int(index), name, capability))
    return driver, tuple(gpus)


def proc_driver_version(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version ("... Kernel Module  580.65.06 ...")."""
    words = text.split()
    return next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), None)


def read_host(nvidia_smi: str | None = None, timeout_s: float = 30) -> HostGpus:
    """This host's driver and GPUs. Without a driver: HostGpus(None) and the reason why."""
    problems = []
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi:
        try:
            done = subprocess.run(
                [smi, f"--query-gpu={QUERY}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
            if done.returncode == 0:
                driver, gpus = parse_query(done.stdout)
                if driver:
                    return HostGpus(driver, gpus, f"{smi} --query-gpu")
            problems.append(
                f"nvidia-smi exited {done.returncode}: "
                + ((done.stderr or done.stdout).strip().splitlines() or [""])[-1]
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"nvidia-smi did not answer: {exc}")
    else:
        problems.append("nvidia-smi is not installed (no NVIDIA driver utilities on PATH)")
    try:
        driver = proc_driver_version(PROC_VERSION.read_text(encoding="utf-8"))
    except OSError:
        driver = None
        problems.append(f"{PROC_VERSION} is absent (no NVIDIA kernel module loaded)")
    return HostGpus(driver, (), str(PROC_VERSION) if driver else "", tuple(problems))
