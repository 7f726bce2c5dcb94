"""Adapter: what imagekit made that `imagekit gc` may remove (containers of runs, builder
stages and dangling images that carry imagekit's labels), found and removed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

import docker
import docker.errors

from imagekit.adapters.engine import DockerEngine, engine_errors, short_error
from imagekit.kernel import labels as L
from imagekit.kernel.json import JsonObject, as_list, as_number


class LeftoverKind(StrEnum):
    """What a leftover is."""

    CONTAINER = "container"
    IMAGE = "image"


@dataclass(frozen=True)
class Leftover:
    """Something imagekit made that `gc` may remove."""

    kind: LeftoverKind
    id: str
    name: str
    created_s: float


def _container(c: JsonObject) -> Leftover:
    names = ",".join(str(n) for n in as_list(c.get("Names")))
    return Leftover(LeftoverKind.CONTAINER, str(c["Id"]), names, as_number(c["Created"]))


def _image(i: JsonObject, name: str) -> Leftover:
    return Leftover(LeftoverKind.IMAGE, str(i["Id"]), name, as_number(i["Created"]))


def leftovers(engine: DockerEngine, run_id: str | None = None) -> list[Leftover]:
    """Containers and dangling images that carry imagekit labels; with `run_id`, only the
    containers of that run (build stages carry no run id, and are the next build's cache)."""
    client = engine.client
    found: list[Leftover] = []
    with engine_errors("listing leftovers"):
        label = f"{L.RUN_ID}={run_id}" if run_id else L.RUN_ID
        found += [_container(c) for c in client.api.containers(all=True, filters={"label": label})]
        if run_id:
            return sorted(found, key=lambda x: x.created_s)
        stages = client.api.containers(all=True, filters={"label": L.STAGE})
        found += [_container(c) for c in stages]
        for i in client.api.images(filters={"dangling": True, "label": L.STAGE}):
            found.append(_image(i, "<dangling builder stage>"))
        for i in client.api.images(filters={"dangling": True, "label": L.CELL}):
            found.append(_image(i, "<dangling imagekit image>"))
    unique: dict[tuple[LeftoverKind, str], Leftover] = {}
    for item in found:  # a builder stage carries its cell's label too: it keeps its first name
        unique.setdefault((item.kind, item.id), item)
    return sorted(unique.values(), key=lambda x: (x.kind, x.created_s))


def remove(engine: DockerEngine, item: Leftover) -> str | None:
    """Remove one leftover; None when done, else why not."""
    client = engine.client
    with engine_errors(f"removing {item.kind} {item.id[:12]}"):
        try:
            if item.kind is LeftoverKind.CONTAINER:
                client.api.remove_container(item.id, force=True, v=True)
            else:
                client.api.remove_image(item.id, noprune=False)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            return short_error(exc)
    return None


def age_s(item: Leftover, now_s: float | None = None) -> float:
    """Seconds since `item` was created."""
    return (now_s if now_s is not None else time.time()) - item.created_s


@dataclass(frozen=True)
class Tidied:
    """What `gc` did with one leftover: removed it, or kept it (`why`), or only listed it."""

    item: Leftover
    dry_run: bool
    why: str | None = None  # why it was kept

    def line(self) -> str:
        """One line for people."""
        verb = "would remove" if self.dry_run else ("removed" if self.why is None else "kept")
        short_id = self.item.id.removeprefix("sha256:")[:12]
        why = f" ({self.why})" if self.why else ""
        return f"{verb} {self.item.kind} {short_id} {self.item.name}{why}"


def tidy(
    engine: DockerEngine, run_id: str | None, older_than_s: float, *, dry_run: bool
) -> list[Tidied]:
    """List (`dry_run`) or remove the leftovers of `run_id` (all runs' when None) at least
    `older_than_s` old."""
    found = [x for x in leftovers(engine, run_id) if age_s(x) >= older_than_s]
    return [Tidied(x, dry_run, None if dry_run else remove(engine, x)) for x in found]


def tidied_summary(done: list[Tidied], *, dry_run: bool) -> str:
    """`N of M leftovers removed` (or listed)."""
    kept = sum(t.why is not None for t in done)
    return f"{len(done) - kept} of {len(done)} leftovers {'listed' if dry_run else 'removed'}"


def others_note(engine: DockerEngine) -> str | None:
    """A note for people when containers of other imagekit runs are on the engine: those are
    `imagekit gc`'s to remove, since another run may still be using them; None when none."""
    left = [x for x in leftovers(engine) if x.kind is LeftoverKind.CONTAINER]
    if not left:
        return None
    return (
        f"note: {len(left)} containers of other imagekit runs (earlier, or still running) are "
        "on this engine; `imagekit gc --dry-run` lists them, `imagekit gc --older-than 1h` "
        "removes those an hour old"
    )


def start_notes(engine: DockerEngine, *, others: bool = True) -> list[str]:
    """What a run says as it opens the engine, after removing the containers of runs on this
    machine that ended without removing them (a run killed with -9, an engine that died under a
    probe or a build step): what it removed and, with `others`, `others_note`."""
    from imagekit.adapters import orphans

    notes = [orphans.removed_line(orphans.remove_orphans(engine))]
    if others:
        notes.append(others_note(engine) or "")
    return [note for note in notes if note]
