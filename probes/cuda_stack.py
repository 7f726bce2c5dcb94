"""The CUDA stack is whole and the one the labels promise, proven without a GPU.

Reads on the CPU what a GPU run would depend on: the CUDA torch was built for, the cuDNN and
NCCL libraries (their own version calls and their wheels' versions), the compiled GPU
architectures, that every shared library of the torch and nvidia packages finds its
dependencies, that no second copy of cuDNN or NCCL can shadow the wheels', and what NCCL could
use between nodes (libibverbs, NET plugins).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _cudalibs import (
    LIBRARIES,
    check_libraries,
    check_wheels,
    library_versions,
    verbs,
    wheel_version,
)
from _probekit import Recorder, main_for, probe_name, skip

NAME = probe_name(__file__)
PROBE = {
    "level": "static",
    "needs_gpu": False,
    "timeout_s": 180,
    "flavours": ["slim", "full"],
}

# Libraries the NVIDIA driver provides: the container toolkit mounts them from the host when a
# container is started with GPUs, so on a machine without a GPU they are rightly absent.
DRIVER_LIBRARY = re.compile(
    r"^lib(cuda|cudadebugger|nvidia-[a-z0-9-]+|nvcuvid|nvoptix|nvrtc-builtins-driver)\.so"
)

# Plugins loaded with dlopen only when a user configures that transport, each needing system
# libraries a CUDA runtime image does not carry (MPI, InfiniBand verbs, libfabric, UCX, PMIx).
# Their unresolved dependencies are reported as facts, not failures.
OPTIONAL_PLUGIN = re.compile(
    r"^(nvshmem_bootstrap_(mpi|shmem|pmix|pmi2?)|nvshmem_transport_(ibrc|ibdevx|ibgda|libfabric|ucx))"
    r"|^libcufile_rdma\.so"
)

# System directories where a distribution or a vendor installer puts shared libraries.
SYSTEM_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local", "/opt")
SHADOW_NAME = re.compile(r"^lib(cudnn|nccl)([_a-z0-9]*)?\.so")


def site_packages() -> Path:
    """The site-packages folder torch is installed in."""
    import torch

    return Path(torch.__file__).resolve().parent.parent


def shared_objects(roots: list[Path]) -> list[Path]:
    """Every ELF shared object (by name) under `roots`, symlinks left out."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.so*")):
            if path.is_file() and not path.is_symlink() and re.search(r"\.so(\.\d+)*$", path.name):
                found.append(path)
    return found


def unresolved(path: Path) -> list[str]:
    """The dependencies of `path` that the dynamic loader cannot find (per `ldd`)."""
    out = subprocess.run(
        ["ldd", str(path)], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    return [line.split()[0] for line in out.splitlines() if "=> not found" in line]


def loaded_libraries(pattern: str) -> list[str]:
    """Paths of the shared objects mapped into this process whose name matches `pattern`."""
    seen = []
    with open("/proc/self/maps", encoding="utf-8") as handle:
        for line in handle:
            parts = line.split(maxsplit=5)  # address perms offset dev inode [path]
            path = parts[5].strip() if len(parts) == 6 else ""
            if path.startswith("/") and re.match(pattern, os.path.basename(path)):
                seen.append(os.path.realpath(path))
    return sorted(set(seen))


def stray_copies(own: Path) -> list[str]:
    """cuDNN or NCCL libraries outside this environment's wheels (system dirs, ldconfig)."""
    dirs = [*SYSTEM_LIBRARY_DIRS, *filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":"))]
    found: set[str] = set()
    for top in dirs:
        for folder, subdirs, files in os.walk(top):
            if Path(folder).resolve() == own or own in Path(folder).resolve().parents:
                subdirs[:] = []
                continue
            # realpath: /lib is /usr/lib on merged-/usr systems; one file, named once.
            found.update(
                os.path.realpath(os.path.join(folder, f)) for f in files if SHADOW_NAME.match(f)
            )
    try:
        cache = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, check=False, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        cache = ""
    for line in cache.splitlines():
        name = line.strip().split(" ", 1)[0]
        if SHADOW_NAME.match(name) and "=>" in line:
            found.add(os.path.realpath(line.rsplit("=>", 1)[1].strip()))
    return sorted(p for p in found if own not in Path(os.path.realpath(p)).parents)


@dataclass
class Resolution:
    """How the dependencies of the shared libraries resolve, by library (relative path)."""

    broken: dict[str, list[str]] = field(default_factory=dict)  # missing: a failure
    optional: dict[str, list[str]] = field(default_factory=dict)  # optional plugins: facts
    siblings: dict[str, list[str]] = field(default_factory=dict)  # found once siblings load
    driver: set[str] = field(default_factory=set)  # the host's NVIDIA driver provides them


def resolve_all(libraries: list[Path]) -> dict[Path, list[str]]:
    """Each library's unresolved dependencies, `ldd` run in parallel."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip(libraries, pool.map(unresolved, libraries), strict=True))


def classify(deps: dict[Path, list[str]], present: set[str], site: Path) -> Resolution:
    """Sort the unresolved dependencies: the driver's, optional plugins', siblings', missing."""
    found = Resolution()
    for path, names in deps.items():
        found.driver.update(n for n in names if DRIVER_LIBRARY.match(n))
        names_left = [n for n in names if not DRIVER_LIBRARY.match(n)]
        where = str(path.relative_to(site))
        if OPTIONAL_PLUGIN.match(path.name):
            if names_left:
                found.optional[where] = names_left
            continue
        beside = [n for n in names_left if n in present]
        if beside:
            found.siblings[where] = beside
        missing = [n for n in names_left if n not in present]
        if missing:
            found.broken[where] = missing
    return found


