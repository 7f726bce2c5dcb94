"""Orchestration of `imagekit publish`: gate, immutable versioned tags, moving aliases, records.

For each image: the local image must exist and pass the gate (verify results for
this exact image id, tags equal to the probed facts); its versioned tag must not
exist on the registry with other content (same content: a no-op); then every tag
is pushed, its digest read back from the registry, a package manifest and a
CycloneDX SBOM written, and everything recorded in results/<run-id>/publish.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from imagekit.engine import engine_errors, inspect_image
from imagekit.events import Event, EventSink
from imagekit.gate import decide
from imagekit.plan import ImagePlan
from imagekit.registry import RegistryError, push, registry_auth, remote_manifest, split_reference
from imagekit.results import RunFolder, write_atomic, write_json

PUBLISHED, UNCHANGED, REFUSED, FAILED, DRY_RUN = (
    "published",
    "unchanged",
    "refused",
    "failed",
    "dry-run",
)


def candidate_tag(tag: str, candidate: str) -> str:
    """The pre-release tag CI pushes before verification on every runner has passed."""
    return f"{tag}-candidate-{candidate}"


def load_verify_records(results_dir: Path) -> list[dict[str, Any]]:
    """Every verify record under `results_dir`, newest run first, each tagged with its run."""
    records = []
    for run in sorted(results_dir.glob("*/images"), reverse=True):
        for path in sorted(run.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if "verify" in record:
                records.append({**record, "_run": run.parent.name})
    return records


def retarget(repository: str, registry: str | None) -> str:
    """`repository` on another registry: ghcr.io/team/pytorch -> REGISTRY/team/pytorch."""
    if not registry:
        return repository
    first, _, rest = repository.partition("/")
    has_host = "." in first or ":" in first or first == "localhost"
    return f"{registry.rstrip('/')}/{rest if has_host and rest else repository}"


@dataclass(frozen=True)
class PublishSettings:
    """How to publish."""

    results_dir: Path
    registry: str | None = None
    dry_run: bool = False
    force: bool = False
    attempts: int = 4
    backoff_s: float = 1.0
    # CI pipelines: push only `{tag}-candidate-{id}` (no aliases), or start from such a
    # candidate (pulled and tagged as the plan's reference) and publish the final tags.
    candidate: str | None = None
    from_candidate: str | None = None


@dataclass
class PublishRecord:
    """What happened to one image."""

    name: str
    status: str
    image_id: str | None = None
    reasons: list[str] = field(default_factory=list)
    forced: bool = False
    tags: list[dict[str, Any]] = field(default_factory=list)
    manifest_file: str | None = None
    sbom_file: str | None = None


class PublishRun:
    """One `imagekit publish` over a list of plans."""

    def __init__(
        self,
        client: docker.DockerClient,
        settings: PublishSettings,
        run: RunFolder,
        events: EventSink,
    ) -> None:
        self.client = client
        self.settings = settings
        self.run = run
        self.events = events
        self.records = load_verify_records(settings.results_dir)
        self.done: list[PublishRecord] = []

    def publish_one(self, plan: ImagePlan) -> PublishRecord:
        """Gate, check and push one image; its record is written when this returns."""
        record = self._publish_one(plan)
        self.done.append(record)
        write_json(self.run.root / "publish.json", [r.__dict__ for r in self.done])
        message = record.status + (": " + "; ".join(record.reasons) if record.reasons else "")
        self.events(Event("finished", plan.name, message, {"status": record.status}))
        return record

    def _publish_one(self, plan: ImagePlan) -> PublishRecord:
        if self.settings.from_candidate:
            problem = self._pull_candidate(plan, self.settings.from_candidate)
            if problem:
                return PublishRecord(plan.name, FAILED, reasons=[problem])
        local = inspect_image(self.client, plan.reference)
        if local is None:
            return PublishRecord(
                plan.name, REFUSED, reasons=[f"{plan.reference} is not built here"]
            )
        decision = decide(plan, local.id, self.records, force=self.settings.force)
        record = PublishRecord(plan.name, REFUSED, local.id, list(decision.reasons))
        record.forced = bool(decision.reasons) and decision.allowed
        if not decision.allowed:
            return record
        repository = retarget(plan.repository, self.settings.registry)
        host = split_reference(f"{repository}:x")[0]
        auth = registry_auth(host)
        versioned = f"{repository}:{plan.tag}"
        try:
            remote = remote_manifest(versioned, auth)
        except RegistryError as exc:
            record.status, record.reasons = FAILED, [*record.reasons, str(exc)]
            return record
        if remote is not None and remote["config"] != local.id:
            record.reasons.append(
                f"{versioned} already exists with other content (registry digest "
                f"{remote['digest']}, image {remote['config']}; this image is {local.id}); "
                "versioned tags are never overwritten"
            )
            return record
        todo = [(plan.tag, "versioned")] + [(a, "alias") for a in plan.aliases]
        if self.settings.candidate:
            versioned = f"{repository}:{candidate_tag(plan.tag, self.settings.candidate)}"
            remote = None
            todo = [(candidate_tag(plan.tag, self.settings.candidate), "candidate")]
        if remote is not None:
            record.tags.append(
                {
                    "tag": versioned,
                    "kind": "versioned",
                    "status": UNCHANGED,
                    "digest": remote["digest"],
                    "attempts": 0,
                }
            )
            todo = todo[1:]
        if self.settings.dry_run:
            record.status = DRY_RUN
            record.tags += [
                {"tag": f"{repository}:{t}", "kind": k, "status": DRY_RUN} for t, k in todo
            ]
            return record
        for tag, kind in todo:
            entry = self._push_tag(local.id, repository, tag, kind, auth)
            record.tags.append(entry)
            if entry["status"] != PUBLISHED:
                record.status = FAILED
                record.reasons.append(f"{repository}:{tag}: {entry['error']}")
                return record
        record.status = (
            PUBLISHED if any(t["status"] == PUBLISHED for t in record.tags) else UNCHANGED
        )
        digest = next(t["digest"] for t in record.tags if t["kind"] == "versioned")
        record.manifest_file, record.sbom_file = self._inventory(plan, local.id, digest)
        return record

    def _pull_candidate(self, plan: ImagePlan, candidate: str) -> str | None:
        """Pull the candidate of `plan` and tag it as the plan's reference; None when done."""
        repository = retarget(plan.repository, self.settings.registry)
        tag = candidate_tag(plan.tag, candidate)
        host = split_reference(f"{repository}:x")[0]
        with engine_errors(f"pulling {repository}:{tag}"):
            try:
                self.client.api.pull(repository, tag, auth_config=registry_auth(host))
                image = self.client.images.get(f"{repository}:{tag}")
            except docker.errors.APIError as exc:
                return f"cannot pull the candidate {repository}:{tag}: {exc.explanation or exc}"
            name, _, own_tag = plan.reference.rpartition(":")
            image.tag(name, own_tag)
        return None

    def _push_tag(
        self, image_id: str, repository: str, tag: str, kind: str, auth: dict[str, str] | None
    ) -> dict[str, Any]:
        reference = f"{repository}:{tag}"
        before = None
        if kind == "alias":
            try:
                before = remote_manifest(reference, auth)
            except RegistryError:
                before = None  # the push below reports what is wrong with the registry
        with engine_errors(f"tagging {reference}"):
            self.client.api.tag(image_id, repository, tag)
        started = time.monotonic()
        outcome = push(
            self.client,
            reference,
            attempts=self.settings.attempts,
            backoff_s=self.settings.backoff_s,
            auth=auth,
        )
        entry: dict[str, Any] = {
            "tag": reference,
            "kind": kind,
            "attempts": outcome.attempts,
            "errors": outcome.errors,
            "duration_s": round(time.monotonic() - started, 3),
        }
        if not outcome.ok:
            return {**entry, "status": FAILED, "error": f"{outcome.kind}: {outcome.error}"}
        try:
            after = remote_manifest(reference, auth)
        except RegistryError as exc:
            return {
                **entry,
                "status": FAILED,
                "error": f"pushed, but the digest could not be read back: {exc}",
            }
        if after is None or after["config"] != image_id:
            return {
                **entry,
                "status": FAILED,
                "error": "the registry does not show the pushed image",
            }
        entry |= {"status": PUBLISHED, "digest": after["digest"]}
        if kind == "alias":
            entry["moved_from"] = before["digest"] if before else None
        return entry

    def _inventory(self, plan: ImagePlan, image_id: str, digest: str) -> tuple[str, str]:
        """The image's Python and OS packages, and a CycloneDX SBOM of its Python environment."""
        with engine_errors(f"listing the packages of {plan.reference}"):
            pip = self.client.containers.run(
                image_id,
                ["python3", "-m", "pip", "list", "--format", "json"],
                entrypoint=[],
                remove=True,
                network_mode="none",
            ).decode()
            dpkg = self.client.containers.run(
                image_id,
                ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\n"],
                entrypoint=[],
                remove=True,
                network_mode="none",
            ).decode()
        python = json.loads(pip)
        folder = self.run.root / "publish"
        manifest = {
            "image": plan.reference,
            "image_id": image_id,
            "digest": digest,
            "python_packages": python,
            "os_packages": [
                dict(zip(("name", "version"), line.split("\t"), strict=False))
                for line in dpkg.splitlines()
                if line
            ],
        }
        manifest_file = folder / f"{plan.name}.packages.json"
        write_json(manifest_file, manifest)
        requirements = "".join(f"{p['name']}=={p['version']}\n" for p in python)
        sbom = subprocess.run(
            [
                sys.executable,
                "-m",
                "cyclonedx_py",
                "requirements",
                "--of",
                "JSON",
                "--output-reproducible",
                "-",
            ],
            input=requirements,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        document = json.loads(sbom)
        document.setdefault("metadata", {})["component"] = {
            "type": "container",
            "name": plan.reference,
            "version": digest,
            "bom-ref": digest,
        }
        sbom_file = folder / f"{plan.name}.cdx.json"
        write_atomic(sbom_file, json.dumps(document, indent=2) + "\n")
        return str(manifest_file), str(sbom_file)
