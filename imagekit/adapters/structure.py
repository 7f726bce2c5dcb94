"""Adapter: image structure checks with pytest-testinfra's docker backend.

A throw-away container of the image (its entrypoint replaced by `sleep`) is
inspected the way a person would with `docker exec`: who runs, what is
writable, what caches and packages the image carries, and (templates/wheel_files.py,
copied in) whether its venv holds every file its wheels installed. The container is
always removed. Whether the labels agree with what runs inside is decided by
`imagekit.verify.agreement`, from the env probe's facts; what the wheels' files add up to, by
`imagekit.verify.wheel_files`.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import tarfile
import time
from collections.abc import Mapping

import docker
import docker.errors
from docker.models.containers import Container

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.adapters.engine_facts import ContainerLimits, container_limits
from imagekit.adapters.orphans import owner
from imagekit.adapters.python_checks import python_checks, runtime_checks
from imagekit.adapters.testinfra_host import CommandResult, Host
from imagekit.errors import EngineError
from imagekit.kernel import labels as L
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.records import Check
from imagekit.kernel.retry import Backoff
from imagekit.kernel.runtime import emulation_for
from imagekit.resources import templates_dir
from imagekit.verify.wheel_files import CHECK_NAME as WHEEL_FILES
from imagekit.verify.wheel_files import SCRIPT as WHEEL_FILES_SCRIPT
from imagekit.verify.wheel_files import parse_facts, wheel_files_check

VENV = "/opt/venv"
SERVICES = {
    "jupyter": f"{VENV}/bin/jupyter",
    "tensorboard": f"{VENV}/bin/tensorboard",
    "sshd": "/usr/sbin/sshd",
}
# Where the wheel-files script is copied in the throw-away container (root reads it).
WHEEL_FILES_AT = "/tmp/imagekit-wheel-files.py"
COMPILERS = ("gcc", "g++", "make")
REQUIRED_LABELS = (L.TORCH, L.PYTHON, L.FLAVOUR, L.CELL)
BASE_SAYS = ", from its base (bootstrapped --packages-for full, label io.imagekit.base.include)"
# `docker exec` (testinfra's docker backend runs the CLI) exits 125 when the engine, not the
# command, failed: Podman 5's runc, on a loaded 2-core machine, once answered "exec failed:
# unable to start container process: read init-p: connection reset by peer", and testinfra's
# AssertionError reached the user as a traceback. Docker 26 answers the same runc failure with
# 126 and "OCI runtime exec failed: ..." on stdout (seen on a boxed containerd-store engine in
# make test, ci-20); a 126 without that line, and 127, are the command's own answers.
ENGINE_FAILED = 125
RUNTIME_FAILED = 126
RUNTIME_SAID = "OCI runtime exec failed"
EXEC_TRIES = 3


def engine_failed(out: CommandResult) -> bool:
    """Whether the engine, not the command, failed to run it (`ENGINE_FAILED`, or Docker's
    `RUNTIME_FAILED` with the runtime's own line)."""
    return out.rc == ENGINE_FAILED or (
        out.rc == RUNTIME_FAILED and RUNTIME_SAID in out.stdout + out.stderr
    )


class DockerInspector:
    """The `Inspector` port: testinfra's docker backend on a throw-away container."""

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine

    @property
    def limits(self) -> ContainerLimits:
        """The limits this engine's containers need (Podman's)."""
        return container_limits(self.engine.info())

    def structure(
        self, image_id: str, labels: Mapping[str, str], labels_run: Mapping[str, str]
    ) -> list[Check]:
        """Inspect a container of `image_id` as its default user and as root."""
        import testinfra  # imported here: only verify needs it

        with engine_errors(f"starting a structure-check container of {image_id[:19]}"):
            attrs = self.engine.client.images.get(image_id).attrs
            platform = f"{attrs.get('Os', '')}/{attrs.get('Architecture', '')}"
            # Under emulation, as the probes run: on the CPU the image is for (QEMU_CPU).
            emulation = emulation_for(platform, self.engine.info().architecture)
            container = self.engine.started_container(
                image_id,
                ["sleep", "600"],
                network_mode="none",
                labels={**labels_run, L.OWNER: owner()},
                environment=dict(emulation.environment),
                **self.limits,
            )
        try:
            configured = attrs["Config"].get("User") or "root"
            workload = L.workload_user(configured, labels)
            # testinfra names the user before '@'; a uid alone keeps its passwd group.
            user_host = engine_checked(
                testinfra.get_host(f"docker://{workload.split(':')[0]}@{container.id}")
            )
            root_host = engine_checked(testinfra.get_host(f"docker://root@{container.id}"))
            parsed = ImageLabels.parse(labels)
            return [
                *_user_checks(configured, workload, user_host),
                *_cleanliness_checks(root_host),
                *(_privilege_checks(root_host) if parsed.is_imagekit else []),
                *_label_checks(labels),
                *_flavour_checks(parsed, root_host),
                *python_checks(parsed, user_host, emulation.emulated),
                *(runtime_checks(parsed, user_host, VENV) if parsed.is_imagekit else []),
                *(_wheel_files_checks(container, parsed, root_host) if parsed.is_imagekit else []),
                *self._entrypoint_checks(image_id, parsed, workload, labels_run),
            ]
        finally:
            # On failure `imagekit gc` collects it by its labels.
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True, v=True)

    def _entrypoint_checks(
        self,
        image_id: str,
        labels: ImageLabels,
        workload: str,
        labels_run: Mapping[str, str],
    ) -> list[Check]:
        """A full image starts as root only to hand over: its entrypoint runs a command as
        the owner of the image's own /workspace, the image's user."""
        if not (labels.flavour and labels.flavour.workstation):
            return []
        with engine_errors(f"starting an entrypoint-check container of {image_id[:19]}"):
            out = self.engine.container_output(
                image_id,
                ["id", "-u"],
                through_entrypoint=True,
                network_mode="none",
                labels={**labels_run, L.OWNER: owner()},
                **self.limits,
            )
        seen = out.decode("utf-8", "replace").strip()
        return [
            Check(
                name="full's entrypoint runs commands as the image's user, not root",
                ok=seen == workload.split(":")[0],
                detail=f"id -u under the entrypoint: {seen or 'nothing'}",
            )
        ]