def check_cuda(rec: Recorder, torch: Any, want: Callable[[str], Any]) -> bool:
    """torch is built for the CUDA of the label; False when it is built for no CUDA at all."""
    rec.facts["cuda"] = torch.version.cuda
    if want("torch") is None:
        # Host mode: no image, so no label to compare with; what torch is built for is a fact.
        return rec.check(
            "torch is built for a CUDA", torch.version.cuda is not None, f"{torch.version.cuda}"
        )
    rec.equal("torch is built for the CUDA of the label", torch.version.cuda, want("cuda"))
    return torch.version.cuda is not None


def check_versions(rec: Recorder, torch: Any, want: Callable[[str], Any]) -> None:
    """cuDNN and NCCL: the wheel installed, and what the loaded library itself reports."""
    seen = library_versions(torch)
    wheels = {key: wheel_version(key) for key in LIBRARIES}
    for key in LIBRARIES:
        wheel = wheels[key]
        rec.facts[f"{key}_library"] = seen[key]
        rec.facts[f"{key}_wheel"] = f"{wheel[0]}=={wheel[1]}" if wheel else None
    check_wheels(rec, wheels, want)
    check_libraries(rec, seen, want)


def check_archs(rec: Recorder, torch: Any, want: Callable[[str], Any]) -> None:
    """The compiled GPU architectures cover the label's: read from the binary, no GPU needed."""
    flags = torch._C._cuda_getArchFlags().split()
    rec.facts["arch_flags"] = flags
    if want("archs"):
        missing = [a for a in want("archs") if a not in flags]
        rec.check(
            "compiled GPU architectures cover the label",
            not missing,
            f"missing {missing}" if missing else f"{len(want('archs'))} covered by {flags}",
        )


def check_dependencies(rec: Recorder, site: Path) -> None:
    """Every shared library of the torch and nvidia packages finds its dependencies."""
    roots = [p for p in (site / "torch", site / "nvidia") if p.is_dir()]
    libraries = shared_objects(roots)
    # A library without a RUNPATH finds a sibling only once that sibling is loaded (torch loads
    # the nvidia libraries by path): the sibling exists, so nothing is missing.
    present = {p.name for root in roots for p in root.rglob("*.so*")}
    found = classify(resolve_all(libraries), present, site)
    rec.facts["shared_libraries"] = len(libraries)
    rec.facts["driver_libraries_expected_from_host"] = sorted(found.driver)
    rec.facts["optional_plugins_missing_system_libraries"] = found.optional
    rec.facts["resolve_once_siblings_are_loaded"] = found.siblings
    rec.check(
        "every shared library under torch/ and nvidia/ resolves",
        bool(libraries) and not found.broken,
        f"{len(libraries)} libraries; unresolved: {found.broken}"
        if found.broken
        else f"{len(libraries)} libraries resolve",
    )


def check_one_copy(rec: Recorder, site: Path, *, image: bool = True) -> None:
    """One cuDNN, one NCCL: the wheels'. Loaded from there, and no other copy on the system."""
    own = (site / "nvidia").resolve()
    loaded = loaded_libraries(r"^lib(cudnn|nccl)")
    rec.facts["loaded_cudnn_nccl"] = loaded
    outside = [p for p in loaded if own not in Path(p).parents]
    rec.check(
        "cuDNN and NCCL are loaded from the wheels",
        bool(loaded) and not outside,
        f"loaded from elsewhere: {outside}" if outside else f"{len(loaded)} from {own}",
    )
    strays = stray_copies(own)
    rec.facts["stray_cudnn_nccl"] = strays
    if not image:
        # Host mode: a host's own cuDNN (a CUDA install, say) is the host's business; the
        # wheels' copy was loaded (above), and the fact says what else is there.
        return
    rec.check(
        "no second cuDNN or NCCL can shadow the wheels'",
        not strays,
        f"found {strays}" if strays else "none in system library folders or the ldconfig cache",
    )


def nccl_net_plugins(site: Path) -> list[str]:
    """NCCL NET plugins (libnccl-net*.so) NCCL would find: on LD_LIBRARY_PATH, in the nvidia
    wheels, or in the system library folders."""
    roots = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    roots += [site / "nvidia", *(Path(d) for d in SYSTEM_LIBRARY_DIRS)]
    found = set()
    for root in roots:
        if root.is_dir():
            found |= {str(p) for p in root.rglob("libnccl-net*.so*") if p.is_file()}
    return sorted(found)


def check_fabric(rec: Recorder, site: Path, want: Callable[[str], Any]) -> None:
    """What NCCL could use between nodes, without any NIC present: whether libibverbs loads
    (InfiniBand/RoCE) and which NET plugins (AWS EFA's aws-ofi-nccl, ...) it would find.
    Facts, unless the image promises RDMA (`rdma` expected): then libibverbs must load."""
    loads = verbs()
    rec.facts["libibverbs"] = loads
    rec.facts["nccl_net_plugins"] = nccl_net_plugins(site)
    if want("rdma"):
        rec.check("NCCL can load libibverbs (InfiniBand/RoCE)", loads == "loads", loads)


def run(device: str, expected: dict[str, Any]) -> dict[str, Any]:
    import torch

    want = expected.get
    if torch.version.cuda is None and not want("cuda"):
        return skip(NAME, "a CPU build of torch: there is no CUDA stack to check")
    rec = Recorder(NAME, device)
    if check_cuda(rec, torch, want):
        site = site_packages()
        check_versions(rec, torch, want)
        check_archs(rec, torch, want)
        check_dependencies(rec, site)
        check_one_copy(rec, site, image=want("torch") is not None)
        check_fabric(rec, site, want)
        rec.facts["python"] = sys.executable
    return rec.report()


if __name__ == "__main__":
    main_for(NAME, run)
