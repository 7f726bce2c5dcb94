"""What `imagekit gc` says for each leftover, and in its last line (adapters/leftovers.py)."""

from __future__ import annotations

from imagekit.adapters.leftovers import Leftover, LeftoverKind, Tidied, tidied_summary

STAGE = Leftover(LeftoverKind.IMAGE, "sha256:0123456789abcdef", "<dangling builder stage>", 1.0)
PROBE = Leftover(LeftoverKind.CONTAINER, "fedcba9876543210ff", "/imagekit-probe", 2.0)


def test_each_leftover_is_one_line_naming_what_happened_to_it() -> None:
    assert Tidied(STAGE, dry_run=True).line() == (
        "would remove image 0123456789ab <dangling builder stage>"
    )
    assert Tidied(PROBE, dry_run=False).line() == "removed container fedcba987654 /imagekit-probe"
    kept = Tidied(PROBE, dry_run=False, why="in use")
    assert kept.line() == "kept container fedcba987654 /imagekit-probe (in use)"


def test_the_summary_counts_what_was_removed_or_listed() -> None:
    done = [Tidied(STAGE, False), Tidied(PROBE, False, "in use")]
    assert tidied_summary(done, dry_run=False) == "1 of 2 leftovers removed"
    assert tidied_summary([Tidied(STAGE, True)], dry_run=True) == "1 of 1 leftovers listed"
    assert tidied_summary([], dry_run=True) == "0 of 0 leftovers listed"


class FakeApi:
    """An engine whose one dangling image is a builder stage, which carries its cell's label
    too (templates/Dockerfile.j2), so both of gc's image filters find it."""

    def containers(self, all: bool, filters: dict[str, str]) -> list[object]:
        return []

    def images(self, filters: dict[str, object]) -> list[dict[str, object]]:
        return [{"Id": "sha256:0123456789abcdef", "Created": 5}]


def test_a_dangling_builder_stage_is_named_as_one_though_it_carries_its_cell_s_label() -> None:
    from types import SimpleNamespace

    from imagekit.adapters.leftovers import leftovers

    engine = SimpleNamespace(client=SimpleNamespace(api=FakeApi()))
    found = leftovers(engine)  # type: ignore[arg-type]
    assert [(x.kind, x.name) for x in found] == [(LeftoverKind.IMAGE, "<dangling builder stage>")]