def engine_checked(host: Host, pause_s: float = 1.0) -> Host:
    """`host` (a testinfra host) with every command it runs retried where the engine failed
    to start it (`engine_failed`), and, after EXEC_TRIES, an EngineError (exit 3) with the engine's
    own line: the engine's trouble, not the image's and never a traceback. testinfra caches
    its hosts, so a host is wrapped once."""
    backend = host.backend
    if getattr(backend, "imagekit_checked", False):
        return host
    run = backend.run

    def checked(command: str, *args: str, **kwargs: object) -> CommandResult:
        backoff = Backoff(attempts=EXEC_TRIES, backoff_s=pause_s)
        for attempt in itertools.count(1):
            out = run(command, *args, **kwargs)
            if not engine_failed(out):
                return out
            if (delay := backoff.delay_after(attempt)) is None:
                break
            time.sleep(delay)
        lines = (out.stderr + "\n" + out.stdout).splitlines()
        said = [line for line in lines if line.strip()] or ["(nothing)"]
        raise EngineError(
            f"the engine could not run a structure check in container {backend.name[:12]} "
            f"({EXEC_TRIES} tries, exit {out.rc}): {said[0].strip()}",
            hint="the engine is in trouble (its log says why); run verify again once it is back",
        )

    backend.run = checked
    backend.imagekit_checked = True
    return host


def _user_checks(configured: str, workload: str, user: Host) -> list[Check]:
    uid = user.run("id -u").stdout.strip()
    probe = "/workspace/.imagekit-write-test"
    wrote = user.run(f"touch {probe} && rm {probe}")
    home = user.run('test -w "$HOME" && echo "$HOME"')
    return [
        Check(
            name="the image's user is numeric and non-root",
            ok=workload.split(":")[0].isdigit() and uid not in ("", "0"),
            detail=f"USER {configured}, runs as {workload}, id -u {uid}",
        ),
        Check(
            name="/workspace is writable by the default user",
            ok=wrote.rc == 0,
            detail=wrote.stderr.strip() or "ok",
        ),
        Check(
            name="HOME is writable by the default user",
            ok=home.rc == 0,
            detail=home.stdout.strip() or "not writable",
        ),
    ]


def _cleanliness_checks(root: Host) -> list[Check]:
    caches = root.run(
        "find / -xdev -type d -path '*/.cache/pip' 2>/dev/null | head -5"
    ).stdout.split()
    lists = root.run(
        "find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name partial ! -name lock "
        "2>/dev/null | head -5"
    ).stdout.split()
    # Downloaded .deb files and apt's package caches: a base without Docker's docker-clean
    # apt setting keeps them after every install unless the RUN cleans up.
    debs = root.run(
        "find /var/cache/apt -type f \\( -name '*.deb' -o -name '*.bin' \\) 2>/dev/null | head -5"
    ).stdout.split()
    return [
        Check(name="no pip cache", ok=not caches, detail=", ".join(caches) or "none found"),
        Check(name="no apt lists", ok=not lists, detail=", ".join(lists) or "empty"),
        Check(name="no apt package cache", ok=not debs, detail=", ".join(debs) or "empty"),
    ]


def _privilege_checks(root: Host) -> list[Check]:
    """No setuid or setgid program: nothing in an imagekit image takes a user back to root
    (its containers start as the image's user, or as root only to hand over)."""
    found = root.run("find / -xdev -perm /6000 -type f 2>/dev/null | head -20").stdout.split()
    return [
        Check(
            name="no setuid or setgid programs",
            ok=not found,
            detail=", ".join(found) or "none found",
        )
    ]


def _label_checks(labels: Mapping[str, str]) -> list[Check]:
    return [
        Check(
            name=f"label {key} present", ok=bool(labels.get(key)), detail=labels.get(key, "missing")
        )
        for key in REQUIRED_LABELS
    ]


