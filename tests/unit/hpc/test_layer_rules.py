"""The rules a layer's members land by (hpc/layers.py), each on planted names: pure."""

from __future__ import annotations

import pytest

from imagekit.errors import ExitCode, InputError
from imagekit.hpc.layers import (
    Parts,
    Whiteout,
    WhiteoutKind,
    depth_first,
    in_root,
    landing,
    member_parts,
    whiteout_of,
)


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("usr/lib/x.so", ("usr", "lib", "x.so")),
        ("./usr//lib/", ("usr", "lib")),
        ("./", ()),
        (".", ()),
        ("a/./b", ("a", "b")),
        ("..foo/b..", ("..foo", "b..")),  # names that only begin or end with dots are names
    ],
)
def test_a_member_name_is_its_path_under_the_root(name: str, parts: Parts) -> None:
    assert member_parts(name) == parts


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("/etc/passwd", "is absolute"),
        ("../etc/passwd", "climbs out"),
        ("usr/../../etc/passwd", "climbs out"),
        ("usr/lib/..", "climbs out"),
    ],
)
def test_an_absolute_or_climbing_member_name_is_refused(name: str, why: str) -> None:
    with pytest.raises(InputError) as refused:
        member_parts(name)
    assert why in refused.value.message and repr(name) in refused.value.message
    assert refused.value.exit_code == ExitCode.BAD_INPUT
    assert "trusted" in refused.value.hint


@pytest.mark.parametrize(
    ("parts", "whiteout"),
    [
        (("etc", "motd"), None),
        (("etc", ".wh.motd"), Whiteout(WhiteoutKind.REMOVE, ("etc", "motd"))),
        ((".wh.opt",), Whiteout(WhiteoutKind.REMOVE, ("opt",))),
        (("var", "cache", ".wh..wh..opq"), Whiteout(WhiteoutKind.OPAQUE, ("var", "cache"))),
        (("a", ".wh..wh.plnk"), Whiteout(WhiteoutKind.UNION_META, ("a", ".wh..wh.plnk"))),
        ((), None),
    ],
)
def test_whiteouts_say_what_they_remove(parts: Parts, whiteout: Whiteout | None) -> None:
    assert whiteout_of(parts) == whiteout


def test_a_whiteout_of_no_name_is_refused() -> None:
    with pytest.raises(InputError, match="whites out no name"):
        whiteout_of(("etc", ".wh."))


# A planted tree's links: path -> target.
LINKS: dict[Parts, str] = {
    ("lib",): "usr/lib",
    ("escape",): "/tmp/outside",
    ("up",): "../../../..",
    ("usr", "lib", "up"): "../../..",
    ("abs",): "/usr/lib",
    ("loop",): "loop",
    ("a",): "b",
    ("b",): "a",
}


@pytest.mark.parametrize(
    ("parts", "lands"),
    [
        (("usr", "bin"), ("usr", "bin")),
        (("lib", "x86_64"), ("usr", "lib", "x86_64")),
        (("escape", "pwned"), ("tmp", "outside", "pwned")),  # an absolute target: the root's
        (("up", "etc"), ("etc",)),  # `..` stops at the root
        (("lib", "up", "etc"), ("etc",)),
        (("abs",), ("usr", "lib")),
        ((), ()),
    ],
)
def test_links_on_the_way_are_followed_inside_the_root_only(parts: Parts, lands: Parts) -> None:
    assert in_root(parts, LINKS.get) == lands


def test_a_member_replaces_a_link_of_its_name_instead_of_writing_through_it() -> None:
    assert landing(("lib",), LINKS.get) == ("lib",)
    assert landing(("escape",), LINKS.get) == ("escape",)
    assert landing(("lib", "libc.so"), LINKS.get) == ("usr", "lib", "libc.so")
    assert landing((), LINKS.get) == ()


@pytest.mark.parametrize("parts", [("loop", "x"), ("a", "x")])
def test_a_loop_of_links_is_refused(parts: Parts) -> None:
    with pytest.raises(InputError, match="more than 40 symbolic links"):
        in_root(parts, LINKS.get)


def test_folders_are_finished_deepest_first_in_one_order() -> None:
    paths: list[Parts] = [(), ("b",), ("a", "x"), ("a",), ("b", "y", "z")]
    assert depth_first(paths) == [("b", "y", "z"), ("a", "x"), ("a",), ("b",), ()]
    assert depth_first(list(reversed(paths))) == depth_first(paths)
