"""Write rendered images to build-context folders and hash what goes into each build.

The input hash covers the Dockerfile, every file of the context (wheelhouse and
CA bundle included) and the build arguments, so two builds with the same hash
produce the same image; `imagekit build` uses it to skip up-to-date images.
Probe files are not part of any context: they are copied in at verify time.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InputError
from imagekit.plan import ImagePlan
from imagekit.render import RenderedImage, RenderOptions, render_image

PLAN_FILE = "imagekit-plan.json"
CA_FILE = "ca-bundle.crt"
WHEELHOUSE = "wheelhouse"


@dataclass(frozen=True)
class ContextInputs:
    """Files from outside the render that a build context carries."""

    wheelhouse: Path | None = None
    ca_bundle: Path | None = None


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks (wheels are big)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _external_files(inputs: ContextInputs) -> dict[str, Path]:
    files: dict[str, Path] = {}
    if inputs.ca_bundle is not None:
        files[CA_FILE] = inputs.ca_bundle
    if inputs.wheelhouse is not None:
        for path in sorted(inputs.wheelhouse.rglob("*")):
            # Dotfiles are bookkeeping (e.g. make's `.complete` stamp), not wheels.
            if path.is_file() and not path.name.startswith("."):
                files[f"{WHEELHOUSE}/{path.relative_to(inputs.wheelhouse).as_posix()}"] = path
    return files


def input_hash(
    rendered: RenderedImage, inputs: ContextInputs, engine_inputs: dict[str, str] | None = None
) -> str:
    """sha256 over the Dockerfile, context files and build args (`sha256:<hex>`).

    `engine_inputs` names what the engine supplies, such as the id of the base or
    slim image a build starts FROM: a new base means a new build.
    """
    entries = {"Dockerfile": hashlib.sha256(rendered.dockerfile.encode()).hexdigest()}
    for name, text in rendered.files.items():
        entries[name] = hashlib.sha256(text.encode()).hexdigest()
    for name, path in _external_files(inputs).items():
        entries[name] = file_sha256(path)
    document = {
        "files": dict(sorted(entries.items())),
        "build_args": rendered.build_args,
        "engine_inputs": engine_inputs or {},
    }
    blob = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


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
    rendered: RenderedImage, out_dir: Path, inputs: ContextInputs | None = None
) -> Path:
    """Write one image's build context to `out_dir/<image name>/` and return that folder.

    The folder is replaced whole, so no stale file from an earlier render remains.
    """
    inputs = inputs or ContextInputs()
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
    for name, path in _external_files(inputs).items():
        _link_or_copy(path, folder / name)
    (folder / PLAN_FILE).write_text(_plan_json(rendered, inputs), encoding="utf-8")
    return folder


def _plan_json(rendered: RenderedImage, inputs: ContextInputs) -> str:
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
        "input_hash": input_hash(rendered, inputs),
        "size_budget_bytes": plan.size_budget_bytes,
        "required_probes": list(plan.required_probes),
    }
    return json.dumps(meta, indent=2, sort_keys=True) + "\n"


CA_ENV_VARS = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


def resolve_ca_bundle(explicit: Path | None, environ: dict[str, str] | None = None) -> Path | None:
    """The CA bundle to give pip in builder stages: `explicit`, else the first of
    $PIP_CERT, $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE that is set; None when none is."""
    env = os.environ if environ is None else environ
    if explicit is not None:
        if not explicit.is_file():
            raise InputError(f"--ca-cert {explicit} is not a file")
        return explicit
    for name in CA_ENV_VARS:
        value = env.get(name)
        if value:
            path = Path(value)
            if not path.is_file():
                raise InputError(
                    f"${name} names {value}, which is not a file",
                    "unset it, or pass --ca-cert FILE / --no-ca-cert",
                )
            return path
    return None


def render_tree(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, out_dir: Path
) -> list[Path]:
    """Render and write the build context of every plan; the folders written."""
    return [write_context(render_image(plan, options), out_dir, inputs) for plan in plans]


def compare_tree(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, out_dir: Path
) -> list[str]:
    """Differences between a fresh render of `plans` and what `out_dir` holds (none: equal)."""
    differences = []
    for plan in plans:
        rendered = render_image(plan, options)
        expected = {"Dockerfile": rendered.dockerfile, **rendered.files}
        expected[PLAN_FILE] = _plan_json(rendered, inputs)
        folder = out_dir / plan.name
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
