"""What a rendered image's build context holds, and the hash of what goes into each build.

The input hash covers the Dockerfile, every file of the context (wheelhouse and
CA bundle included) and the build arguments, so two builds with the same hash
produce the same image; `imagekit build` uses it to skip up-to-date images.
Probe files are not part of any context: they are copied in at verify time.

Each external file (wheel, CA bundle) is hashed once per call: a wheelhouse can
hold gigabytes. A build that already has the hash (with its engine inputs) hands
it to `context_files`, so the plan file and the image's label carry one value.

Nothing here writes: a context is a set of `ContextFile`s, which the run store writes into
`results/<run-id>/contexts/` (`RunStore.write_context`) and `adapters/contexts.py` into a
folder of the user's (`render --out`, `bake --contexts`). Golden folders (tests/golden/) keep
only what is rendered; the static files that come verbatim from templates/ are listed by
sha256 in a `static.sha256` manifest instead (`static_manifest_text`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from imagekit.build.inputs import RenderInputs
from imagekit.build.render import (
    FULL_FILES,
    LAYER_SCRIPT,
    PRUNE_SCRIPT,
    SITE_FILES,
    RenderedImage,
    RenderOptions,
    render_image,
)
from imagekit.errors import InputError
from imagekit.kernel.store import ContextFile
from imagekit.kernel.vocabulary import WHEEL_MACHINES
from imagekit.matrix.plan import ImagePlan
from imagekit.matrix.selection import pairs

PLAN_FILE = "imagekit-plan.json"
CA_FILE = "ca-bundle.crt"
WHEELHOUSE = "wheelhouse"
# The installer slim's builder stage runs: uv, the binary of the `uv` package imagekit depends
# on (pinned, so its digest in the input hash only changes with imagekit's own pin).
INSTALLER = "uv"
# Context files copied verbatim from templates/: a golden folder lists them by hash.
STATIC_FILES = frozenset((*FULL_FILES, PRUNE_SCRIPT, LAYER_SCRIPT, *SITE_FILES))
STATIC_MANIFEST = "static.sha256"
V = TypeVar("V")


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks (wheels are big)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class ContextInputs:
    """Files from outside the render that a build context carries."""

    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    # uv for slim's builder stage; None: the one imagekit is installed with.
    installer: Path | None = None
    # uv for the platforms this machine runs only under emulation: (Docker platform, binary).
    foreign_installers: tuple[tuple[str, Path], ...] = ()
    # How a file's sha256 is had: None reads it (file_sha256); the adapters give one that
    # remembers it (adapters/digests.py).
    digest: Callable[[Path], str] | None = field(default=None, compare=False, repr=False)


def wheel_runs_on(filename: str, machine: str) -> bool:
    """Whether a wheel (by its file name) installs on Linux `machine` (x86_64, aarch64): a pure
    wheel (`any`) or one with a Linux platform tag for that machine. A name that is not a
    wheel's (fewer than five parts) is left for pip to judge."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) < 5:
        return True
    return any(
        tag == "any" or (tag.endswith(f"_{machine}") and "linux" in tag)
        for tag in parts[-1].split(".")
    )


def bundled_uv() -> Path:
    """The uv binary of the `uv` package imagekit is installed with."""
    import uv

    return Path(uv.find_uv_bin())


def _external_files(inputs: ContextInputs) -> dict[str, Path]:
    files: dict[str, Path] = {INSTALLER: inputs.installer or bundled_uv()}
    for platform, binary in inputs.foreign_installers:
        files[f"{INSTALLER}@{platform}"] = binary
    if inputs.ca_bundle is not None:
        files[CA_FILE] = inputs.ca_bundle
    if inputs.wheelhouse is not None:
        for path in sorted(inputs.wheelhouse.rglob("*")):
            # Dotfiles are bookkeeping (e.g. make's `.complete` stamp), not wheels.
            if path.is_file() and not path.name.startswith("."):
                files[f"{WHEELHOUSE}/{path.relative_to(inputs.wheelhouse).as_posix()}"] = path
    return files


def _file_digests(files: dict[str, Path], digest: Callable[[Path], str] | None) -> dict[str, str]:
    """The sha256 of each external file, by context name: each file read once."""
    return {name: (digest or file_sha256)(path) for name, path in files.items()}


