"""Adapter: bootstrap a minimal Debian/Ubuntu base image with mmdebstrap, without a registry.

mmdebstrap writes the root filesystem as a tar; imagekit wraps it in a
docker-archive (the `docker save` format) with an image config of its own and
loads it. With SOURCE_DATE_EPOCH and a snapshot mirror the tar, the config and
so the image id are the same on every run: `docker import` would stamp the
current time into the config instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.adapters.rootfs_cache import RootfsCache
from imagekit.build.context import file_sha256
from imagekit.build.requests import BootstrapCommand
from imagekit.errors import ExitCode, ImagekitError, InputError
from imagekit.kernel import labels as L

DEBIAN_SUITES = {"bullseye", "bookworm", "trixie", "sid", "forky"}
UBUNTU_SUITES = {"focal", "jammy", "noble", "oracular", "plucky"}
DEFAULT_MIRRORS = {
    "debian": "http://deb.debian.org/debian",
    "ubuntu": "http://archive.ubuntu.com/ubuntu",
}
# Where each distribution publishes its security suite (`SUITE-security`, Ubuntu's pocket).
SECURITY_MIRRORS = {
    "debian": "http://deb.debian.org/debian-security",
    "ubuntu": "http://security.ubuntu.com/ubuntu",
}
NO_SECURITY_SUITE = {"sid"}  # unstable takes fixes through the suite itself
LEAVE_OUT = "none"  # --security-mirror's word for no security suite
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Debian's architecture name -> the machine the kernel reports, and the OCI platform variant.
ARCHITECTURES = {"amd64": ("x86_64", ""), "arm64": ("aarch64", "v8")}
BINFMT = Path("/proc/sys/fs/binfmt_misc")


class BootstrapError(ImagekitError):
    """mmdebstrap could not make the root filesystem, or the engine refused it."""

    exit_code = ExitCode.BUILD_FAILED


def host_arch() -> str:
    """The Debian architecture name of this machine (`amd64`, `arm64`); "" when neither."""
    machine = os.uname().machine
    return next((a for a, (m, _) in ARCHITECTURES.items() if m == machine), "")


def default_arch() -> str:
    """The architecture a base is made for when none is asked: this machine's (amd64 on any
    other machine, which then runs it emulated)."""
    return host_arch() or "amd64"


def emulation_problem(arch: str, binfmt: Path = BINFMT) -> str | None:
    """None when this machine runs `arch` binaries (natively, or through a qemu interpreter
    registered with binfmt_misc); else what is missing."""
    if arch == host_arch():
        return None
    entry = binfmt / f"qemu-{ARCHITECTURES[arch][0]}"
    try:
        enabled = entry.read_text(encoding="utf-8").splitlines()[:1] == ["enabled"]
    except OSError:
        enabled = False
    if enabled:
        return None
    return f"this {os.uname().machine} machine cannot run {arch} programs: {entry} is not enabled"


def distribution(suite: str) -> str:
    """`debian` or `ubuntu` for a suite name."""
    if suite in DEBIAN_SUITES:
        return "debian"
    if suite in UBUNTU_SUITES:
        return "ubuntu"
    known = ", ".join(sorted(DEBIAN_SUITES | UBUNTU_SUITES))
    raise InputError(f"unknown suite {suite!r}", f"known suites: {known}")


def starting_line(request: BootstrapCommand) -> str:
    """What `imagekit base bootstrap` says as it begins, with how long it takes."""
    native = request.arch == default_arch()
    took = "about a minute" if native else "several minutes: emulated"
    return f"bootstrapping {request.suite} {request.arch} into {request.tag} ({took})"


def done_line(request: BootstrapCommand, image_id: str, reused: Path | None) -> str:
    """What it says at the end: the image, and the root filesystem it reused, if any."""
    kept = f" (root filesystem reused, {request.suite}'s indexes unchanged: {reused})"
    return f"{request.tag} is {image_id}" + (kept if reused else "")


def security_source(request: BootstrapCommand) -> tuple[str, str] | None:
    """(mirror, suite) of the security suite a base takes its fixes from; None where it takes
    none: asked so (`none`), a suite without one, or a mirror of one's own (`--mirror`: a
    snapshot or an air-gapped mirror) with no `--security-mirror` beside it."""
    asked = request.security_mirror
    if asked == LEAVE_OUT or request.suite in NO_SECURITY_SUITE:
        return None
    if asked is None and request.mirror is not None:
        return None
    mirror = asked or SECURITY_MIRRORS[distribution(request.suite)]
    return mirror.rstrip("/"), f"{request.suite}-security"


def image_config(
    request: BootstrapCommand,
    layer_sha: str,
    created: str,
    indexes: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """The image config: one layer, a PATH, a shell, labels saying what it was made from
    (`indexes`: each suite's InRelease URL and sha256); canonical JSON so it hashes stably."""
    variant = ARCHITECTURES[request.arch][1]
    made_from = (
        {L.BASE_INDEXES: ", ".join(f"{u} sha256:{h}" for u, h in indexes)} if indexes else {}
    )
    config = {
        "architecture": request.arch,
        **({"variant": variant} if variant else {}),
        "os": "linux",
        "created": created,
        "config": {
            "Env": [PATH_ENV, "LANG=C.UTF-8"],
            "Cmd": ["bash"],
            "Labels": {
                L.BASE_SUITE: request.suite,
                L.BASE_INCLUDE: ",".join(request.packages),
                L.BASE_VARIANT: request.variant,
                L.BASE_DOCS: "yes" if request.docs else "no",
                L.BASE_SECURITY: security[1] if (security := security_source(request)) else "none",
                L.BASE_MADE: created,
                **made_from,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_sha}"]},
        "history": [
            {
                "created": created,
                "created_by": f"imagekit base bootstrap --suite {request.suite} "
                f"--include {','.join(request.packages)}",
            }
        ],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _docker_archive(rootfs_tar: Path, config: bytes, tag: str, out: Path) -> str:
    """Write a docker-archive holding one layer; returns the image id."""
    layer_sha = file_sha256(rootfs_tar)
    config_sha = hashlib.sha256(config).hexdigest()
    manifest = [
        {"Config": f"{config_sha}.json", "RepoTags": [tag], "Layers": [f"{layer_sha}/layer.tar"]}
    ]
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:

        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            archive.addfile(info, _BytesReader(data))

        add_bytes(f"{config_sha}.json", config)
        add_bytes("manifest.json", json.dumps(manifest).encode())
        archive.add(rootfs_tar, arcname=f"{layer_sha}/layer.tar")
    return f"sha256:{config_sha}"


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.pos + size
        chunk, self.pos = self.data[self.pos : end], min(end, len(self.data))
        return chunk


# What Debian's own `-slim` images leave out: manuals, info pages, translations and package
# docs, but not the copyright files (licences must ship). The rule stays in the image
# (/etc/dpkg/dpkg.cfg.d/), so packages installed later, in the full flavour, obey it too.
SLIM_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/lintian/*",
)


# netbase's /etc/hosts, for bases of the minbase variant (printf's format).
HOSTS = r"127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"


def mmdebstrap_command(request: BootstrapCommand, out_tar: Path) -> list[str]:
    """The mmdebstrap command line that writes the root filesystem tar."""
    mirror = request.mirror or DEFAULT_MIRRORS[distribution(request.suite)]
    command = ["mmdebstrap", "--quiet", f"--variant={request.variant}", "--format=tar"]
    command.append(f"--architectures={request.arch}")
    if request.packages:
        command.append("--include=" + ",".join(request.packages))
    if not request.docs:
        command += [f"--dpkgopt={option}" for option in SLIM_DPKG_OPTIONS]
    # Drop caches and logs that differ between runs and nobody needs in an image, and the SSH
    # host keys openssh-server's install generates (a base made --packages-for full): a key in
    # the base would be every container's, in every image built on it.
    command += [
        "--customize-hook=rm -rf $1/var/cache/apt/* $1/var/lib/apt/lists/* $1/var/log/*"
        " $1/etc/ssh/ssh_host_*_key $1/etc/ssh/ssh_host_*_key.pub",
        # An /etc/hosts as netbase's (minbase has none): a BuildKit RUN container without one
        # gets a stub made for its mount and removed after the command, which leaves /etc with
        # that moment's time in the layer (BuildKit before 0.13 rewrites no times), so no two
        # builds of a RUN step would make the same layer.
        # With an epoch, the file and /etc take it (a reproducible bootstrap stays one).
        f"--customize-hook=[ -e $1/etc/hosts ] || {{ printf '{HOSTS}' >$1/etc/hosts"
        ' && { [ -z "$SOURCE_DATE_EPOCH" ]'
        ' || touch -d "@$SOURCE_DATE_EPOCH" $1/etc/hosts $1/etc; }; }',
        request.suite,
        str(out_tar),
        mirror,
    ]
    if (security := security_source(request)) is not None:
        # A second source, as a sources.list line: apt resolves from both, so every package
        # comes in its fixed version, and the base's apt sources keep it for later installs.
        command.append(f"deb {security[0]} {security[1]} main")
    return command


def _created(epoch: int | None) -> str:
    """The image's time: SOURCE_DATE_EPOCH's where given, else now (ISO 8601, UTC)."""
    return time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch if epoch is not None else time.time())
    )


def bootstrap(
    engine: DockerEngine, request: BootstrapCommand, cache: RootfsCache | None = None
) -> str:
    """Make the base image `request.tag` in the engine; returns its image id. With a `cache`,
    a root filesystem made before from the same mirror state is loaded again instead of
    running mmdebstrap (`cache.reused` says which), and a new one is kept."""
    distribution(request.suite)
    if request.arch not in ARCHITECTURES:
        raise InputError(
            f"unknown architecture {request.arch!r}", f"known: {', '.join(ARCHITECTURES)}"
        )
    if (why := emulation_problem(request.arch)) is not None:
        raise InputError(
            why,
            "install qemu-user-static and binfmt-support and enable their interpreters "
            "(make engine does this on Debian/Ubuntu as root)",
        )
    if shutil.which("mmdebstrap") is None:
        raise InputError(
            "mmdebstrap is not installed",
            "apt-get install mmdebstrap (make engine installs it on Debian/Ubuntu)",
        )
    epoch = request.source_date_epoch
    env = dict(os.environ)
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)
    created = _created(epoch)
    mirror = request.mirror or DEFAULT_MIRRORS[distribution(request.suite)]
    command = mmdebstrap_command(request, Path("rootfs.tar"))  # the key's: a fixed output path
    sources = [(mirror, request.suite), *filter(None, [security_source(request)])]
    key = cache.key(command, epoch, sources) if cache else None
    with tempfile.TemporaryDirectory(prefix="imagekit-base-") as tmp:
        rootfs = cache.find(key) if cache else None
        if rootfs is None:
            rootfs = Path(tmp) / "rootfs.tar"
            _mmdebstrap(request, rootfs, env)
            if cache:
                cache.keep_tar(key, rootfs)
        if cache and epoch is None:  # when the tar was made: the same tar, the same image
            created = cache.made(key, created)
        indexes = cache.indexes if cache and key else ()
        config = image_config(request, file_sha256(rootfs), created, indexes)
        archive = Path(tmp) / "image.tar"
        image_id = _docker_archive(rootfs, config, request.tag, archive)
        if rootfs.parent == Path(tmp):
            rootfs.unlink()  # the archive holds it (and the cache its own link)
        with engine_errors(f"loading {request.tag}"), archive.open("rb") as handle:
            # The engine answers 200 and reports a refused archive as an item of
            # the stream, which docker-py does not raise for: look at every item.
            for item in engine.client.api.load_image(handle, quiet=True):
                if isinstance(item, dict) and ("error" in item or "errorDetail" in item):
                    detail = item.get("errorDetail") or {}
                    why = str(item.get("error") or detail.get("message") or "load failed")
                    raise BootstrapError(
                        f"the engine did not load {request.tag}: {why.strip()}",
                        "see the engine's log (journalctl -u docker) for why it refused it",
                    )
    return image_id


def _mmdebstrap(request: BootstrapCommand, rootfs: Path, env: dict[str, str]) -> None:
    """Run mmdebstrap into `rootfs`; a BootstrapError with its last lines where it fails."""
    done = subprocess.run(
        mmdebstrap_command(request, rootfs), env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise BootstrapError(
            f"mmdebstrap failed for {request.suite} (exit {done.returncode}):\n{tail}",
            "check --mirror (it must serve this suite) and that you are root",
        )
