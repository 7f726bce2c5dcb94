"""Adapter: image structure checks with pytest-testinfra's docker backend.

A throw-away container of the image (its entrypoint replaced by `sleep`) is
inspected the way a person would with `docker exec`: who runs, what is
writable, what caches and packages the image carries. The container is always
removed.
"""

from __future__ import annotations

import contextlib
from typing import Any

import docker
import docker.errors

from imagekit.checks import Check
from imagekit.engine import RUN_LABEL, engine_errors

SERVICES = {
    "jupyter": "/opt/venv/bin/jupyter",
    "tensorboard": "/opt/venv/bin/tensorboard",
    "sshd": "/usr/sbin/sshd",
}
COMPILERS = ("gcc", "g++", "make")


def check_image(
    client: docker.DockerClient,
    image: str,
    labels: dict[str, str],
    facts: dict[str, Any],
    run_labels: dict[str, str],
) -> list[Check]:
    """Inspect a container of `image`; `facts` are the env probe's, to compare labels with."""
    import testinfra  # imported here: only verify needs it

    with engine_errors(f"starting a structure-check container of {image}"):
        container = client.containers.run(
            image,
            ["sleep", "600"],
            entrypoint=[],
            detach=True,
            network_mode="none",
            labels={**run_labels, RUN_LABEL: run_labels.get(RUN_LABEL, "")},
        )
    try:
        user_host = testinfra.get_host(f"docker://{container.id}")
        root_host = testinfra.get_host(f"docker://root@{container.id}")
        return _checks(client, image, labels, facts, user_host, root_host)
    finally:
        # On failure `imagekit gc` collects it by its labels.
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True, v=True)


def _checks(
    client: docker.DockerClient,
    image: str,
    labels: dict[str, str],
    facts: dict[str, Any],
    user: Any,
    root: Any,
) -> list[Check]:
    out: list[Check] = []

    def add(name: str, ok: bool, detail: str) -> None:
        out.append(Check(name, bool(ok), detail))

    configured = client.images.get(image).attrs["Config"].get("User") or "root"
    uid = user.run("id -u").stdout.strip()
    add(
        "default user is numeric and non-root",
        configured.split(":")[0].isdigit() and uid not in ("", "0"),
        f"USER {configured}, id -u {uid}",
    )
    probe = "/workspace/.imagekit-write-test"
    wrote = user.run(f"touch {probe} && rm {probe}")
    add("/workspace is writable by the default user", wrote.rc == 0, wrote.stderr.strip() or "ok")
    home = user.run('test -w "$HOME" && echo "$HOME"')
    add("HOME is writable by the default user", home.rc == 0, home.stdout.strip() or "not writable")
    caches = root.run(
        "find / -xdev -type d -path '*/.cache/pip' 2>/dev/null | head -5"
    ).stdout.split()
    add("no pip cache", not caches, ", ".join(caches) or "none found")
    lists = root.run(
        "find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name partial ! -name lock "
        "2>/dev/null | head -5"
    ).stdout.split()
    add("no apt lists", not lists, ", ".join(lists) or "empty")

    for key in ("torch", "python", "flavour", "cell"):
        add(
            f"label io.imagekit.{key} present",
            bool(labels.get(f"io.imagekit.{key}")),
            labels.get(f"io.imagekit.{key}", "missing"),
        )
    if facts.get("torch"):
        seen = str(facts["torch"]).split("+")[0]
        add(
            "torch label matches the image",
            seen == labels.get("io.imagekit.torch"),
            f"label {labels.get('io.imagekit.torch')}, torch reports {seen}",
        )
    if facts.get("python"):
        seen = ".".join(str(facts["python"]).split(".")[:2])
        add(
            "python label matches the image",
            seen == labels.get("io.imagekit.python"),
            f"label {labels.get('io.imagekit.python')}, python reports {seen}",
        )
    if "cuda" in facts:
        add(
            "cuda label matches the image",
            facts["cuda"] == (labels.get("io.imagekit.cuda") or None),
            f"label {labels.get('io.imagekit.cuda', 'none')}, torch reports {facts['cuda']}",
        )

    flavour = labels.get("io.imagekit.flavour", "")
    present = {name: root.file(path).exists for name, path in SERVICES.items()}
    # A CUDA image's full flavour carries the CUDA compiler too; its slim flavour must not.
    wanted = (*COMPILERS, "nvcc") if labels.get("io.imagekit.cuda") else COMPILERS
    compilers = {c: root.run(f"command -v {c}").rc == 0 for c in wanted}
    if flavour == "slim":
        add(
            "slim carries no jupyter, tensorboard or sshd",
            not any(present.values()),
            f"found {[n for n, p in present.items() if p] or 'none'}",
        )
        add(
            "slim carries no compilers",
            not any(compilers.values()),
            f"found {[n for n, p in compilers.items() if p] or 'none'}",
        )
    elif flavour == "full":
        add(
            "full carries jupyter, tensorboard and sshd",
            all(present.values()),
            f"missing {[n for n, p in present.items() if not p] or 'none'}",
        )
        add(
            "full carries compilers",
            all(compilers.values()),
            f"missing {[n for n, p in compilers.items() if not p] or 'none'}",
        )
        keys = root.run("ls /etc/ssh/ssh_host_*_key 2>/dev/null").stdout.split()
        add("full image holds no SSH host key", not keys, ", ".join(keys) or "none")
    return out
