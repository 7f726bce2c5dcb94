"""Step 2 of loading a matrix: the file-wide settings against the compatibility data.

Each check reports into one `Findings`, which every later step shares: a problem makes the
matrix invalid, a warning travels with a valid one. The release entries are checked in step 3
(`imagekit.matrix.entries`).
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement

from imagekit.errors import Problem
from imagekit.matrix.compat import CompatData
from imagekit.matrix.plan import FLAVOURS, IMAGE_REF_RE, repository_problem
from imagekit.matrix.schema import MatrixFile
from imagekit.matrix.shape_problems import FIELD_FIXES, FIELD_HINTS
from imagekit.matrix.yamlsrc import Path, SourceMap

# A distribution name as PEP 508 spells it.
_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# What pip's requirements-file reader treats as a file to install, not as a name.
_ARCHIVE_SUFFIXES = (
    ".whl",
    ".zip",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tar.lz",
    ".tlz",
)
_PACKAGE_HINT = (
    "write NAME==VERSION; pass indexes with --pip-index-url/--extra-index-url, "
    "wheels with --wheelhouse"
)


class Findings:
    """The located problems and warnings the steps find, in the order they find them.

    Any problem makes the matrix invalid; warnings travel with a valid one.
    """

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def fail(self, path: Path, message: str, hint: str = "", *, key: bool = False) -> None:
        self.problems.append(self.source.problem(path, message, hint, key=key))

    def warn(self, path: Path, message: str, hint: str = "") -> None:
        self.warnings.append(self.source.problem(path, message, hint))


def check_settings(spec: MatrixFile, compat: CompatData, report: Findings) -> None:
    """Report what is wrong with the file-wide settings: `repository`, `bases`,
    `defaults.os`, the flavours' `packages` and `leave_out`, in that order.

    An unpinned base is a warning, not a problem. Releases are checked in step 3.
    """
    if problem := repository_problem(spec.repository):
        report.fail(("repository",), problem, "e.g. ghcr.io/acme/pytorch")
    _check_bases(spec, compat, report)
    if spec.defaults.os not in spec.bases:
        report.fail(("defaults", "os"), unknown_os(spec.defaults.os), bases_hint(spec))
    _check_packages(spec, report)
    _check_leave_out(spec, report)
    _check_compile(spec, report)


def _check_bases(spec: MatrixFile, compat: CompatData, report: Findings) -> None:
    """Each base: an OS the compatibility data knows, and a valid, ideally pinned, image."""
    for os_name, images in spec.bases.items():
        path: Path = ("bases", os_name)
        if os_name not in compat.os:
            report.fail(
                path,
                f"unknown base OS {os_name!r}",
                f"known: {', '.join(sorted(compat.os))}",
                key=True,
            )
        per_platform = images.items() if isinstance(images, dict) else [(None, images)]
        for platform, image in per_platform:
            at = path if platform is None else (*path, platform)
            match = IMAGE_REF_RE.match(image)
            if not match:
                report.fail(at, f"{image!r} is not a valid image reference", "e.g. ubuntu:24.04")
            elif not match.group("digest"):
                report.warn(
                    at,
                    f"base {image!r} is not pinned by digest",
                    "append @sha256:... so rebuilds use the same base",
                )


def package_problem(text: str) -> str | None:
    """Why `text` is not a requirement specifier pip may read from a requirements file
    (None: it is one).

    A requirements file obeys options (`--index-url`, `-f`, `-r`, `-e`, ...) and installs
    URLs, paths and direct references (`name @ URL`) as they are: any of those would
    bypass `--wheelhouse` and `--pip-index-url`. Only a PEP 508 name with extras,
    version specifiers and markers is accepted.
    """
    if text.lstrip().startswith("-"):
        return "is a pip option, not a requirement: pip would obey it"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        if "://" in text or text.lstrip().startswith(("/", ".", "~", "\\")):
            return "is a URL or a path, not a requirement: pip would install it as it is"
        reason = str(exc).splitlines()[0] if str(exc) else "invalid"
        return f"is not a requirement (PEP 508): {reason}"
    if requirement.url is not None:
        return "is a direct reference (NAME @ URL): pip would install it from that URL"
    if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
        return "looks like a file name: pip would install it as a path"
    return None


def _check_packages(spec: MatrixFile, report: Findings) -> None:
    """Each flavour's `packages` entry is a requirement specifier, nothing pip would obey
    or fetch as it is (see `package_problem`)."""
    for flavour in FLAVOURS:
        for i, text in enumerate(getattr(spec.flavours, flavour).packages):
            if (why := package_problem(text)) is not None:
                report.fail(
                    ("flavours", flavour, "packages", i), f"package {text!r} {why}", _PACKAGE_HINT
                )


def _check_leave_out(spec: MatrixFile, report: Findings) -> None:
    """`leave_out` belongs to slim only, names distributions, and may not name torch."""
    flavours = spec.flavours
    if flavours.full.leave_out:
        report.fail(
            ("flavours", "full", "leave_out"),
            "leave_out applies to the slim flavour only",
            "move it under flavours.slim; full installs what slim leaves out",
        )
    for i, name in enumerate(flavours.slim.leave_out):
        if not _DIST_NAME.match(name):
            # The schema's pattern lets a trailing '.', '_' or '-' through.
            report.fail(
                ("flavours", "slim", "leave_out", i),
                f"leave_out: {name!r} is not {FIELD_HINTS['leave_out']}",
                FIELD_FIXES["leave_out"],
            )
        elif name.lower().replace("_", "-") == "torch":
            report.fail(
                ("flavours", "slim", "leave_out", i),
                "torch cannot be left out of a PyTorch image",
                "leave out only what torch can run without (e.g. triton)",
            )


def _check_compile(spec: MatrixFile, report: Findings) -> None:
    """`compile: false` belongs to slim (full carries compilers), a slim that promises
    torch.compile keeps triton, which inductor needs on the GPU, and one that does not
    cannot require the compile probe and still be published."""
    flavours = spec.flavours
    if not flavours.full.compile:
        report.fail(
            ("flavours", "full", "compile"),
            "compile: false applies to the slim flavour only: full carries the compilers",
            "remove it from flavours.full",
        )
    if not flavours.slim.compile and "compile" in flavours.slim.required_probes:
        # A warning: such a matrix builds and verifies, but publish refuses every slim.
        report.warn(
            ("flavours", "slim", "required_probes"),
            "slim requires the compile probe, which a compile: false slim skips: publish "
            "will refuse every slim",
            "drop compile from flavours.slim.required_probes, or remove compile: false",
        )
    left_out = {name.lower().replace("_", "-") for name in flavours.slim.leave_out}
    if flavours.slim.compile and "triton" in left_out:
        report.fail(
            ("flavours", "slim", "leave_out"),
            "slim promises torch.compile (compile defaults to true) but leaves triton out: "
            "inductor needs triton on the GPU",
            "keep triton in slim, or set compile: false under flavours.slim",
        )


def unknown_os(name: str) -> str:
    return f"base OS {name!r} has no entry under `bases`"


def bases_hint(spec: MatrixFile) -> str:
    return f"bases lists {', '.join(spec.bases) or 'nothing'}"
