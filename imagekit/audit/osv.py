"""Advisories about an image's Python distributions, from an OSV database given offline.

The database is osv.dev's per-ecosystem export (`PyPI/all.zip`: one JSON record per advisory at
its top level) or a folder of its `*.json` records. `read_osv` is the one boundary that reads
files; matching is pure. A version is affected when an `affected[].versions` lists it or it falls
in an `ECOSYSTEM`/`SEMVER` range by the OSV schema's evaluation algorithm, versions ordered as
PEP 440 orders them (text order puts `10.0` before `9.0`); a bound that is no PEP 440 version
(the export holds a few older ones) is left out of its range, not fatal. The severity is GHSA's
word (`database_specific.severity`); a CVSS vector alone grades nothing here (that would take a
CVSS library): `unknown`, which the gate counts as the worst.
"""

from __future__ import annotations

import functools
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from imagekit.audit.findings import Finding, parse_severity
from imagekit.audit.jsondoc import OUTCOME, WrongShape, decoded, kind_of
from imagekit.errors import InputError, Problem, ValidationError
from imagekit.kernel.json import JsonObject, JsonValue
from imagekit.kernel.vocabulary import Ecosystem, FindingOrigin

EXPORT_HINT = "give osv.dev's PyPI export: its all.zip, or a folder of its *.json records"
RECORD_HINT = "is this an OSV record (https://ossf.github.io/osv-schema/)?"
EVENTS = ("introduced", "fixed", "last_affected", "limit")
RANGE_TYPES = ("ECOSYSTEM", "SEMVER")  # GIT ranges name commits, not releases
# No PEP 440 version sorts below it (epoch 0, release 0, a dev release): OSV's `introduced: "0"`.
_FLOOR = Version("0.dev0")


@dataclass(frozen=True)
class Range:
    """One `affected[].ranges[]`: its type, and its events in the record's order."""

    type: str
    events: tuple[tuple[str, str], ...]  # (kind, version): ("introduced", "0"), ("fixed", "70.0")


@dataclass(frozen=True)
class Affected:
    """One `affected[]` entry: a package and the versions of it an advisory names."""

    ecosystem: str
    name: str  # PEP 503-normalized
    versions: tuple[str, ...]
    ranges: tuple[Range, ...]


@dataclass(frozen=True)
class Advisory:
    """What matching needs of one OSV record."""

    id: str  # GHSA-…, PYSEC-…: the record's own id, even where it aliases a CVE
    severity: str  # the database's word ("HIGH", "MODERATE"); "" where it gives none
    withdrawn: str  # when it was withdrawn; "" while it stands
    affected: tuple[Affected, ...]


def _normalize(name: str) -> str:  # PEP 503: `Typing_Extensions` -> `typing-extensions`
    return re.sub(r"[-_.]+", "-", name).lower()


def _object(value: JsonValue, path: str) -> JsonObject:
    if not isinstance(value, dict):
        raise WrongShape(f"{path} is {kind_of(value)}, not an object")
    return value


def _list(value: JsonValue, path: str) -> list[JsonValue]:
    if value is not None and not isinstance(value, list):
        raise WrongShape(f"{path} is {kind_of(value)}, not a list")
    return value or []


def _text(value: JsonValue, path: str, *, required: bool = False) -> str:
    if (required or value is not None) and not isinstance(value, str):
        raise WrongShape(f"{path} is {kind_of(value)}, not a string")
    return value or ""


def _range(value: JsonValue, path: str) -> Range:
    entry = _object(value, path)
    events = []
    for i, item in enumerate(_list(entry.get("events"), f"{path}.events")):
        event = _object(item, f"{path}.events[{i}]")
        where = f"{path}.events[{i}]"
        events += [
            (k, _text(event[k], f"{where}.{k}", required=True)) for k in EVENTS if k in event
        ]
    return Range(_text(entry.get("type"), f"{path}.type"), tuple(events))


def _affected(value: JsonValue, path: str) -> Affected:
    entry = _object(value, path)
    package = _object(entry.get("package") or {}, f"{path}.package")
    listed = _list(entry.get("versions"), f"{path}.versions")
    ranges = _list(entry.get("ranges"), f"{path}.ranges")
    return Affected(
        _text(package.get("ecosystem"), f"{path}.package.ecosystem"),
        _normalize(_text(package.get("name"), f"{path}.package.name")),
        tuple(_text(v, f"{path}.versions[{i}]", required=True) for i, v in enumerate(listed)),
        tuple(_range(r, f"{path}.ranges[{i}]") for i, r in enumerate(ranges)),
    )


def _advisory(doc: JsonValue) -> Advisory:
    record = _object(doc, "$")
    ident = _text(record.get("id"), "$.id")
    if not ident:
        raise WrongShape("$.id is missing: every OSV record has one (GHSA-…, PYSEC-…)")
    extra = record.get("database_specific")  # free-form: a severity there only if it is text
    severity = extra.get("severity") if isinstance(extra, dict) else None
    affected = _list(record.get("affected"), "$.affected")
    return Advisory(
        ident,
        severity if isinstance(severity, str) else "",
        _text(record.get("withdrawn"), "$.withdrawn"),
        tuple(_affected(item, f"$.affected[{i}]") for i, item in enumerate(affected)),
    )


