"""The requests of the commands that publish images and run them: publish, attest verify,
run, doctor."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from imagekit.core.attest import Requirement
from imagekit.core.records import Reached
from imagekit.core.requests.options import (
    FLAVOUR,
    GPUS,
    JSON,
    ONLY,
    PLATFORM,
    RESULTS,
    Arg,
    Flags,
    Opt,
)
from imagekit.core.requests.selection import Selection
from imagekit.core.runtime import GpuChoice, Service
from imagekit.errors import InputError

if TYPE_CHECKING:
    from imagekit.core.publish import PublishSettings


@dataclass(frozen=True)
class PublishCommand:
    """Push the tags of images that passed verification (exit 6 if any is refused or fails);
    `imagekit publish --help` says more (cli/publish.py)."""

    selection: Selection
    registry: Annotated[
        str | None, Opt("--registry", help="Push to this registry instead of the matrix's.")
    ] = None
    dry_run: Annotated[
        bool, Opt("--dry-run/--no-dry-run", help="Check everything, push nothing.")
    ] = False
    force: Annotated[
        bool, Opt("--force/--no-force", help="Publish despite the gate (recorded in the results).")
    ] = False
    candidate: Annotated[
        str | None,
        Opt(
            "--candidate",
            help="Push only TAG-candidate-ID of each gated image, nothing else (CI, before "
            "the other jobs verify it).",
        ),
    ] = None
    from_candidate: Annotated[
        str | None,
        Opt(
            "--from-candidate",
            help="Promote TAG-candidate-ID inside the registry: the same manifest under the "
            "versioned tag and the aliases, gated on records for the image it holds; no pull, "
            "no engine.",
        ),
    ] = None
    attempts: Annotated[int, Opt("--attempts", min=1, max=10, help="Tries per tag.")] = 4
    deadline_s: Annotated[
        float,
        Opt(
            "--deadline-s",
            min=1,
            help="Stop retrying the registry once this many seconds have passed.",
        ),
    ] = 300.0
    backoff_s: Annotated[
        float, Opt("--backoff-s", min=0, help="First retry delay; doubles each time.")
    ] = 2.0
    results: Annotated[Path, RESULTS] = Path("results")
    json: Annotated[bool, JSON] = False
    # A cosign private key (file, or a URI cosign resolves): sign and attest each digest.
    signing_key: Annotated[
        str | None,
        Opt(
            "--signing-key",
            envvar="IMAGEKIT_SIGNING_KEY",
            help="A cosign private key (its password in COSIGN_PASSWORD): sign each published "
            "digest and attach the verify record and the SBOM as attestations.",
        ),
    ] = None

    def __post_init__(self) -> None:
        if self.candidate and self.from_candidate:
            raise InputError(
                "--candidate pushes a candidate and --from-candidate publishes one; pick one"
            )

    def settings(self) -> PublishSettings:
        """What to publish and how: the mode is decided here, once, from `--candidate` and
        `--from-candidate` (neither: push the final tags)."""
        from imagekit.core.publish import PublishMode, PublishSettings

        mode = PublishMode.PUSH
        if self.candidate:
            mode = PublishMode.CANDIDATE
        elif self.from_candidate:
            mode = PublishMode.PROMOTION
        candidate = self.candidate or self.from_candidate or ""
        return PublishSettings(mode, candidate, self.registry, self.dry_run, self.force)

    @property
    def signing(self) -> str | None:
        """The key to sign with: none on a dry run, which pushes nothing to sign."""
        return None if self.dry_run else self.signing_key


def docker_user(value: str | None) -> str | None:
    """`--user` as docker takes it: NAME or UID, with an optional :GROUP or :GID."""
    if value is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?", value):
        raise InputError(
            f"--user {value!r} is not USER[:GROUP]", "e.g. --user 1000:1000 or --user ml"
        )
    return value


def host_ports(items: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """`HOST:CONTAINER` items as (container, host) pairs."""
    found = []
    for item in items:
        host, sep, inside = item.partition(":")
        if not sep or not host.isdigit() or not inside.isdigit():
            raise InputError(f"--port {item!r} is not HOST:CONTAINER", "e.g. --port 18888:8888")
        found.append((int(inside), int(host)))
    return tuple(found)


SERVICES = Flags(
    jupyter=Opt("--jupyter", help="JupyterLab (the default)."),
    ssh=Opt("--ssh", help="sshd, key only."),
    tensorboard=Opt("--tensorboard", help="TensorBoard."),
    shell=Opt("--shell", help="An interactive shell."),
)


@dataclass(frozen=True)
class RunCommand:
    """Start JupyterLab, sshd or TensorBoard in an image (or a shell / a command)."""

    image: Annotated[str, Arg(help="A full image (any image for --shell / -- CMD).")]
    command: Annotated[
        tuple[str, ...], Arg(help="After --: a command to run instead of a service.")
    ] = ()
    # on the line, one flag each (`pick_service`)
    service: Annotated[Service, SERVICES] = Service.JUPYTER
    authorized_keys: Annotated[
        Path | None,
        Opt("--authorized-keys", help="Public keys for --ssh (default: ~/.ssh/id_*.pub)."),
    ] = None
    workspace: Annotated[
        Path, Opt("--workspace", help="Folder mounted at /workspace (default: here).")
    ] = Path(".")
    gpus: Annotated[GpuChoice, GPUS] = GpuChoice.AUTO
    # (container port, host port)
    ports: Annotated[
        tuple[tuple[int, int], ...],
        Opt(
            "--port",
            help="HOST:CONTAINER port mapping (repeatable).",
            given_as=list[str] | None,
            parse=host_ports,
        ),
    ] = ()
    # docker's --user: the service runs as exactly this user
    user: Annotated[
        str | None,
        Opt(
            "--user",
            help="Run as USER[:GROUP] (docker's --user). Default: the owner of the workspace.",
            parse=docker_user,
        ),
    ] = None

    @staticmethod
    def pick_service(flags: Mapping[str, bool], command: tuple[str, ...]) -> Service:
        """The one service the flags name (default jupyter), or `command` after `--`."""
        chosen = [name for name, on in flags.items() if on]
        if chosen and command[:1] in (("true",), ("false",), ("yes",), ("no",)):
            raise InputError(
                f"--{chosen[0]} takes no value ({command[0]!r} was read as a command to run)",
                f"drop {command[0]!r}: imagekit run IMAGE --{chosen[0]}",
            )
        if len(chosen) > 1 or (chosen and command):
            raise InputError("pick one of --jupyter, --ssh, --tensorboard, --shell or -- CMD")
        if chosen:
            return Service(chosen[0])
        return Service.COMMAND if command else Service.JUPYTER

    def __post_init__(self) -> None:
        if not self.workspace.is_dir():
            raise InputError(f"--workspace {self.workspace} is not a folder")
        # Before any engine call: Docker would bind-mount a missing file as a new folder.
        if self.authorized_keys is not None and not self.authorized_keys.is_file():
            raise InputError(
                f"--authorized-keys {self.authorized_keys} is not a file",
                "pass a public key file, such as ~/.ssh/id_ed25519.pub",
            )


@dataclass(frozen=True)
class DoctorRequest:
    """Read this host's NVIDIA driver and GPUs and say whether each image's labels allow it to
    run here (driver new enough, architecture compiled in), before anything is pulled.

    Exit 7 when an image cannot use the GPUs here, or needs a GPU this host lacks."""

    images: Annotated[
        tuple[str, ...],
        Opt("--image", help="An image to check (repeatable): local engine first, then registry."),
    ] = ()
    matrix: Annotated[
        Path | None, Opt("--matrix", "-m", help="Check every image this matrix would build.")
    ] = None
    only: Annotated[tuple[str, ...], ONLY] = ()
    flavour: Annotated[str | None, FLAVOUR] = None
    platform: Annotated[str | None, PLATFORM] = None
    nvidia_smi: Annotated[
        Path | None, Opt("--nvidia-smi", help="The nvidia-smi to ask (default: the one on PATH).")
    ] = None
    json: Annotated[bool, JSON] = False
    # A cosign public key: show each --image's attested level.
    key: Annotated[
        str | None,
        Opt(
            "--key",
            help="A cosign public key: also show the level each --image's signed verify "
            "attestation reached.",
        ),
    ] = None

    def __post_init__(self) -> None:
        if (self.only or self.platform) and self.matrix is None:
            option = "--only" if self.only else "--platform"
            raise InputError(f"{option} picks images of a matrix", "add --matrix FILE")
        if self.key and not self.images:
            raise InputError("--key checks the attestations of --image IMAGE", "add --image")


# The levels an attested record can be required to reach, by the name --require-level takes.
REQUIRABLE: dict[str, Reached] = {"static": "static", "cpu": "cpu", "gpu": "gpu"}
LEVEL_NAMES = tuple(REQUIRABLE)


@dataclass(frozen=True)
class AttestVerifyRequest:
    """Check that IMAGE is signed by KEY and that its attested verify record reaches what is
    required. Exit 8, with one line saying why, when the image is unsigned, signed by another
    key, or its record falls short."""

    image: Annotated[str, Arg(help="The image: REGISTRY/REPOSITORY:TAG or @DIGEST.")]
    key: Annotated[str, Opt("--key", help="The cosign public key the image must be signed with.")]
    require_level: Annotated[
        str | None,
        Opt(
            "--require-level",
            help="The level the attested verify record must reach: " + ", ".join(LEVEL_NAMES),
        ),
    ] = None
    require_probes: Annotated[
        tuple[str, ...],
        Opt("--require-probe", help="A probe that must have passed (repeatable)."),
    ] = ()
    json: Annotated[bool, JSON] = False

    def __post_init__(self) -> None:
        if self.require_level is not None and self.require_level not in LEVEL_NAMES:
            raise InputError(
                f"--require-level {self.require_level!r} is not a level",
                "one of " + ", ".join(LEVEL_NAMES),
            )

    def requirement(self) -> Requirement:
        """What the image's attested record must show."""
        level = REQUIRABLE[self.require_level] if self.require_level is not None else None
        return Requirement(level, self.require_probes)
