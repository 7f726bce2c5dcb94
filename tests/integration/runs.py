"""The start and the end of a run of the suite on an engine, for scripts/run-tests.sh:

    python -m tests.integration.runs before PID   # clear what a killed run left, check the
                                                  # room (trimming the build cache if short),
                                                  # write run PID down with the dangling images
    python -m tests.integration.runs after        # sweep the stages that appeared during the
                                                  # run (sweep.py) and strike it off

Why: tests/integration/leftovers.py.
"""

from __future__ import annotations

import sys

import docker

from tests.integration import leftovers
from tests.integration.sweep import dangling, sweep


def before(engine: docker.DockerClient, pid: int) -> int:
    """Start a run: clear what a killed run left, check the room (trimming the build cache
    where it is short), and write run `pid` down. 1, with why, where another run is alive or
    the room stays short."""
    path = leftovers.record_path(leftovers.engine_id(engine))
    if path.is_file():
        previous = leftovers.RunRecord.from_json(path.read_text())
        if leftovers.is_alive(previous):
            print(
                f"imagekit tests: another run of the suite (pid {previous.pid}, {path}) is using"
                " this engine; two at once collide on its images and run the disk out."
                f"\n    hint: wait for it, or stop it (kill -INT {previous.pid})",
                file=sys.stderr,
            )
            return 1
        removed = leftovers.remove_leftovers(engine, previous.dangling_before)
        print(
            f"imagekit tests: a killed run's leftovers removed: {removed.summary()}",
            file=sys.stderr,
        )
        if removed.left:
            print(f"    could not remove: {removed.left[:5]}", file=sys.stderr)
    need = leftovers.min_free_gb()
    room = leftovers.trim_build_cache(engine, leftovers.room(engine), need)
    if not room.enough(need):
        stranded = leftovers.stranded_classic_store(engine.info())
        print(leftovers.too_little_room(room, need, engine.df(), stranded), file=sys.stderr)
        return 1
    started = leftovers.process_started(pid)
    if started is None:
        print(f"imagekit tests: no process {pid} to write down", file=sys.stderr)
        return 2
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(leftovers.RunRecord(pid, started, frozenset(dangling(engine))).to_json())
    return 0


def after(engine: docker.DockerClient) -> int:
    """End a run: sweep the stages that appeared during it, and strike it off."""
    path = leftovers.record_path(leftovers.engine_id(engine))
    if not path.is_file():
        print(f"imagekit tests: no run written down at {path}; nothing swept", file=sys.stderr)
        return 0
    left = sweep(engine, set(leftovers.RunRecord.from_json(path.read_text()).dangling_before))
    if left:
        print(f"imagekit tests: could not remove {len(left)} images: {left[:5]}", file=sys.stderr)
    path.unlink()
    return 0


def main(argv: list[str]) -> int:
    if (
        not argv
        or argv[0] not in ("before", "after")
        or len(argv) != (2 if argv[0] == "before" else 1)
    ):
        print(__doc__ or "", file=sys.stderr)
        return 2
    engine = docker.from_env(version="auto", timeout=900)
    return before(engine, int(argv[1])) if argv[0] == "before" else after(engine)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
