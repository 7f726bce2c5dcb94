"""Whether an image's virtualenv holds what its wheels installed: the wheel-files check. Pure.

`templates/wheel_files.py`, run inside a container of the image, reports for every entry of
every installed distribution's RECORD what lies at its path and the digest of its content;
`templates/prune_venv.py`'s reports (slim's `imagekit-pruned.json`, and in full also
`imagekit-pruned-full.json`, over full's own overlay) say what the build changed on purpose.
An entry holds when it is

- there with RECORD's hash (`installed`), or a link to a file with that content (`linked`);
- stripped of debug sections, the report's digest before stripping being RECORD's and the one
  after being what is there (`stripped`);
- missing, and `imagekit-headers.tar.gz` holds it with RECORD's hash (`packed`);
- there, where RECORD gives no hash to compare (`present`: RECORD itself, some bytecode);
- there with the content another distribution's RECORD gives the same path (`installed over`:
  two wheels ship one file, and the installer kept the later one).

Removals on purpose are accounted for by name, never passed over as fine: a static archive with
a shared twin (`static_removed`), a private-key file (`keys_removed`), a distribution slim
leaves out (`imagekit-left-out.txt`; full installs it back, so in full it must be there).
Anything else (a file missing, another hash, a link to other bytes, a stripped file whose
digests the report lacks) is a failure that names the distribution and the file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from imagekit.kernel.records import Check
from imagekit.kernel.vocabulary import Flavour

CHECK_NAME = "the venv holds every file its wheels installed"
# The script the structure checks copy into the container (templates/), and the prune
# reports it passes on, slim's first.
SCRIPT = "wheel_files.py"
SLIM_REPORT = "imagekit-pruned.json"
FULL_REPORT = "imagekit-pruned-full.json"
HEADERS_ARCHIVE = "imagekit-headers.tar.gz"
NAMED = 10  # files a detail names per kind before it counts the rest

Kind = Literal["file", "link", "missing", "other"]
Holds = Literal[
    "installed",
    "linked",
    "stripped",
    "packed",
    "present",
    "installed over",
    "static archive removed",
    "private key removed",
]
REMOVALS: tuple[Holds, ...] = ("static archive removed", "private key removed")


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Entry(_Fact):
    """One RECORD entry and what lies at its path (relative to the venv)."""

    path: str
    hash: str = ""  # RECORD's, `sha256=<urlsafe base64>`; "" where RECORD gives none
    kind: Kind
    seen: str = ""  # the digest of what is there (a link's: of what it points to)
    target: str = ""  # a link's target, as written
    packed: str = ""  # a missing entry's digest in the headers archive, if it holds it


class Distribution(_Fact):
    name: str
    version: str
    record: str
    entries: tuple[Entry, ...]

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


class Digests(_Fact):
    before: str
    after: str


class PruneReport(BaseModel):
    """The parts of a prune_venv.py report the check weighs (its figures are for `make bench`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    stripped: dict[str, int] = Field(default_factory=dict)
    stripped_sha256: dict[str, Digests] = Field(default_factory=dict)
    static_removed: dict[str, int] = Field(default_factory=dict)
    linked: dict[str, int] = Field(default_factory=dict)
    headers_packed: dict[str, int] = Field(default_factory=dict)
    keys_removed: tuple[str, ...] = ()


class WheelFacts(_Fact):
    """What templates/wheel_files.py prints (schema 1)."""

    schema_version: Literal[1] = Field(alias="schema")
    venv: str
    distributions: tuple[Distribution, ...]
    reports: dict[str, PruneReport | None]
    left_out: tuple[str, ...] = ()
    bytes_hashed: int = 0
    seconds: float = 0.0


def parse_facts(text: str) -> WheelFacts:
    """The script's output; ValueError (pydantic's) where it is not that."""
    return WheelFacts.model_validate_json(text)


@dataclass(frozen=True)
class Pruned:
    """What the build did on purpose, from slim's report and full's together."""

    stripped: frozenset[str]
    digests: Mapping[str, Digests]
    static_removed: frozenset[str]
    keys_removed: frozenset[str]
    packed_folders: tuple[str, ...]

    @classmethod
    def of(cls, reports: Iterable[PruneReport | None]) -> Pruned:
        found = [r for r in reports if r is not None]
        return cls(
            stripped=frozenset(p for r in found for p in r.stripped),
            digests={p: d for r in found for p, d in r.stripped_sha256.items()},
            static_removed=frozenset(p for r in found for p in r.static_removed),
            keys_removed=frozenset(p for r in found for p in r.keys_removed),
            packed_folders=tuple(sorted({f for r in found for f in r.headers_packed})),
        )

    def in_packed_folder(self, path: str) -> bool:
        return any(path.startswith(folder + "/") for folder in self.packed_folders)


@dataclass(frozen=True)
class Judged:
    """One entry's verdict: what held (`holds`), or what is wrong (`problem`)."""

    holds: Holds | None = None
    problem: str = ""


def judge_entry(entry: Entry, pruned: Pruned, others: Iterable[str] = ()) -> Judged:
    """Whether one RECORD entry holds; `others` are the hashes other distributions' RECORDs give
    the same path."""
    if entry.kind == "missing":
        return _judge_missing(entry, pruned)
    if entry.kind == "other":
        return Judged(problem="is there, but not a file or a link")
    if not entry.hash:
        return Judged(holds="present")
    if entry.kind == "link" and not entry.seen:
        return Judged(problem=f"is a link to {entry.target}, which is not a file")
    if entry.seen == entry.hash:
        return Judged(holds="linked" if entry.kind == "link" else "installed")
    if entry.path in pruned.digests:
        return _judge_stripped(entry, pruned.digests[entry.path])
    if entry.path in pruned.stripped:
        return Judged(problem="was stripped of debug sections, and the report has no digests")
    if entry.seen in others:
        return Judged(holds="installed over")
    what = f"is a link to {entry.target} with" if entry.kind == "link" else "has"
    return Judged(problem=f"{what} {entry.seen}, RECORD says {entry.hash}")


def _judge_missing(entry: Entry, pruned: Pruned) -> Judged:
    if entry.path in pruned.static_removed:
        return Judged(holds="static archive removed")
    if entry.path in pruned.keys_removed:
        return Judged(holds="private key removed")
    if entry.packed:
        if entry.packed == entry.hash:
            return Judged(holds="packed")
        return Judged(
            problem=f"is in {HEADERS_ARCHIVE} with {entry.packed}, RECORD says {entry.hash}"
        )
    if pruned.in_packed_folder(entry.path):
        return Judged(problem=f"is missing, its folder packed, and {HEADERS_ARCHIVE} lacks it")
    return Judged(problem="is missing")


def _judge_stripped(entry: Entry, digests: Digests) -> Judged:
    if digests.before != entry.hash:
        return Judged(
            problem=f"was stripped from {digests.before}, not RECORD's {entry.hash}",
        )
    if digests.after != entry.seen:
        return Judged(problem=f"has {entry.seen}, not the {digests.after} stripping left")
    return Judged(holds="stripped")


def normalised(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Verdict:
    """The whole venv's: counts of what held, the accounted removals by name, the failures."""

    held: Mapping[Holds, int]
    removed: Mapping[Holds, tuple[str, ...]]
    left_out: tuple[str, ...]
    failures: tuple[str, ...]
    entries: int
    distributions: int

    @property
    def ok(self) -> bool:
        return not self.failures and self.distributions > 0


def judge(facts: WheelFacts, flavour: Flavour | None) -> Verdict:
    """Every entry of every distribution, and the left-out ones: absent from slim, back in
    full at the version slim left out."""
    pruned = Pruned.of(facts.reports.get(name) for name in (SLIM_REPORT, FULL_REPORT))
    claims: dict[str, list[tuple[str, str]]] = {}
    for dist in facts.distributions:
        for entry in dist.entries:
            claims.setdefault(entry.path, []).append((dist.label, entry.hash))
    held: Counter[Holds] = Counter()
    removed: dict[Holds, list[str]] = {}
    failures = []
    for dist in facts.distributions:
        for entry in dist.entries:
            others = (h for label, h in claims[entry.path] if label != dist.label and h)
            judged = judge_entry(entry, pruned, others)
            if judged.holds is None:
                failures.append(f"{dist.label}: {entry.path} {judged.problem}")
                continue
            held[judged.holds] += 1
            if judged.holds in REMOVALS:
                removed.setdefault(judged.holds, []).append(entry.path)
    failures += _left_out_problems(facts, flavour)
    return Verdict(
        held=dict(held),
        removed={k: tuple(v) for k, v in removed.items()},
        left_out=facts.left_out if flavour and not flavour.workstation else (),
        failures=tuple(failures),
        entries=sum(len(d.entries) for d in facts.distributions),
        distributions=len(facts.distributions),
    )


def _left_out_problems(facts: WheelFacts, flavour: Flavour | None) -> list[str]:
    installed = {normalised(d.name): d.version for d in facts.distributions}
    problems = []
    for pin in facts.left_out:
        name, _, version = pin.partition("==")
        there = installed.get(normalised(name))
        if flavour and not flavour.workstation and there is not None:
            problems.append(f"{pin}: left out of slim, yet {name} {there} is installed")
        elif flavour and flavour.workstation and there != version:
            seen = f"{name} {there} is installed" if there else "it is not installed"
            problems.append(f"{pin}: full installs what slim left out back, and {seen}")
    return problems


# How a detail counts what held otherwise than as installed, in this order.
SAID: dict[Holds, str] = {
    "stripped": "stripped of debug sections",
    "linked": "linked to an identical copy",
    "packed": f"packed in {HEADERS_ARCHIVE}",
    "installed over": "installed over by another wheel's copy",
    "present": "present, RECORD giving no hash",
    "static archive removed": "removed as static archives with a shared twin",
    "private key removed": "removed as private keys",
}


def _named(items: Iterable[str], between: str = ", ") -> str:
    items = list(items)
    more = f"{between}and {len(items) - NAMED:,} more" if len(items) > NAMED else ""
    return between.join(items[:NAMED]) + more


def _otherwise(verdict: Verdict) -> str:
    """What held otherwise than as installed, the removals named: ' (3 stripped ...)'."""
    said = []
    for holds, words in SAID.items():
        if count := verdict.held.get(holds):
            paths = verdict.removed.get(holds)
            said.append(f"{count:,} {words}" + (f": {_named(paths)}" if paths else ""))
    if verdict.left_out:
        said.append(f"left out of slim: {', '.join(verdict.left_out)}")
    return f" ({'; '.join(said)})" if said else ""


def wheel_files_check(facts: WheelFacts, flavour: Flavour | None) -> Check:
    """The check of one image's venv, its detail saying what held, what was removed on purpose
    (named) and what failed (named, distribution and file)."""
    verdict = judge(facts, flavour)
    if not verdict.distributions:
        return Check(name=CHECK_NAME, ok=False, detail=f"no RECORD under {facts.venv}")
    files = f"{verdict.entries:,} files of {verdict.distributions} distributions"
    cost = f"{facts.bytes_hashed / 1e6:,.0f} MB hashed in {facts.seconds:.1f} s"
    if verdict.failures:
        detail = (
            f"{len(verdict.failures):,} not as the wheels installed them, in {files}: "
            f"{_named(verdict.failures, '; ')}{_otherwise(verdict)}; {cost}"
        )
    else:
        detail = f"{files} as their wheels installed them{_otherwise(verdict)}; {cost}"
    return Check(name=CHECK_NAME, ok=verdict.ok, detail=detail)
