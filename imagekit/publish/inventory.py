"""What an image holds, read from what its own tools print: the input of its SBOM. Pure.

`pip list --format json`, `dpkg-query -W` and `/etc/os-release`, run inside the image, become
one `Inventory` (kernel/engine.py). The torch wheel and every `nvidia-*` wheel carry the CUDA stack
the image was verified with (CUDA, cuDNN, NCCL) as properties: what the env probe saw inside
the image when there is a passing record, else what the image's labels promise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from imagekit.kernel.json import JsonValue
from imagekit.kernel.labels import ImageLabels
from imagekit.publish.ports import Inventory, Package

DPKG_FORMAT = "${Package}\\t${Version}\\t${Architecture}\\n"
STACK = ("cuda", "cudnn", "nccl")
PROPERTY = "imagekit:{}:version"


def normalized(name: str) -> str:
    """A Python distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def carries_stack(name: str) -> bool:
    """Whether a Python distribution is part of the CUDA stack: torch and the nvidia-* wheels."""
    found = normalized(name)
    return found == "torch" or found.startswith("nvidia-")


def cuda_stack(
    labels: ImageLabels, env_facts: Mapping[str, JsonValue] | None = None
) -> dict[str, str]:
    """CUDA, cuDNN and NCCL versions of the image: seen by the env probe, else labelled."""
    facts = env_facts or {}
    said = {"cuda": labels.cuda or "", "cudnn": labels.cudnn, "nccl": labels.nccl}
    found = {}
    for key in STACK:
        value = facts.get(key) or said[key]
        if value:
            found[key] = str(value)
    return found


def python_packages(pip_json: str, stack: Mapping[str, str]) -> tuple[Package, ...]:
    """`pip list --format json`, the CUDA stack attached to torch and the nvidia-* wheels."""
    found = []
    for item in json.loads(pip_json or "[]"):
        name, version = str(item["name"]), str(item["version"])
        properties = (
            tuple((PROPERTY.format(k), stack[k]) for k in STACK if k in stack)
            if carries_stack(name)
            else ()
        )
        found.append(Package(name, version, "", properties))
    return tuple(sorted(found, key=lambda p: normalized(p.name)))


def os_packages(dpkg: str) -> tuple[Package, ...]:
    """`dpkg-query -W -f DPKG_FORMAT` lines as packages."""
    found = []
    for line in dpkg.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] and parts[1]:
            found.append(Package(parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return tuple(sorted(found, key=lambda p: (p.name, p.arch)))


def distro(os_release: str) -> str:
    """`debian-12` from /etc/os-release (ID and VERSION_ID); "" when it says neither."""
    values = {}
    for line in os_release.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    name, version = values.get("ID", ""), values.get("VERSION_ID", "")
    return f"{name}-{version}" if name and version else name


def inventory(
    reference: str,
    digest: str,
    image_id: str,
    *,
    pip_json: str,
    dpkg: str,
    os_release: str,
    stack: Mapping[str, str],
) -> Inventory:
    """The whole inventory of one image."""
    return Inventory(
        reference=reference,
        digest=digest,
        image_id=image_id,
        distro=distro(os_release),
        os_packages=os_packages(dpkg),
        python_packages=python_packages(pip_json, stack),
    )
