"""Write rendered images to build-context folders and hash what goes into each build.

The input hash covers the Dockerfile, every file of the context (wheelhouse and
CA bundle included) and the build arguments, so two builds with the same hash
produce the same image; `imagekit build` uses it to skip up-to-date images.
Probe files are not part of any context: they are copied in at verify time.

Each external file (wheel, CA bundle) is hashed once per call: a wheelhouse can
hold gigabytes. A build that already has the hash (with its engine inputs) hands
it to `write_context`, so the plan file and the image's label carry one value.

Golden folders (tests/golden/) keep only what is rendered; the static files that
come verbatim from templates/ are listed by sha256 in a `static.sha256` manifest
instead (see `swap_static_for_manifest` and `compare_tree`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

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
from imagekit.kernel.vocabulary import WHEEL_MACHINES
from imagekit.matrix.plan import ImagePlan

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


@dataclass(frozen=True)
class ContextInputs:
    """Files from outside the render that a build context carries."""

    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    # uv for slim's builder stage; None: the one imagekit is installed with.
    installer: Path | None = None
    # uv for the platforms this machine runs only under emulation: (Docker platform, binary).
    foreign_installers: tuple[tuple[str, Path], ...] = ()


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


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks (wheels are big)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def _file_digests(files: dict[str, Path]) -> dict[str, str]:
    """The sha256 of each external file, by context name: each file read once."""
    return {name: file_sha256(path) for name, path in files.items()}


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
            if plan.flavour != "slim":
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


def input_hash(
    rendered: RenderedImage, inputs: ContextInputs, engine_inputs: dict[str, str] | None = None
) -> str:
    """sha256 over the Dockerfile, context files and build args (`sha256:<hex>`).

    `engine_inputs` names what the engine supplies, such as the id of the base or
    slim image a build starts FROM: a new base means a new build.
    """
    return _hash(rendered, _file_digests(_external_files(inputs)), engine_inputs)


def _safe_child(root: Path, name: str) -> Path:
    """`root/name`, refusing any name that would land outside `root`."""
    target = (root / name).resolve()
    if root.resolve() not in target.parents:
        raise InputError(f"image name {name!r} would write outside {root}")
    return target


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)  # wheels are big: share them when the filesystem allows
    except OSError:
        shutil.copy2(source, target)


def write_context(
    rendered: RenderedImage,
    out_dir: Path,
    inputs: ContextInputs | None = None,
    *,
    input_hash: str | None = None,
) -> Path:
    """Write one image's build context to `out_dir/<image name>/` and return that folder.

    `input_hash` is the hash the build computed (engine inputs included) and labels
    the image with; the plan file records that same value. Without it, the hash is
    computed here, without engine inputs. The folder is replaced whole, so no stale
    file from an earlier render remains.
    """
    files = _external_files(inputs or ContextInputs())
    digest = input_hash if input_hash is not None else _hash(rendered, _file_digests(files), None)
    return _write_context(rendered, out_dir, files, digest)


def _write_context(
    rendered: RenderedImage, out_dir: Path, external: dict[str, Path], digest: str
) -> Path:
    folder = _safe_child(out_dir, rendered.plan.name)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(rendered.dockerfile, encoding="utf-8")
    for name, text in rendered.files.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        # COPY keeps the mode a context file has: scripts must arrive executable.
        path.chmod(0o755 if name.endswith(".sh") else 0o644)
    for name, path in _needed_by(rendered, external).items():
        _link_or_copy(path, folder / name)
    (folder / PLAN_FILE).write_text(_plan_json(rendered, digest), encoding="utf-8")
    return folder


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


def render_tree(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, out_dir: Path
) -> list[Path]:
    """Render and write the build context of every plan; the folders written.

    The external files are hashed once for all plans, not once per plan.
    """
    external = _external_files(inputs)
    digests = _file_digests(external)
    folders = []
    for plan in plans:
        rendered = render_image(plan, options)
        folders.append(_write_context(rendered, out_dir, external, _hash(rendered, digests, None)))
    return folders


def compare_tree(
    plans: list[ImagePlan],
    options: RenderOptions,
    inputs: ContextInputs,
    out_dir: Path,
    *,
    static_manifest: bool | None = None,
) -> list[str]:
    """Differences between a fresh render of `plans` and what `out_dir` holds (none: equal).

    The static files (`STATIC_FILES`, verbatim from templates/) are compared as files
    when `static_manifest` is False, and by sha256 against each folder's
    `static.sha256` when it is True (a golden folder: a missing manifest is a
    difference). None, the default, uses the manifest where a folder has one, so
    `imagekit render --check` works on a rendered out dir and on the goldens alike.
    """
    digests = _file_digests(_external_files(inputs))
    differences = []
    for plan in plans:
        rendered = render_image(plan, options)
        folder = out_dir / plan.name
        manifest = folder / STATIC_MANIFEST
        by_hash = manifest.is_file() if static_manifest is None else static_manifest
        expected = {"Dockerfile": rendered.dockerfile, **rendered.files}
        expected[PLAN_FILE] = _plan_json(rendered, _hash(rendered, digests, None))
        if by_hash:
            static = {n: t for n, t in expected.items() if n in STATIC_FILES}
            expected = {n: t for n, t in expected.items() if n not in STATIC_FILES}
            differences += _compare_manifest(manifest, static)
        for name, text in sorted(expected.items()):
            path = folder / name
            if not path.is_file():
                differences.append(f"{path}: missing")
                continue
            current = path.read_text(encoding="utf-8")
            if current != text:
                diff = difflib.unified_diff(
                    current.splitlines(), text.splitlines(), str(path), "fresh render", lineterm=""
                )
                differences.append("\n".join(diff))
    return differences


def static_manifest_text(files: dict[str, str]) -> str:
    """`<sha256>  <name>` lines (sha256sum's format), sorted by name, for static files."""
    return "".join(f"{_text_sha256(files[name])}  {name}\n" for name in sorted(files))


def read_static_manifest(path: Path) -> dict[str, str]:
    """A `static.sha256` manifest as {name: sha256}."""
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            sha, _, name = line.partition("  ")
            entries[name.strip()] = sha.strip()
    return entries


def _compare_manifest(manifest: Path, static: dict[str, str]) -> list[str]:
    """Differences between a folder's static manifest and the fresh render's static files."""
    if not manifest.is_file():
        return [f"{manifest}: missing"] if static else []
    listed = read_static_manifest(manifest)
    differences = []
    for name in sorted(static.keys() | listed.keys()):
        if name not in listed:
            differences.append(f"{manifest}: {name} is rendered but not listed")
        elif name not in static:
            differences.append(f"{manifest}: {name} is listed but not rendered")
        elif listed[name] != (fresh := _text_sha256(static[name])):
            differences.append(f"{manifest}: {name} is {listed[name]}, fresh render {fresh}")
    return differences


def swap_static_for_manifest(out_dir: Path) -> list[Path]:
    """In each rendered image folder of `out_dir`, replace the static files by a
    `static.sha256` manifest and drop the installer binary (how tests/golden/ is stored;
    `make goldens` calls this after `imagekit render`). The manifests written."""
    written = []
    for folder in sorted(p.parent for p in out_dir.glob(f"*/{PLAN_FILE}")):
        static = {
            p.name: p.read_text(encoding="utf-8")
            for p in sorted(folder.iterdir())
            if p.name in STATIC_FILES and p.is_file()
        }
        manifest = folder / STATIC_MANIFEST
        manifest.write_text(static_manifest_text(static), encoding="utf-8")
        for name in static:
            (folder / name).unlink()
        # The installer binary is an input like a wheel, not rendered text: its digest is in
        # the plan file's input hash.
        (folder / INSTALLER).unlink(missing_ok=True)
        written.append(manifest)
    return written