def _parse(data: bytes, file: str) -> Advisory | Problem:
    doc = decoded(data, file, RECORD_HINT)
    if isinstance(doc, Problem):
        return doc
    try:
        return _advisory(doc)
    except WrongShape as exc:
        return Problem(file, 1, 1, str(exc), RECORD_HINT)


def _documents(path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        if path.is_dir():
            for file in sorted(f for f in path.rglob("*.json") if f.is_file()):
                yield str(file), file.read_bytes()
        elif path.is_file() and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                for member in archive.infolist():
                    if not member.is_dir() and member.filename.endswith(".json"):
                        yield f"{path}:{member.filename}", archive.read(member)
        else:
            what = "is neither a zip nor a folder" if path.exists() else "does not exist"
            raise InputError(f"{path}: {what}", EXPORT_HINT)
    except (OSError, zipfile.BadZipFile, zlib.error) as exc:
        raise InputError(f"{path}: cannot read the OSV export: {exc}", EXPORT_HINT) from None


def read_osv(path: Path) -> tuple[Advisory, ...]:
    """Every record of an OSV export: a zip (osv.dev's `PyPI/all.zip`) or a folder of `*.json`.

    A record that is not JSON is bad input at its `file:line:col` (a zip's member as
    `all.zip:GHSA-….json`), one of the wrong shape at the JSON path of what is wrong, all at
    once (exit 2). An empty export is bad input: matching nothing would call an image clean."""
    parsed = [_parse(data, file) for file, data in _documents(path)]
    if problems := [p for p in parsed if isinstance(p, Problem)]:
        raise ValidationError(problems, OUTCOME)
    if not parsed:
        raise InputError(f"{path}: holds no OSV records (*.json)", EXPORT_HINT)
    return tuple(a for a in parsed if isinstance(a, Advisory))


@functools.lru_cache(maxsize=65536)
def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _lowest(versions: Iterable[str]) -> str:
    return min(versions, key=lambda text: _version(text) or _FLOOR, default="")


def _in_range(v: Version, events: tuple[tuple[str, str], ...]) -> str | None:
    """`None` where `v` is outside the range; else the lowest `fixed` above it ("" if none)."""
    bounds = [
        (kind, text, _FLOOR if kind == "introduced" and text == "0" else _version(text))
        for kind, text in events
    ]
    usable = [(kind, text, bound) for kind, text, bound in bounds if bound is not None]
    limits = [bound for kind, _, bound in usable if kind == "limit"]
    unlimited = any(kind == "limit" and "*" in text for kind, text in events)
    if limits and not unlimited and not any(v < limit for limit in limits):
        return None
    vulnerable = False
    for kind, _, bound in sorted(usable, key=lambda event: event[2]):  # stable: ties keep order
        if kind == "introduced" and v >= bound:
            vulnerable = True
        elif (kind == "fixed" and v >= bound) or (kind == "last_affected" and v > bound):
            vulnerable = False
    if not vulnerable:
        return None
    return _lowest(text for kind, text, bound in usable if kind == "fixed" and bound > v)


def _match(entry: Affected, installed: str) -> str | None:
    """`None` where `installed` is not affected; else its fixed version ("" if none)."""
    v = _version(installed)
    hits = [_in_range(v, r.events) for r in entry.ranges if v and r.type in RANGE_TYPES]
    if any(fixed is not None for fixed in hits):
        return _lowest(fixed for fixed in hits if fixed)
    if installed in entry.versions or (v is not None and v in map(_version, entry.versions)):
        return ""  # listed, outside every range: nothing says which release fixes it
    return None


def python_findings(
    advisories: Iterable[Advisory], installed: Mapping[str, str]
) -> tuple[Finding, ...]:
    """The advisories that affect the distributions `installed` (name -> version): one finding
    per advisory and distribution, named as `installed` names it, by (package, id); withdrawn
    advisories and other ecosystems' entries match nothing."""
    by_name = {_normalize(name): (name, version) for name, version in installed.items()}
    found: dict[tuple[str, str], Finding] = {}
    for advisory in advisories:
        for entry in () if advisory.withdrawn else advisory.affected:
            if entry.ecosystem != "PyPI" or entry.name not in by_name:
                continue
            name, version = by_name[entry.name]
            fixed = _match(entry, version)
            if fixed is None:
                continue
            if (name, advisory.id) in found:  # two entries for one package: the lower fix
                fixed = _lowest(f for f in (fixed, found[name, advisory.id].fixed) if f)
            severity = parse_severity(advisory.severity)
            found[name, advisory.id] = Finding(
                advisory.id, name, version, fixed, severity, FindingOrigin.OSV, Ecosystem.PYTHON
            )
    return tuple(sorted(found.values(), key=lambda f: (f.package, f.id)))