def _flavour_checks(labels: ImageLabels, root: Host) -> list[Check]:
    """Slim carries no services and no compilers; full carries both and no SSH host key."""
    present = {name: root.file(path).exists for name, path in SERVICES.items()}
    # A CUDA image's full flavour carries the CUDA compiler too; its slim flavour must not.
    wanted = (*COMPILERS, "nvcc") if labels.cuda else COMPILERS
    compilers = {c: root.run(f"command -v {c}").rc == 0 for c in wanted}
    found = [n for n, p in present.items() if p] or "none"
    missing = [n for n, p in present.items() if not p] or "none"
    if labels.flavour and not labels.flavour.workstation:
        # A base bootstrapped `--packages-for full` (to build full with no package mirror)
        # carries sshd under slim too: the base's, said so, not slim's own.
        base_sshd = "openssh-server" in labels.base_packages and not (
            present["jupyter"] or present["tensorboard"]
        )
        return [
            Check(
                name="slim carries no jupyter, tensorboard or sshd",
                ok=not any(present.values()) or base_sshd,
                detail=f"found {found}" + (BASE_SAYS if base_sshd else ""),
            ),
            _slim_compiler_check(labels, root),
        ]
    if not labels.flavour:
        return []
    keys = root.run("ls /etc/ssh/ssh_host_*_key 2>/dev/null").stdout.split()
    return [
        Check(
            name="full carries jupyter, tensorboard and sshd",
            ok=all(present.values()),
            detail=f"missing {missing}",
        ),
        Check(
            name="full carries compilers",
            ok=all(compilers.values()),
            detail=f"missing {[n for n, p in compilers.items() if not p] or 'none'}",
        ),
        Check(
            name="full image holds no SSH host key", ok=not keys, detail=", ".join(keys) or "none"
        ),
    ]


def _slim_compiler_check(labels: ImageLabels, root: Host) -> Check:
    """A slim that promises torch.compile carries exactly what inductor builds with (g++,
    Python.h, torch's own headers); one that does not carries no compiler at all."""
    found = [c for c in (*COMPILERS, "nvcc") if root.run(f"command -v {c}").rc == 0]
    if labels.torch_compile is not True:
        base_compilers = bool(found) and "build-essential" in labels.base_packages
        return Check(
            name="slim carries no compilers (io.imagekit.torch-compile is not yes)",
            ok=not found or base_compilers,
            detail=f"found {found or 'none'}" + (BASE_SAYS if base_compilers else ""),
        )
    looked = root.run(
        "python3 -c 'import sysconfig, pathlib, importlib.util as u; "
        'p = pathlib.Path(sysconfig.get_paths()["include"], "Python.h"); '
        'i = pathlib.Path(u.find_spec("torch").origin).parent / "include" / "ATen" / "ATen.h"; '
        "print(p.is_file(), i.is_file())'"
    )
    flags = looked.stdout.split()
    if looked.rc != 0 or len(flags) != 2:
        # Not a finding about the headers: say what stopped the look, not "missing".
        said = (looked.stderr or looked.stdout).strip().splitlines()
        return Check(
            name="slim carries g++ and the headers torch.compile builds with",
            ok=False,
            detail=f"could not look (exit {looked.rc}): {said[-1][-200:] if said else 'no output'}",
        )
    missing = [
        n for n, ok in zip(("Python.h", "torch's ATen.h"), flags, strict=True) if ok != "True"
    ]
    missing += [] if "g++" in found else ["g++"]
    return Check(
        name="slim carries g++ and the headers torch.compile builds with",
        ok=not missing,
        detail=f"missing {missing}" if missing else "g++, Python.h, torch headers",
    )


def _wheel_files_checks(container: Container, labels: ImageLabels, root: Host) -> list[Check]:
    """Every file each installed wheel's RECORD lists, hashed inside the container in one
    Python process (templates/wheel_files.py), judged by `imagekit.verify.wheel_files`."""
    script = (templates_dir() / WHEEL_FILES_SCRIPT).read_bytes()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        item = tarfile.TarInfo(WHEEL_FILES_AT.rsplit("/", 1)[1])
        item.size, item.mode, item.mtime = len(script), 0o644, 0
        archive.addfile(item, io.BytesIO(script))
    with engine_errors(f"copying {WHEEL_FILES_SCRIPT} into a structure-check container"):
        container.put_archive(WHEEL_FILES_AT.rsplit("/", 1)[0], buffer.getvalue())
    # -I -S: no site-packages on sys.path and no .pth start-up hooks; the script is stdlib only.
    looked = root.run(f"{VENV}/bin/python -I -S {WHEEL_FILES_AT} {VENV}")
    if looked.rc != 0:
        said = looked.stderr.strip().splitlines()
        why = said[-1][-200:] if said else "no output"
        return [
            Check(name=WHEEL_FILES, ok=False, detail=f"could not look (exit {looked.rc}): {why}")
        ]
    try:
        facts = parse_facts(looked.stdout)
    except ValueError as exc:
        return [Check(name=WHEEL_FILES, ok=False, detail=f"unreadable facts: {str(exc)[:200]}")]
    return [wheel_files_check(facts, labels.flavour)]
