"""Adapter: the results folder of a run: `results/<run-id>/`, written atomically, file by file.

Each image's record is written as soon as that image is done, through a temp
file and a rename, so an interrupted run keeps every image already finished and
never leaves a half-written file.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pydantic

from imagekit import __version__
from imagekit.errors import InputError
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.integrity import KEY_ENV, seal, seal_problem
from imagekit.kernel.json import JsonObject, as_object
from imagekit.kernel.publish_records import BuildEvidence, Evidence, PublishRecord
from imagekit.kernel.records import ImageRecord
from imagekit.kernel.store import ContextFile
from imagekit.site.page import RunRecords

# The sections written with a seal, and where each one's seal goes.
SEALS = {"verify": "seal", "audit": "audit_seal"}


def new_run_id(now_s: float | None = None) -> str:
    """`20261130T010203Z-1a2b3c4d`: sortable by time, unique across parallel CI jobs.

    32 random bits: with 16, a few dozen jobs starting in the same second
    already collide with a chance of a few percent.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_s))
    return f"{stamp}-{secrets.token_hex(4)}"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (temp file in the same folder + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkstemp: it makes the file 0600, and the rename would then leave results
    # unreadable to anyone but their writer. 0o666 less the umask is what a plain
    # open(path, "w") gives; O_EXCL keeps the temp name private to this call.
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: object) -> None:
    """Write `data` (what `json.dumps` takes: a record's JSON, a TypedDict of one, an SBOM) as
    indented, key-sorted JSON, atomically."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


class RunFacts(TypedDict, total=False):
    """What run.json says of the command beyond who ran it where, by command."""

    matrix: str  # build
    images: list[str]  # verify: the references verified
    sealed_with_key: bool  # verify: whether IMAGEKIT_RESULTS_KEY sealed the records
    registry: str | None  # publish: --registry
    force: bool  # publish
    signed: bool  # publish: whether a signing key was given


@dataclass(frozen=True)
class RunFolder:
    """One run's folder: it writes typed records atomically and reads back what it wrote.

    The one reader and writer of `results/<run-id>/` (the `RunStore` port): build (its records
    and contexts), verify, publish and report all go through it; a builder streams its log into
    the file `log_file` names.
    """

    root: Path
    run_id: str
    # Seals verify sections with an HMAC too (IMAGEKIT_RESULTS_KEY); a digest alone without.
    seal_key: bytes | None = None

    @classmethod
    def create(
        cls, results_dir: Path, run_id: str | None = None, *, seal_key: bytes | None = None
    ) -> RunFolder:
        """Make `results_dir/<run-id>/` (a new id unless one is given).

        A new id never reuses an existing folder: two runs that drew the same id
        would otherwise write into one folder and mix their records.
        """
        rid = run_id or new_run_id()
        root = results_dir / rid
        try:
            while run_id is None:
                try:
                    root.mkdir(parents=True)
                    break
                except FileExistsError:
                    rid = new_run_id()
                    root = results_dir / rid
            (root / "images").mkdir(parents=True, exist_ok=True)
            (root / "logs").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot write results under {results_dir}: {exc.strerror or exc}",
                "pass --results DIR with a folder you can write (or set IMAGEKIT_RESULTS)",
            ) from None
        return cls(root, rid, seal_key)

    @classmethod
    def begin(
        cls,
        results_dir: Path,
        command: str,
        engine: EngineInfo | None,
        facts: RunFacts,
        *,
        seal_key: bytes | None = None,
    ) -> RunFolder:
        """A new run's folder under `results_dir` (`create`), its run.json written: a run folder
        always says who ran what where (`engine` None: a run without one, a promotion)."""
        run = cls.create(results_dir, seal_key=seal_key)
        run.write_run(command, engine or EngineInfo(), facts)
        return run

    @staticmethod
    def check_writable(results_dir: Path) -> None:
        """InputError, before anything runs, when run folders cannot be made under
        `results_dir`: it is a file, or it (or the folder it would be made in) is read-only."""
        hint = "pass --results DIR with a folder you can write (or set IMAGEKIT_RESULTS)"
        existing = results_dir
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise InputError(f"--results {results_dir}: {existing} is not a folder", hint)
        if not os.access(existing, os.W_OK | os.X_OK):
            raise InputError(f"--results {results_dir}: {existing} is not writable", hint)

    @classmethod
    def open(cls, folder: Path) -> RunFolder:
        """An existing run folder, for reading; InputError when it is not one."""
        if not (folder / "images").is_dir():
            raise InputError(f"{folder} is not an imagekit run folder (no images/)")
        return cls(folder, folder.name)

    @classmethod
    def picked(cls, runs: tuple[Path, ...], results_dir: Path) -> list[RunFolder]:
        """The runs a command names (`named`), or else the newest under `results_dir`."""
        return [cls.named(run, results_dir) for run in runs] or [cls.newest(results_dir)]

    @classmethod
    def named(cls, run: Path, results_dir: Path) -> RunFolder:
        """A run as a command names it: its folder, or its id under `results_dir` (a bare
        name that is no run folder where it is given). InputError when it is neither."""
        if (run / "images").is_dir() or len(run.parts) != 1 or run.is_absolute():
            return cls.open(run)
        if (results_dir / run / "images").is_dir():
            return cls.open(results_dir / run)
        raise InputError(
            f"{run} is neither a run folder nor the id of a run under {results_dir}",
            "name a run folder, or a run id under --results DIR",
        )

    @staticmethod
    def newest(results_dir: Path) -> RunFolder:
        """The newest run under `results_dir` that recorded an image."""
        runs = sorted(p.parent for p in results_dir.glob("*/images") if any(p.glob("*.json")))
        if not runs:
            raise InputError(f"no runs under {results_dir}", "run imagekit verify first")
        return RunFolder.open(runs[-1])

    def image_file(self, name: str) -> Path:
        """The JSON record of one image."""
        return self.root / "images" / f"{name}.json"

    def log_file(self, name: str, stage: str = "build") -> Path:
        """The full log of one image's build (or other stage)."""
        return self.root / "logs" / f"{name}.{stage}.log"

    def write_log(self, name: str, stage: str, text: str) -> None:
        """Write the full log of one image's stage."""
        path = self.log_file(name, stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def append_report_to(self, name: str, target: Path) -> None:
        """Append report `name` to `target` (GitHub's step summary, which other steps share)."""
        with target.open("a", encoding="utf-8") as handle:
            handle.write((self.root / name).read_text())

    def write_run(self, command: str, engine: EngineInfo, extra: RunFacts) -> None:
        """run.json: who ran what where."""
        write_json(
            self.root / "run.json",
            {
                "schema_version": 1,
                "run_id": self.run_id,
                "command": command,
                "imagekit_version": __version__,
                "host": {
                    "hostname": socket.gethostname(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "engine": engine.to_json(),
                **extra,
            },
        )

    def read_image(self, name: str) -> ImageRecord | None:
        """One image's record; None when there is none yet."""
        path = self.image_file(name)
        return _read_record(path) if path.is_file() else None

    def update_image(self, name: str, record: ImageRecord) -> None:
        """Set the sections `record` has, keeping the image's other sections. A verify or audit
        section is written with its integrity seal (`kernel/integrity.py`), computed over the
        very JSON that goes to disk."""
        current = self.read_image(name) or ImageRecord()
        written = {section: value for section, value in record if value is not None}
        for sealed in SEALS.values():
            written.pop(sealed, None)  # only ever computed here
        # A new record, validated, of the sections kept and those written.
        merged = ImageRecord.model_validate(dict(current) | written)
        data = merged.to_json()
        for section, sealed in SEALS.items():
            value = data.get(section)
            if getattr(record, section) is not None and isinstance(value, dict):
                data[sealed] = seal(value, self.seal_key, section).to_json()
        write_json(self.image_file(name), data)

    def images(self) -> dict[str, ImageRecord]:
        """Every image record of this run, by name."""
        folder = self.root / "images"
        return {p.stem: _read_record(p) for p in sorted(folder.glob("*.json"))}

    def write_report(self, name: str, text: str) -> None:
        """A report file of the run, such as summary.md or junit.xml."""
        write_atomic(self.root / name, text)

    def write_publish(self, records: list[PublishRecord]) -> None:
        """publish.json: what happened to each image of a publish run."""
        write_json(self.root / "publish.json", [r.to_json() for r in records])

    def write_artifact(self, name: str, data: object) -> Path:
        """Another JSON file of the run (a package list, an SBOM), atomically; its path."""
        path = self.root / name
        write_json(path, data)
        return path

    def write_context(self, name: str, files: Mapping[str, ContextFile]) -> Path:
        """Write image `name`'s build context to `contexts/<name>/` of the run, replacing any
        earlier one whole; the folder."""
        # Imported here: the render's modules load for a build, not for every reader of results.
        from imagekit.adapters.contexts import write_folder

        return write_folder(self.root / "contexts", name, files)


def _read_record(path: Path) -> ImageRecord:
    """A record file, typed; InputError naming the file when it is not one."""
    try:
        return ImageRecord.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(
            f"{path} is not an imagekit record ({where}: {first['msg']})",
            "it was edited or cut short; run the stage again",
        ) from None


def results_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The key verify records are sealed and checked with (IMAGEKIT_RESULTS_KEY), if set."""
    value = (os.environ if environ is None else environ).get(KEY_ENV, "")
    return value.encode() if value else None


def _run_facts(run: Path) -> JsonObject:
    """run.json of a run, or nothing when it is absent or unreadable (or edited by hand into
    something else than an object)."""
    try:
        return as_object(json.loads((run / "run.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def verify_evidence(results_dir: Path, key: bytes | None = None) -> list[Evidence]:
    """Every verify record under `results_dir`, newest run first, each with its seal checked.

    A file that cannot be read as a record is no evidence at all: it is skipped, never trusted.
    A record whose integrity seal is missing or does not match (with `key`: was not made with
    that key) is returned with the reason in `seal_problem`, and the gate refuses it.
    """
    found = []
    for images in sorted(results_dir.glob("*/images"), reverse=True):
        facts = _run_facts(images.parent)
        for path in sorted(images.glob("*.json")):
            try:
                record = _read_record(path)
                raw = json.loads(path.read_bytes())
            except (InputError, ValueError):
                continue
            if record.verify is not None:
                found.append(
                    Evidence(
                        images.parent.name,
                        path.stem,
                        record.verify,
                        seal_problem=seal_problem(raw.get("verify"), raw.get("seal"), key),
                        seal_digest=str((raw.get("seal") or {}).get("digest") or ""),
                        engine=as_object(facts.get("engine")),
                        imagekit_version=str(facts.get("imagekit_version") or ""),
                    )
                )
    return found


def build_evidence(results_dir: Path) -> list[BuildEvidence]:
    """Every build record under `results_dir` that names an image, newest run first, with the
    plan it was built from: what publish's provenance is made of. A file that cannot be read as
    a record is skipped."""
    found = []
    for images in sorted(results_dir.glob("*/images"), reverse=True):
        for path in sorted(images.glob("*.json")):
            try:
                record = _read_record(path)
            except InputError:
                continue
            if record.build is not None and record.build.image_id:
                found.append(
                    BuildEvidence(images.parent.name, path.stem, record.build, record.plan)
                )
    return found


# The files of a run folder besides its records and logs that the run page links to.
RUN_REPORTS = ("run.json", "publish.json", "junit.xml", "summary.md")


def read_runs(results_dir: Path, key: bytes | None = None) -> list[RunRecords]:
    """Every run folder under `results_dir` as the run page reads it, oldest first: its
    records (InputError naming a file that is not one), publish.json, and the seal of each
    verify section checked (with `key`: that it was made with it)."""
    runs = []
    for images in sorted(results_dir.glob("*/images")):
        folder = RunFolder.open(images.parent)
        records = folder.images()
        problems = {}
        for name, record in records.items():
            if record.verify is not None:
                raw = json.loads(folder.image_file(name).read_bytes())
                problems[name] = seal_problem(raw.get("verify"), raw.get("seal"), key)
        facts = _run_facts(folder.root)
        present = [p for p in RUN_REPORTS if (folder.root / p).is_file()]
        present += [f"images/{p.name}" for p in images.glob("*.json")]
        present += [f"logs/{p.name}" for p in (folder.root / "logs").glob("*.log")]
        runs.append(
            RunRecords(
                run_id=folder.run_id,
                command=str(facts.get("command") or ""),
                host=str(as_object(facts.get("host")).get("hostname") or ""),
                images=records,
                publish=_publish_records(folder.root / "publish.json"),
                files=frozenset(present),
                seal_problems={n: why for n, why in problems.items() if why},
            )
        )
    return runs


def _publish_records(path: Path) -> tuple[PublishRecord, ...]:
    """publish.json's records (none when there is no such file); InputError naming it when
    it is not what publish writes."""
    if not path.is_file():
        return ()
    try:
        return tuple(PublishRecord.model_validate(r) for r in json.loads(path.read_bytes()))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not an imagekit publish.json ({exc})") from None
