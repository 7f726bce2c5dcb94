"""How a layer's members land in a root filesystem: their names, whiteouts, and symbolic links
followed inside the root only. Pure: the adapter (adapters/export.py) asks the file system.

A layer is a tar of changes to the layers below it (the OCI image spec, "Representing Changes"):
- a member's name is relative to the root; one that is absolute or climbs with `..` is refused,
  as the engine refuses it;
- `DIR/.wh.NAME` deletes NAME from the layers below; `DIR/.wh..wh..opq` empties DIR of what the
  layers below put there; other `.wh..wh.` names are the union file system's own and land
  nowhere;
- a symbolic link on a member's way (`lib -> usr/lib`, then `lib/x`) is followed as if the
  root were `/` (as the engine follows it, `chroot` style): an absolute target restarts at the
  root and `..` stops there, so no link makes a member land outside the root.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from imagekit.errors import InputError

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
UNION_META = ".wh..wh."  # aufs' own bookkeeping (`.wh..wh.plnk`, `.wh..wh.aufs`)
# Links followed on one path before it counts as a loop (Linux's own limit, MAXSYMLINKS).
MAX_LINKS = 40

Parts = tuple[str, ...]  # a path inside the root, one name each: ("usr", "lib")


class WhiteoutKind(StrEnum):
    """What a whiteout member asks of the layers below."""

    REMOVE = "remove"  # `.wh.NAME`: NAME goes
    OPAQUE = "opaque"  # `.wh..wh..opq`: the folder's lower contents go
    UNION_META = "union-meta"  # another `.wh..wh.` name: nothing to do


@dataclass(frozen=True)
class Whiteout:
    """A whiteout member: its kind and the path it names (the folder for an opaque one)."""

    kind: WhiteoutKind
    path: Parts


def _unsafe(name: str, why: str) -> InputError:
    return InputError(
        f"a layer of the image has a member {name!r} that {why}",
        "the image is malformed or crafted to write outside its root; rebuild it from a "
        "trusted Dockerfile, or pull it again from where it came from",
    )


def member_parts(name: str) -> Parts:
    """The path a member's name gives, as names under the root (empty: the root itself).
    `./a//b/` is ("a", "b"); an absolute name or one with `..` is refused (InputError)."""
    if name.startswith("/"):
        raise _unsafe(name, "is absolute")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise _unsafe(name, "climbs out with '..'")
    return parts


def whiteout_of(parts: Parts) -> Whiteout | None:
    """The whiteout a member's path is, or None for an ordinary member."""
    if not parts or not parts[-1].startswith(WHITEOUT):
        return None
    folder, name = parts[:-1], parts[-1]
    if name == OPAQUE:
        return Whiteout(WhiteoutKind.OPAQUE, folder)
    if name.startswith(UNION_META):
        return Whiteout(WhiteoutKind.UNION_META, parts)
    gone = name.removeprefix(WHITEOUT)
    if gone in ("", ".", ".."):
        raise _unsafe("/".join(parts), "whites out no name")
    return Whiteout(WhiteoutKind.REMOVE, (*folder, gone))


def in_root(parts: Parts, target_of: Callable[[Parts], str | None]) -> Parts:
    """Where `parts` is inside the root with every symbolic link on it followed inside the
    root, the last name included: `target_of(path)` is the target of the link at `path`
    (whose folders are never links), None where there is no link. An absolute target
    restarts at the root, `..` stops there. A loop is refused (InputError)."""
    done: list[str] = []
    todo = list(parts)
    links = 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if done:
                done.pop()
            continue
        target = target_of((*done, name))
        if target is None:
            done.append(name)
            continue
        links += 1
        if links > MAX_LINKS:
            raise _unsafe("/".join(parts), f"passes more than {MAX_LINKS} symbolic links")
        if target.startswith("/"):
            done = []
        todo[:0] = target.split("/")
    return tuple(done)


def landing(parts: Parts, target_of: Callable[[Parts], str | None]) -> Parts:
    """Where a member named `parts` lands: its folder resolved inside the root (`in_root`),
    its own name as it is (a member replaces a link of its name, never writes through it)."""
    if not parts:
        return ()
    return (*in_root(parts[:-1], target_of), parts[-1])


def depth_first(paths: list[Parts]) -> list[Parts]:
    """`paths` deepest first, in one order for the same paths (folders' times and modes are
    set in this order, so that setting a child's does not change its parent's)."""
    return sorted(paths, key=lambda p: (-len(p), p))
