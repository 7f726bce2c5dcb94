"""Findings from a vulnerability scanner's JSON report about an image: Trivy's or Grype's.

`scanner_findings` tells the two apart by their top-level keys, so a team hands over whichever
report its pipeline already makes:
- Trivy (`trivy image --format json`): `Results[]`, one per target, each with its `Class`
  (`os-pkgs`, `lang-pkgs`), `Type` (`debian`, `python-pkg`) and `Vulnerabilities` (null where
  the target has none); Trivy leaves `Results` out of a report that found no targets at all;
- Grype (`grype -o json`): `matches[]`, each a `vulnerability` (its `fix.state` and
  `fix.versions`) found in an `artifact` (`name`, `version`, `type`).

Only what a `Finding`'s ecosystems name is read: OS packages (Trivy's `os-pkgs`; Grype's `deb`,
`rpm`, `apk`) and Python distributions (Trivy's Python `lang-pkgs` types; Grype's `python`).
The rest (an npm package in JupyterLab's assets, a Go binary, Trivy's secrets) is skipped: it
would be mislabelled as either. The same finding reported twice (one package in two targets,
or by two of Grype's matchers) is one, with the worst severity either grades it with and a fixed
version if either gives one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from imagekit.audit.findings import RANK, Finding, parse_severity
from imagekit.audit.jsondoc import OUTCOME, WrongShape, decoded, kind_of
from imagekit.errors import InputError, Problem, ValidationError
from imagekit.kernel.json import JsonObject, JsonValue
from imagekit.kernel.vocabulary import Ecosystem, FindingOrigin, Severity

HINT = "give the JSON report of `trivy image --format json` or of `grype -o json`"
# Trivy's `Type`s of Python packages: installed distributions, and the lock files it reads.
TRIVY_PYTHON = frozenset({"python-pkg", "pip", "pipenv", "poetry", "uv"})
GRYPE_TYPES = {
    "deb": Ecosystem.OS,
    "rpm": Ecosystem.OS,
    "apk": Ecosystem.OS,
    "python": Ecosystem.PYTHON,
}


def _object(obj: JsonObject, key: str, path: str) -> JsonObject:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise WrongShape(f"{path}.{key} is {'missing' if key not in obj else kind_of(value)}")
    return value


def _list(obj: JsonObject, key: str, path: str) -> list[JsonValue]:
    value = obj.get(key)
    if value is None:  # Trivy writes `"Vulnerabilities": null` for a clean target
        return []
    if not isinstance(value, list):
        raise WrongShape(f"{path}.{key} is {kind_of(value)}, not a list")
    return value


def _item(value: JsonValue, path: str) -> JsonObject:
    if not isinstance(value, dict):
        raise WrongShape(f"{path} is {kind_of(value)}, not an object")
    return value


def _text(obj: JsonObject, key: str, path: str, *, required: bool = False) -> str:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise WrongShape(f"{path}.{key} is {kind_of(value)}, not a string")
    if required and not value:
        raise WrongShape(f"{path}.{key} is missing or empty")
    return (value or "").strip()


def _trivy_ecosystem(result: JsonObject, path: str) -> Ecosystem | None:
    kind, type_ = _text(result, "Class", path), _text(result, "Type", path)
    if kind == "os-pkgs":
        return Ecosystem.OS
    if kind == "lang-pkgs" and type_ in TRIVY_PYTHON:
        return Ecosystem.PYTHON
    return None


def _trivy(report: JsonObject) -> list[Finding]:
    found = []
    for i, value in enumerate(_list(report, "Results", "$")):
        path = f"$.Results[{i}]"
        result = _item(value, path)
        ecosystem = _trivy_ecosystem(result, path)
        if ecosystem is None:
            continue
        for j, entry in enumerate(_list(result, "Vulnerabilities", path)):
            where = f"{path}.Vulnerabilities[{j}]"
            vuln = _item(entry, where)
            package = _text(vuln, "PkgName", where, required=True)
            # An OS package's source package is what advisories name; dpkg's own rule when
            # Trivy gives none: the package is its own source.
            source = _text(vuln, "SrcName", where) or package
            found.append(
                Finding(
                    _text(vuln, "VulnerabilityID", where, required=True),
                    package,
                    _text(vuln, "InstalledVersion", where, required=True),
                    _text(vuln, "FixedVersion", where),  # "1.26.18, 2.0.7": one per branch
                    parse_severity(_text(vuln, "Severity", where)),
                    FindingOrigin.TRIVY,
                    ecosystem,
                    source if ecosystem is Ecosystem.OS else "",
                )
            )
    return found


def _grype_source(artifact: JsonObject, path: str) -> str:
    # Grype names the source package in `upstreams` only where it differs from the binary's.
    for i, value in enumerate(_list(artifact, "upstreams", path)):
        name = _text(_item(value, f"{path}.upstreams[{i}]"), "name", f"{path}.upstreams[{i}]")
        if name:
            return name
    return _text(artifact, "name", path)


def _grype(report: JsonObject) -> list[Finding]:
    found = []
    for i, value in enumerate(_list(report, "matches", "$")):
        path = f"$.matches[{i}]"
        match = _item(value, path)
        artifact = _object(match, "artifact", path)
        ecosystem = GRYPE_TYPES.get(_text(artifact, "type", f"{path}.artifact"))
        if ecosystem is None:
            continue
        vuln = _object(match, "vulnerability", path)
        fix = _object(vuln, "fix", f"{path}.vulnerability") if "fix" in vuln else {}
        where = f"{path}.vulnerability.fix"
        versions = [v for v in _list(fix, "versions", where) if isinstance(v, str) and v]
        fixed = versions[0] if versions and _text(fix, "state", where) == "fixed" else ""
        found.append(
            Finding(
                _text(vuln, "id", f"{path}.vulnerability", required=True),
                _text(artifact, "name", f"{path}.artifact", required=True),
                _text(artifact, "version", f"{path}.artifact", required=True),
                fixed,
                parse_severity(_text(vuln, "severity", f"{path}.vulnerability")),
                FindingOrigin.GRYPE,
                ecosystem,
                _grype_source(artifact, f"{path}.artifact") if ecosystem is Ecosystem.OS else "",
            )
        )
    return found


def _grade(severity: Severity) -> tuple[bool, int]:
    # Where one report of a finding grades it and another does not, the grade counts.
    return severity is not Severity.UNKNOWN, RANK[severity]


def _collapse(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """One finding per (id, package, installed): the worst grade, a fix if any gives one."""
    kept: dict[tuple[str, str, str], Finding] = {}
    for finding in findings:
        key = (finding.id, finding.package, finding.installed)
        first = kept.setdefault(key, finding)
        if first is not finding:
            severity = max(first.severity, finding.severity, key=_grade)
            kept[key] = replace(first, fixed=first.fixed or finding.fixed, severity=severity)
    return tuple(sorted(kept.values(), key=lambda f: (f.package, f.id, f.installed)))


def _load(path: Path) -> JsonValue:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the report: {exc.strerror}", HINT) from None
    doc = decoded(data, str(path), HINT)
    if isinstance(doc, Problem):
        raise ValidationError([doc], OUTCOME)
    return doc


def scanner_findings(path: Path) -> tuple[FindingOrigin, tuple[Finding, ...]]:
    """Which scanner wrote the report at `path`, and its findings sorted by (package, id).

    A report that is not JSON is bad input at its `file:line:col`; one of neither scanner's
    shape says which two are read; one whose values are not what its scanner writes names the
    JSON path of the first that is not (all ValidationError or InputError, exit 2)."""
    doc = _load(path)
    report = doc if isinstance(doc, dict) else {}
    if "matches" in report:
        origin, read = FindingOrigin.GRYPE, _grype
    elif "Results" in report or {"SchemaVersion", "ArtifactName"} <= report.keys():
        origin, read = FindingOrigin.TRIVY, _trivy
    else:
        raise InputError(f"{path}: neither a Trivy nor a Grype JSON report", HINT)
    try:
        return origin, _collapse(read(report))
    except WrongShape as exc:
        raise ValidationError([Problem(str(path), 1, 1, str(exc), HINT)], OUTCOME) from None