def _needed_by(rendered: RenderedImage, external: dict[str, V]) -> dict[str, V]:
    """The external files one image's context carries: uv only where slim's builder runs it
    (the one for the image's platform), and only the wheels that install on its platform."""
    plan = rendered.plan
    machine = WHEEL_MACHINES[plan.platform]
    needed: dict[str, V] = {}
    for name, value in external.items():
        if name.startswith(f"{INSTALLER}@"):
            continue  # stands in for INSTALLER below, on its platform
        if name == INSTALLER:
            if plan.flavour.workstation:
                continue
            value = external.get(f"{INSTALLER}@{plan.platform}", value)
        elif (
            name.startswith(f"{WHEELHOUSE}/")
            and name.endswith(".whl")
            and not (wheel_runs_on(name, machine))
        ):
            continue
        needed[name] = value
    return needed


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _hash(
    rendered: RenderedImage, file_digests: dict[str, str], engine_inputs: dict[str, str] | None
) -> str:
    entries = {"Dockerfile": _text_sha256(rendered.dockerfile)}
    for name, text in rendered.files.items():
        entries[name] = _text_sha256(text)
    entries |= _needed_by(rendered, file_digests)
    document = {
        "files": dict(sorted(entries.items())),
        "build_args": rendered.build_args,
        "engine_inputs": engine_inputs or {},
    }
    blob = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def external_digests(inputs: ContextInputs) -> dict[str, str]:
    """The sha256 of every external file `inputs` name, by context name, each read once."""
    return _file_digests(_external_files(inputs), inputs.digest)


def input_hash(
    rendered: RenderedImage,
    inputs: ContextInputs,
    engine_inputs: dict[str, str] | None = None,
    digests: dict[str, str] | None = None,
) -> str:
    """sha256 over the Dockerfile, context files and build args (`sha256:<hex>`).

    `engine_inputs` names what the engine supplies, such as the id of the base or
    slim image a build starts FROM: a new base means a new build. `digests`: the
    `external_digests` of `inputs` where the caller has them already.
    """
    return _hash(rendered, digests or external_digests(inputs), engine_inputs)


def materials(rendered: RenderedImage, digests: dict[str, str]) -> dict[str, str]:
    """The sha256 of each external file one image's context carries (its wheels, the
    installer, the CA bundle), by its name in the context, of all the `external_digests`:
    the build's resolved dependencies."""
    return _needed_by(rendered, digests)


def context_files(
    rendered: RenderedImage, inputs: ContextInputs | None = None, *, input_hash: str | None = None
) -> dict[str, ContextFile]:
    """One image's build context, its files by their path in it.

    `input_hash` is the hash the build computed (engine inputs included) and labels
    the image with; the plan file records that same value. Without it, the hash is
    computed here, without engine inputs.
    """
    inputs = inputs or ContextInputs()
    files = _external_files(inputs)
    digest = (
        input_hash
        if input_hash is not None
        else _hash(rendered, _file_digests(files, inputs.digest), None)
    )
    return _context_files(rendered, files, digest)


def _context_files(
    rendered: RenderedImage, external: dict[str, Path], digest: str
) -> dict[str, ContextFile]:
    files = {"Dockerfile": ContextFile(rendered.dockerfile)}
    for name, text in rendered.files.items():
        # COPY keeps the mode a context file has: scripts must arrive executable.
        files[name] = ContextFile(text, mode=0o755 if name.endswith(".sh") else 0o644)
    for name, path in _needed_by(rendered, external).items():
        files[name] = ContextFile(source=path)
    files[PLAN_FILE] = ContextFile(_plan_json(rendered, digest))
    return files


def rendered_contexts(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs
) -> list[tuple[RenderedImage, dict[str, ContextFile]]]:
    """Each plan rendered, with its build context; the external files are hashed once for all
    plans, not once per plan."""
    external = _external_files(inputs)
    digests = _file_digests(external, inputs.digest)
    contexts = []
    for plan in plans:
        rendered = render_image(plan, options)
        digest = _hash(rendered, digests, None)
        contexts.append((rendered, _context_files(rendered, external, digest)))
    return contexts


def _plan_json(rendered: RenderedImage, digest: str) -> str:
    """The plan file of a context: what to build, its tags, its input hash."""
    plan = rendered.plan
    meta = {
        "image": plan.reference,
        "name": plan.name,
        "cell": plan.cell.id,
        "flavour": plan.flavour,
        "tag": plan.tag,
        "aliases": list(plan.aliases),
        "build_args": rendered.build_args,
        "input_hash": digest,
        "size_budget_bytes": plan.size_budget_bytes,
        "required_probes": list(plan.required_probes),
    }
    return json.dumps(meta, indent=2, sort_keys=True) + "\n"


CA_ENV_VARS = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_CA_HINT = (
    "give the proxy's CA certificate(s) in PEM form (a DER file converts with "
    "`openssl x509 -inform DER -in CERT -out ca.pem`)"
)


def _has_pem_certificate(path: Path) -> bool:
    """Whether the file holds a `-----BEGIN CERTIFICATE-----` line; read in blocks and
    only as far as the first one, so a wrong multi-GB file costs one pass at most."""
    keep = len(PEM_CERTIFICATE) - 1
    tail = b""
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            if PEM_CERTIFICATE in tail + block:
                return True
            tail = block[-keep:]
    return False


