"""The results folder: run ids, atomic writes and per-image records."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.adapters import results
from imagekit.adapters.results import RunFolder, new_run_id, write_atomic, write_json
from imagekit.errors import InputError
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.integrity import seal
from imagekit.kernel.records import BuildRecord, ImageRecord, PlanRecord
from imagekit.kernel.store import ContextFile
from tests.fakes import passing, verify_record

RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]+$")


def build(status: str) -> BuildRecord:
    return BuildRecord(
        name="a-slim",
        reference="imagekit-test/pytorch:a-slim",
        flavour="slim",
        status=status,  # type: ignore[arg-type]
        message=status,
        duration_s=1.0,
    )


PLAN = PlanRecord(
    name="a-slim",
    reference="imagekit-test/pytorch:a-slim",
    tag="a-slim",
    flavour="slim",
    cell={"torch": "2.13.0"},
)


def test_run_id_carries_the_utc_time_it_was_made() -> None:
    run_id = new_run_id(now_s=1_764_464_523.9)  # 2025-11-30 01:02:03 UTC

    assert RUN_ID.match(run_id)
    assert run_id.startswith("20251130T010203Z-")


def test_run_ids_sort_in_the_order_they_were_made() -> None:
    times = [0, 59, 3_600, 86_399, 1_000_000_000, 1_764_464_523, 4_102_444_800]

    ids = [new_run_id(now_s=t) for t in times]

    assert sorted(reversed(ids)) == ids


def test_run_ids_made_in_the_same_second_are_unique() -> None:
    ids = {new_run_id(now_s=1_764_464_523) for _ in range(200)}

    assert len(ids) == 200


def test_run_folder_is_created_with_images_and_logs(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path / "results")

    assert RUN_ID.match(run.run_id)
    assert run.root == tmp_path / "results" / run.run_id
    assert (run.root / "images").is_dir()
    assert (run.root / "logs").is_dir()
    assert run.image_file("a-slim") == run.root / "images" / "a-slim.json"
    assert run.log_file("a-slim") == run.root / "logs" / "a-slim.build.log"
    assert run.log_file("a-slim", "verify") == run.root / "logs" / "a-slim.verify.log"


def test_two_runs_never_share_a_folder_even_when_their_ids_collide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: Iterator[str] = iter(["20251130T010203Z-aaaa", "20251130T010203Z-aaaa", "second"])
    monkeypatch.setattr(results, "new_run_id", lambda now_s=None: next(made))

    first = RunFolder.create(tmp_path)
    second = RunFolder.create(tmp_path)

    assert first.run_id == "20251130T010203Z-aaaa"
    assert second.run_id == "second"
    assert first.root != second.root


def test_a_given_run_id_reuses_its_folder(tmp_path: Path) -> None:
    first = RunFolder.create(tmp_path, "fixed")
    first.update_image("a-slim", ImageRecord(build=build("built")))

    again = RunFolder.create(tmp_path, "fixed")

    assert again.root == first.root
    record = again.read_image("a-slim")
    assert record is not None and record.build is not None
    assert record.build.status == "built"


def test_write_atomic_replaces_the_whole_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "record.json"
    write_atomic(path, "a much longer first version of the file\n" * 10)

    write_atomic(path, "short\n")

    assert path.read_text(encoding="utf-8") == "short\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["record.json"]


def test_write_atomic_gives_the_file_the_mode_of_an_ordinary_write(tmp_path: Path) -> None:
    ordinary = tmp_path / "ordinary.json"
    ordinary.write_text("{}\n", encoding="utf-8")

    atomic = tmp_path / "atomic.json"
    write_atomic(atomic, "{}\n")

    assert atomic.stat().st_mode == ordinary.stat().st_mode


def test_failed_write_keeps_the_old_content_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "record.json"
    write_atomic(path, "old\n")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results.os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, "new\n")

    assert path.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_write_json_is_indented_and_key_sorted(tmp_path: Path) -> None:
    path = tmp_path / "data.json"

    write_json(path, {"b": 1, "a": {"d": 2, "c": 3}})

    assert path.read_text(encoding="utf-8") == (
        '{\n  "a": {\n    "c": 3,\n    "d": 2\n  },\n  "b": 1\n}\n'
    )


def test_update_image_sets_one_section_and_keeps_the_others(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "run")
    verified = verify_record(passing("env"))
    run.update_image("a-slim", ImageRecord(plan=PLAN))
    run.update_image("a-slim", ImageRecord(build=build("failed")))

    run.update_image("a-slim", ImageRecord(build=build("built")))
    run.update_image("a-slim", ImageRecord(verify=verified))

    sealed = seal(verified.to_json())  # the verify section is written with its seal
    assert run.read_image("a-slim") == ImageRecord(
        build=build("built"), plan=PLAN, verify=verified, seal=sealed
    )
    on_disk = json.loads(run.image_file("a-slim").read_text(encoding="utf-8"))
    assert on_disk == {
        "build": build("built").to_json(),
        "plan": PLAN.to_json(),
        "verify": verified.to_json(),
        "seal": sealed.to_json(),
    }


def test_write_run_records_the_command_engine_and_extras(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "run")

    run.write_run("build", EngineInfo(server_version="28.0.1"), {"matrix": "matrix.yaml"})

    data = json.loads((run.root / "run.json").read_text(encoding="utf-8"))
    assert data["schema_version"] == 1
    assert data["run_id"] == "run"
    assert data["command"] == "build"
    assert data["engine"]["server_version"] == "28.0.1"
    assert data["engine"] == EngineInfo(server_version="28.0.1").to_json()
    assert data["matrix"] == "matrix.yaml"
    assert set(data["host"]) == {"hostname", "platform", "python"}


def test_a_run_begins_with_its_run_json_written(tmp_path: Path) -> None:
    built = RunFolder.begin(tmp_path, "build", EngineInfo(server_version="28.0.1"), {"matrix": "m"})
    promoted = RunFolder.begin(tmp_path, "publish", None, {"registry": None}, seal_key=b"k")

    assert built.root.parent == promoted.root.parent == tmp_path and promoted.seal_key == b"k"
    data = json.loads((built.root / "run.json").read_text(encoding="utf-8"))
    assert (data["command"], data["engine"]["server_version"], data["matrix"]) == (
        "build",
        "28.0.1",
        "m",
    )
    # A promotion has no engine: run.json says so with an engine of unknown facts.
    data = json.loads((promoted.root / "run.json").read_text(encoding="utf-8"))
    assert data["engine"] == EngineInfo().to_json()


def test_a_build_context_is_written_whole_into_the_runs_contexts_folder(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "run")
    wheel = tmp_path / "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"wheel")
    files = {
        "Dockerfile": ContextFile("FROM scratch\n"),
        "layer.sh": ContextFile("#!/bin/sh\n", mode=0o755),
        "wheelhouse/torch.whl": ContextFile(source=wheel),
    }
    first = run.write_context("slim", {**files, "stale.txt": ContextFile("old\n")})
    folder = run.write_context("slim", files)
    assert folder == first == (tmp_path / "run" / "contexts" / "slim").resolve()
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
        "Dockerfile",
        "layer.sh",
        "wheelhouse",
        "wheelhouse/torch.whl",
    ]
    assert (folder / "Dockerfile").read_text() == "FROM scratch\n"
    assert (folder / "layer.sh").stat().st_mode & 0o777 == 0o755
    assert (folder / "wheelhouse" / "torch.whl").read_bytes() == b"wheel"
    with pytest.raises(InputError, match="would write outside"):
        run.write_context("../escape", files)
