"""The audit's allowlist: findings a team accepts for a while, each with its reason. Pure.

A YAML list, in a file of its own:

    - id: CVE-2025-12345        # the finding's id (CVE, GHSA, PYSEC, OSV)
      package: setuptools       # the package it is found in
      reason: build-time only; nothing imports it at run time
      expires: 2027-03-01       # the day after which the entry no longer counts

An entry without a reason, or past its expiry, is bad input (exit 2, at its line), so an
exception cannot outlive the decision behind it. An entry whose finding now has a fixed version
is no exception any more: the audit fails on it, "allowlist outdated", as AWS's Deep Learning
Containers scan does, because a rebuild takes the fix.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from imagekit.audit.findings import Finding
from imagekit.errors import Problem, ValidationError
from imagekit.kernel.json import JsonValue
from imagekit.matrix.yamlsrc import SourceMap, load_yaml

FIELDS = ("id", "package", "reason", "expires")
OUTCOME = "nothing was audited"
HINT = "each entry: id, package, reason (why it is accepted) and expires (YYYY-MM-DD)"


@dataclass(frozen=True)
class AllowEntry:
    """One accepted finding, and where it is written."""

    id: str
    package: str
    reason: str
    expires: dt.date
    where: str  # file:line

    def matches(self, finding: Finding) -> bool:
        """Whether this entry accepts `finding` (the same id in the same package)."""
        return self.id == finding.id and self.package.lower() == finding.package.lower()


def _entry(
    item: JsonValue, index: int, source: SourceMap, today: dt.date, problems: list[Problem]
) -> AllowEntry | None:
    path: tuple[str | int, ...] = (index,)
    if not isinstance(item, dict):
        problems.append(source.problem(path, "an entry must be a mapping", HINT))
        return None
    for key in sorted(set(item) - set(FIELDS)):
        problems.append(source.problem((index, key), f"unknown key {key!r}", HINT, key=True))
    values = {}
    for key in FIELDS:
        value = item.get(key)
        text = value.isoformat() if isinstance(value, dt.date) else value
        if not isinstance(text, str) or not text.strip():
            what = "no reason: say why it is accepted" if key == "reason" else f"no {key}"
            problems.append(source.problem((index, key) if key in item else path, what, HINT))
            return None
        values[key] = text.strip()
    try:
        expires = dt.date.fromisoformat(values["expires"])
    except ValueError:
        problems.append(
            source.problem((index, "expires"), f"expires {values['expires']!r} is no date", HINT)
        )
        return None
    if expires < today:
        problems.append(
            source.problem(
                (index, "expires"),
                f"{values['id']} in {values['package']} expired on {expires}",
                "decide again: rebuild to take a fix, or renew the entry with today's reason",
            )
        )
        return None
    line, _ = source.position(path)
    where = f"{source.file}:{line}"
    return AllowEntry(values["id"], values["package"], values["reason"], expires, where)


def parse_allowlist(text: str, file: str, today: dt.date) -> tuple[AllowEntry, ...]:
    """The entries of an allowlist file; every problem at once (ValidationError, exit 2)."""
    data, source = load_yaml(text, file)
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValidationError(
            [source.problem((), "an allowlist is a list of entries", HINT)], OUTCOME
        )
    problems: list[Problem] = []
    entries = [_entry(item, i, source, today, problems) for i, item in enumerate(data)]
    if problems:
        raise ValidationError(problems, OUTCOME)
    return tuple(e for e in entries if e is not None)