def _ca_problem(path: Path) -> str | None:
    """Why `path` cannot be a CA bundle for pip (None: it can)."""
    if not path.is_file():
        return "is not a file"
    try:
        if not _has_pem_certificate(path):
            return f"is not a PEM CA bundle (no {PEM_CERTIFICATE.decode()} block)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def resolve_ca_bundle(
    explicit: Path | None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The CA bundle to give pip in builder stages: `explicit`, else the first of
    $PIP_CERT, $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE that is set; None when none is.

    The file must be a PEM bundle (at least one `-----BEGIN CERTIFICATE-----` block):
    anything else is refused here, naming the option or variable, rather than handed to
    pip inside a build."""
    env = os.environ if environ is None else environ
    if explicit is not None:
        if (why := _ca_problem(explicit)) is not None:
            raise InputError(f"--ca-cert {explicit} {why}", f"{_CA_HINT}, or pass --no-ca-cert")
        return explicit
    for name in CA_ENV_VARS:
        value = env.get(name)
        if value:
            path = Path(value)
            if (why := _ca_problem(path)) is not None:
                raise InputError(
                    f"${name} names {value}, which {why}",
                    f"unset {name} or point it at a PEM bundle, or pass --ca-cert FILE / "
                    "--no-ca-cert",
                )
            return path
    return None


def check_wheelhouse(folder: Path, option: str = "--wheelhouse") -> None:
    """Refuse a wheelhouse pip could install nothing from: not a folder, or no `*.whl`
    in it (pip's --find-links reads the folder itself, not its subfolders).

    Dotfiles such as make's `.complete` stamp are bookkeeping and allowed beside the wheels.
    """
    if not folder.is_dir():
        raise InputError(
            f"{option} {folder} is not a folder", "pass the folder that holds the wheels"
        )
    fill = (
        f"fill it with `pip download --only-binary=:all: -d {folder} PACKAGE==VERSION ...` "
        "(`make wheelhouse` fills the CPU demo's)"
    )

    def wheels(found: Iterator[Path]) -> Iterator[Path]:
        # A dotfile is left out of the build context (see `_external_files`).
        return (p for p in found if p.is_file() and not p.name.startswith("."))

    try:
        if next(wheels(folder.glob("*.whl")), None) is not None:
            return
        nested = next(wheels(folder.rglob("*.whl")), None)
    except OSError as exc:
        raise InputError(
            f"{option} {folder} cannot be read ({exc.strerror or exc})",
            "pass a folder you may read",
        ) from None
    if nested is not None:
        raise InputError(
            f"{option} {folder} has no wheels (*.whl) of its own; "
            f"{nested.relative_to(folder)} is in a subfolder",
            f"pip reads the folder itself, not its subfolders: move the wheels up, or {fill}",
        )
    raise InputError(f"{option} {folder} has no wheels (*.whl)", fill)


def static_manifest_text(files: dict[str, str]) -> str:
    """`<sha256>  <name>` lines (sha256sum's format), sorted by name, for static files."""
    return "".join(f"{_text_sha256(files[name])}  {name}\n" for name in sorted(files))


def uv_platforms(plans: Iterable[ImagePlan]) -> set[str]:
    """The platforms whose builder stage runs uv: those of the slim images (full installs its
    packages with its slim's own pip)."""
    return {p.platform for p in plans if not p.flavour.workstation}


def resolve_inputs(
    given: RenderInputs,
    *,
    buildkit: bool,
    environ: Mapping[str, str] | None = None,
    foreign: tuple[tuple[str, Path], ...] = (),
    digest: Callable[[Path], str] | None = None,
) -> tuple[RenderOptions, ContextInputs]:
    """Check the inputs given and turn them into render options and context files; `foreign`:
    the uv binary for each platform this machine emulates (the caller finds them); `digest`:
    how the files' sha256 is had (the caller may remember them)."""
    ca = None if given.no_ca_cert else resolve_ca_bundle(given.ca_cert, environ)
    if given.wheelhouse is not None:
        # An empty one would only fail at build time, as an obscure `COPY failed`.
        check_wheelhouse(given.wheelhouse)
    example, shape = "ubuntu:24.04=imagekit-base/ubuntu:noble", "IMAGE=LOCAL_IMAGE"
    overrides = pairs("--base-override", given.base_overrides, example, shape, whole=True)
    options = RenderOptions(
        wheelhouse=given.wheelhouse is not None,
        ca_bundle=ca is not None,
        pip_index_url=given.pip_index_url,
        extra_index_urls=given.extra_index_urls,
        buildkit=buildkit,
        created=given.created,
        revision=given.revision,
        base_overrides=overrides,
    )
    return options, ContextInputs(
        wheelhouse=given.wheelhouse, ca_bundle=ca, foreign_installers=foreign, digest=digest
    )
