"""What the package indexes hold that the matrix and compat.yaml lack, as a proposal. Pure.

`propose` compares the releases the indexes hold (`core.upstream.Release`) with matrix.yaml and
compat.yaml and returns both files as they would be, edited as a person would edit them: new
lines inserted where they belong, every other byte of the file as it was (comments, anchors,
multi-line flow mappings: a YAML round-trip library reflows these, so the edits are textual, at
the positions PyYAML's composer reports). Before it returns, the proposed files are loaded and
validated as `imagekit check` would; any problem is reported and nothing is proposed.

Which releases count: the newest patch release of each minor series, no older than `since`
(default: the oldest release the matrix has), so that a team's matrix is not filled with the
releases it dropped or superseded. Which variants count: those with a wheel for every platform
the entry that would take them builds (`_lacking_platforms`), so that a build for one machine
never stands for another's.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from imagekit.errors import Problem, ValidationError
from imagekit.kernel.vocabulary import WHEEL_MACHINES
from imagekit.matrix.compat import version_key
from imagekit.matrix.schema import MatrixFile
from imagekit.upstream.document import FindingJson, ProposalJson
from imagekit.upstream.metadata import CompatSource, Release, Variant, disagreements, read_compat
from imagekit.upstream.yaml_text import YamlText, end_line, flow_list, value_at

NOTHING_WRITTEN = "nothing was written"


@dataclass(frozen=True)
class Finding:
    """One variant the proposal adds, the facts its wheels state, and which wheels they are."""

    torch: str
    variant: Variant
    files: tuple[str, ...]  # the files it is added to: matrix.yaml, compat.yaml

    def lines(self) -> list[str]:
        """The finding for people: what is added where, the facts, each source wheel."""
        v = self.variant
        what = f"CUDA {v.cuda}" if v.cuda else "cpu"
        pins = ", ".join(f"{n}=={p}" for n, p in v.wheels[0].pins) or "no NVIDIA wheels"
        pythons = ", ".join(sorted({w.python for w in v.wheels}, key=version_key))
        machines = " and ".join(sorted({str(w.machine) for w in v.wheels}))
        first = v.wheels[0]
        build = "; PyPI's default build" if v.default else ""
        return [
            f"torch {self.torch} {what}: add to {' and '.join(self.files)}",
            f"  pins: {pins}",
            f"  Python {pythons} on {machines}, {first.platform} (glibc >= {first.glibc}){build}",
            *(f"  from {w.source}" for w in v.wheels),
        ]

    def document(self) -> FindingJson:
        """The finding as JSON."""
        v = self.variant
        return {
            "torch": self.torch,
            "variant": v.name,
            "files": list(self.files),
            "cudnn": v.cudnn,
            "nccl": v.nccl,
            "pins": dict(v.wheels[0].pins),
            "wheels": [{"filename": w.filename, "sha256": w.sha256} for w in v.wheels],
        }


@dataclass(frozen=True)
class Proposal:
    """matrix.yaml and compat.yaml before and after, and what was found and left out."""

    findings: tuple[Finding, ...]
    left_out: tuple[str, ...]
    files: tuple[tuple[str, str, str], ...]  # (file, text before, text after)

    @property
    def changed(self) -> tuple[tuple[str, str], ...]:
        """(file, new text) of each file the proposal changes."""
        return tuple((f, after) for f, before, after in self.files if after != before)

    def text(self) -> str:
        """The proposal for people (and a pull request's body): findings, then the diffs."""
        if not self.findings:
            return "nothing to propose: the indexes hold no release or variant the matrix lacks"
        lines = [line for f in self.findings for line in f.lines()]
        for file, before, after in self.files:
            lines += difflib.unified_diff(
                before.splitlines(), after.splitlines(), file, f"{file} (proposed)", lineterm=""
            )
        return "\n".join(lines)

    def document(self) -> ProposalJson:
        """The proposal as JSON (`--json`)."""
        return {
            "findings": [f.document() for f in self.findings],
            "left_out": list(self.left_out),
            "changed": [file for file, _ in self.changed],
        }


# matrix.yaml ----------------------------------------------------------------------------------


def _entries(matrix: YamlText) -> list[tuple[str, list[str], MappingNode]]:
    """(torch, variants, node) of each release entry of the matrix."""
    found = []
    for item in getattr(value_at(matrix.root, "releases"), "value", []):
        torch, cuda = value_at(item, "torch"), value_at(item, "cuda")
        names = [n.value for n in getattr(cuda, "value", []) if isinstance(n, ScalarNode)]
        if isinstance(torch, ScalarNode) and isinstance(item, MappingNode):
            found.append((torch.value, names, item))
    return found


def _platforms(entry: MappingNode | None, spec: MatrixFile) -> list[str]:
    """The Docker platforms an entry builds (its own `platforms`, else the defaults'); those of
    a new entry (None) are the defaults'."""
    listed = value_at(entry, "platforms")
    if isinstance(listed, SequenceNode):
        return [str(n.value) for n in listed.value if isinstance(n, ScalarNode)]
    return list(spec.defaults.platforms)


def _lacking_platforms(v: Variant, platforms: list[str]) -> list[str]:
    """The platforms of `platforms` that none of the variant's wheels is for.

    A variant is named for a platform only from wheels of that platform's machine: PyPI's
    aarch64 wheels of torch 2.7.1 to 2.10.0 are CPU builds while its x86_64 ones are CUDA
    builds, and a cpu variant built for linux/amd64 needs an x86_64 CPU wheel."""
    machines = {str(w.machine) for w in v.wheels}
    return [p for p in platforms if WHEEL_MACHINES[p] not in machines]


def _add_entry(matrix: YamlText, torch: str, variants: list[str]) -> None:
    """A new release entry after the last one, indented as the others are."""
    last = _entries(matrix)[-1][2]
    indent = " " * last.start_mark.column
    dash = indent[:-2] + "- "
    matrix.after(
        end_line(last), [f'{dash}torch: "{torch}"', f"{indent}cuda: {flow_list(variants)}"]
    )


def _add_variants(matrix: YamlText, entry: MappingNode, variants: list[str]) -> None:
    """Variants appended to an entry's `cuda` list, in the list's own style."""
    cuda = value_at(entry, "cuda")
    assert isinstance(cuda, SequenceNode)
    if cuda.flow_style:  # ["12.6", "13.0"]: before the closing bracket
        mark = cuda.end_mark
        matrix.at(mark.line, mark.column - 1, "".join(f", {json.dumps(v)}" for v in variants))
    else:
        indent = " " * (cuda.value[-1].start_mark.column - 2)
        matrix.after(end_line(cuda), [f"{indent}- {json.dumps(v)}" for v in variants])


# compat.yaml ----------------------------------------------------------------------------------


def _anchor_or_list(compat: YamlText, node: Node | None) -> str | None:
    """How a row refers to an architecture list: `*name` where it is a named list, else the
    list itself."""
    if not isinstance(node, SequenceNode):
        return None
    start = node.start_mark.index
    if compat.text[start] == "&":
        return "*" + compat.text[start + 1 :].split(None, 1)[0]
    return flow_list([str(n.value) for n in node.value])


def _sibling_archs(compat: YamlText, data: CompatSource, cuda: str, arm64: bool) -> str | None:
    """The architecture list of the newest release's build of the same CUDA (else of the same
    major version): a new variant carries it as inferred until verify reads its own."""
    releases = sorted(data.data.torch, key=version_key, reverse=True)
    torch_node = value_at(compat.root, "torch")
    for exact in (True, False):
        for torch in releases:
            for c in sorted(data.data.torch[torch].variants, key=version_key, reverse=True):
                same = c == cuda if exact else c.split(".")[0] == cuda.split(".")[0]
                row = value_at(value_at(value_at(torch_node, torch), "variants"), c)
                node = (
                    value_at(value_at(row, "arm64"), "archs") if arm64 else value_at(row, "archs")
                )
                if same and (text := _anchor_or_list(compat, node)) is not None:
                    return text
    return None


def _variant_row(compat: YamlText, data: CompatSource, v: Variant) -> tuple[str, Problem | None]:
    cuda = str(v.cuda)
    archs = _sibling_archs(compat, data, cuda, arm64=False)
    arm_archs = _sibling_archs(compat, data, cuda, arm64=True) if v.arm64 else "-"
    if archs is None or arm_archs is None:
        why = f"no release of CUDA {cuda.split('.')[0]} to carry GPU architectures from"
        return "", data.where.problem(("arch_lists",), f"CUDA {cuda}: {why}; add the row by hand")
    arm64 = (
        f", arm64: {{index: pypi, archs: {arm_archs}, inferred: [archs], sources: [pypi-aarch64]}}"
    )
    row = f'"{cuda}": {{cudnn: "{v.cudnn}", nccl: "{v.nccl}", archs: {archs}, inferred: [archs]'
    return row + (arm64 if v.arm64 else "") + "}", None


def _provenance(v: Variant) -> str:
    more = f" (+{len(v.wheels) - 1} more)" if len(v.wheels) > 1 else ""
    return f"# imagekit matrix refresh: from {v.wheels[0].source}{more}"


def _add_compat_variant(
    compat: YamlText, data: CompatSource, r: Release, v: Variant
) -> list[Problem]:
    variants = value_at(value_at(value_at(compat.root, "torch"), r.torch), "variants")
    assert isinstance(variants, MappingNode) and not variants.flow_style
    row, problem = _variant_row(compat, data, v)
    if problem is None:
        indent = " " * variants.value[0][0].start_mark.column
        compat.after(end_line(variants), [indent + _provenance(v), indent + row])
    return [problem] if problem else []


def _add_compat_release(compat: YamlText, data: CompatSource, r: Release) -> list[Problem]:
    """A new release row at the end of `torch:`, its CUDA variants inferred only in their GPU
    architectures; refused where compat's rules cannot hold it."""
    cuda = [v for v in r.variants if v.cuda]
    default = next((v for v in cuda if v.default), None)
    at = ("torch",)
    if not cuda or default is None:
        what = "only CPU wheels" if not cuda else "no unlabelled (PyPI) x86_64 CUDA wheel"
        return [
            data.where.problem(
                at,
                f"torch {r.torch}: the indexes hold {what}, and "
                "compat.yaml lists a release by its CUDA variants and "
                "PyPI's default one; add the index that has them (--index)",
            )
        ]
    unknown = [v.name for v in cuda if v.name not in data.data.cuda]
    if unknown:
        return [
            data.where.problem(
                ("cuda",),
                f"CUDA {', '.join(unknown)} (torch {r.torch}) has "
                "no driver facts; add its row under cuda first",
            )
        ]
    torch_node = value_at(compat.root, "torch")
    assert isinstance(torch_node, MappingNode)
    key = " " * torch_node.value[0][0].start_mark.column
    rows, problems = [], []
    for v in cuda:
        row, problem = _variant_row(compat, data, v)
        rows.append(f"{key}    {row}")
        problems += [problem] if problem else []
    compat.after(
        end_line(torch_node),
        [
            f"{key}{_provenance(default)}",
            f'{key}"{r.torch}":',
            f'{key}  python: {{min: "{r.python_min}", max: "{r.python_max}"}}',
            f"{key}  platform: {r.platform}",
            f'{key}  pypi_default_cuda: "{default.cuda}"',
            f"{key}  sources: [wheel-metadata]",
            f"{key}  variants:",
            *rows,
        ],
    )
    if r.platform not in data.data.platforms:
        platforms = value_at(compat.root, "platforms")
        assert isinstance(platforms, MappingNode)
        indent = " " * platforms.value[0][0].start_mark.column
        compat.after(end_line(platforms), [f'{indent}{r.platform}: {{glibc: "{r.glibc}"}}'])
    return problems


# The proposal ---------------------------------------------------------------------------------


def _considered(releases: tuple[Release, ...], since: str) -> tuple[list[Release], list[str]]:
    """The newest patch release of each minor series from `since` on, and what was left out."""
    newest: dict[tuple[int, ...], Release] = {}
    for r in releases:
        series = version_key(r.torch)[:2]
        if series not in newest or version_key(r.torch) > version_key(newest[series].torch):
            newest[series] = r
    kept = [r for r in newest.values() if version_key(r.torch) >= version_key(since)]
    left = [f"torch {r.torch}: older than {since}" for r in newest.values() if r not in kept]
    left += [
        f"torch {r.torch}: a newer patch release is on the index"
        for r in releases
        if r not in newest.values()
    ]
    return sorted(kept, key=lambda r: version_key(r.torch)), left


def floor_of(matrix_text: str, since: str | None) -> str:
    """The oldest release that counts: `since`, else the oldest release the matrix has."""
    entries = _entries(YamlText("matrix", matrix_text))
    return since or min((t for t, _, _ in entries), key=version_key, default="0")


def propose(
    releases: tuple[Release, ...],
    matrix_file: str,
    matrix_text: str,
    compat: CompatSource,
    since: str | None = None,
) -> Proposal:
    """The proposal that brings matrix.yaml and compat.yaml up to what the indexes hold.
    Raises `ValidationError` (file:line:col, nothing written) where a wheel contradicts
    compat.yaml, where compat's rules cannot hold a release, or where the proposed files
    would not validate."""
    spec = _validate(
        ((matrix_file, matrix_text, matrix_text), (compat.file, compat.text, compat.text))
    )
    matrix, compat_text = YamlText(matrix_file, matrix_text), YamlText(compat.file, compat.text)
    entries = _entries(matrix)
    floor = since or min((t for t, _, _ in entries), key=version_key, default="0")
    kept, left_out = _considered(releases, floor)
    problems, findings = [], []
    for r in kept:
        known = compat.data.torch.get(r.torch)
        for v in r.variants:
            if v.cuda is None or (known and v.cuda in known.variants):
                problems += [p for w in v.wheels for p in disagreements(w, compat)]
        have = {c for t, cuda, _ in entries if t == r.torch for c in cuda}
        own = [e for t, _, e in entries if t == r.torch]
        missing, unbuilt = _buildable(r, have, _platforms(own[0] if own else None, spec))
        left_out += unbuilt
        if not missing:
            continue
        if known is None:
            problems += _add_compat_release(compat_text, compat, r)
        new = [v for v in missing if known and v.cuda and v.cuda not in known.variants]
        for v in new:
            problems += _add_compat_variant(compat_text, compat, r, v)
        to_compat = {v.name for v in (missing if known is None else new) if v.cuda}
        for v in missing:
            files = (matrix_file, compat.file) if v.name in to_compat else (matrix_file,)
            findings.append(Finding(r.torch, v, files))
        if own:
            _add_variants(matrix, own[0], [v.name for v in missing])
        else:
            _add_entry(matrix, r.torch, [v.name for v in missing])
    if problems:
        raise ValidationError(problems, NOTHING_WRITTEN)
    proposed = (
        (matrix_file, matrix_text, matrix.result()),
        (compat.file, compat.text, compat_text.result()),
    )
    _validate(proposed)
    return Proposal(tuple(findings), tuple(left_out), proposed)


def _buildable(r: Release, have: set[str], platforms: list[str]) -> tuple[list[Variant], list[str]]:
    """The variants of `r` the matrix lacks and may take for `platforms`, and why each other
    variant it lacks is left out (no wheel for a platform it would be built for)."""
    missing, unbuilt = [], []
    for v in r.variants:
        if v.name in have:
            continue
        if lacking := _lacking_platforms(v, platforms):
            on = " and ".join(sorted({str(w.machine) for w in v.wheels}))
            unbuilt.append(
                f"torch {r.torch} {v.name}: the indexes hold its wheels for {on} only, none "
                f"for {' or '.join(lacking)}; add the index that has them (--index)"
            )
        else:
            missing.append(v)
    return missing, unbuilt


def _validate(files: tuple[tuple[str, str, str], ...]) -> MatrixFile:
    """The proposed files load and validate as `imagekit check` would load them; returns the
    matrix's settings as validated."""
    from imagekit.matrix.load import parse_matrix

    (matrix_file, before, matrix_after), (compat_file, _, compat_after) = files
    said = "" if matrix_after == before else " (as proposed)"
    try:
        compat = read_compat(compat_after, f"{compat_file}{said}")
        return parse_matrix(matrix_after, f"{matrix_file}{said}", compat.data).spec
    except ValidationError as exc:
        raise ValidationError(exc.problems, NOTHING_WRITTEN) from None
