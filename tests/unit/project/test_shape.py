"""The shape ratchet (scripts/shape.py) counts what it says, on a planted package: each rule
fails on a planted violation and holds without it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shape", ROOT / "scripts" / "shape.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["shape"] = module
    spec.loader.exec_module(module)
    return module


shape = _load()


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"imagekit/__init__.py": "", "imagekit/cli/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _function(name: str, body_lines: int) -> str:
    return f"def {name}():\n" + "".join(f"    x{i} = {i}\n" for i in range(body_lines))


def test_a_clean_package_measures_zero(tmp_path: Path) -> None:
    figures = shape.measure(_plant(tmp_path, {"imagekit/core.py": _function("f", 3)}))
    sized = ("cli_and_requests_lines", "kernel_lines", "readme_lines")
    counted = {k: v.value for k, v in figures.items() if k not in sized}
    assert set(counted.values()) == {0}


def test_long_functions_are_counted_in_and_outside_the_cli(tmp_path: Path) -> None:
    figures = shape.measure(
        _plant(
            tmp_path,
            {
                "imagekit/core.py": _function("long", 60) + _function("short", 59),
                "imagekit/cli/build.py": _function("handler", 31) + _function("thin", 30),
            },
        )
    )
    assert figures["functions_over_60_lines"].value == 1  # 61 lines with its `def`
    assert "imagekit/core.py:1 long" in figures["functions_over_60_lines"].where[0]
    assert figures["cli_functions_over_60_lines"].value == 0
    assert figures["cli_functions_over_30_lines"].value == 1
    assert "handler" in figures["cli_functions_over_30_lines"].where[0]
    assert figures["cli_and_requests_lines"].value == 32 + 31


def test_requests_count_with_the_cli_and_the_kernel_alone(tmp_path: Path) -> None:
    figures = shape.measure(
        _plant(
            tmp_path,
            {
                "imagekit/cli/a.py": "x = 1\n" * 3,
                "imagekit/build/requests.py": "x = 1\n" * 5,
                "imagekit/kernel/options.py": "x = 1\n" * 7,
                "imagekit/kernel/labels.py": "x = 1\n" * 11,
                "imagekit/build/render.py": "x = 1\n" * 13,
            },
        )
    )
    assert figures["cli_and_requests_lines"].value == 3 + 5 + 7
    assert figures["kernel_lines"].value == 7 + 11


def test_a_vocabulary_value_compared_as_text_is_counted(tmp_path: Path) -> None:
    vocabulary = (
        "from enum import StrEnum\nclass Flavour(StrEnum):\n    SLIM = 'slim'\n    FULL = 'full'\n"
    )
    code = (
        "def f(p, q):\n"
        "    a = p.flavour == 'slim'\n"
        "    b = q in ('full', 'other')\n"
        "    c = p.name == 'slim-ish'\n"
        "    d = p.flavour == Flavour.SLIM\n"
        "    e = 'slim' in p.labels or 'full' not in p.name\n"
        "    f = p.flavour != 'other' != 'full'\n"
        "    return a, b, c, d, e, f\n"
    )
    figures = shape.measure(
        _plant(tmp_path, {"imagekit/kernel/vocabulary.py": vocabulary, "imagekit/a.py": code})
    )
    where = figures["vocabulary_string_compares"].where
    assert where == ["imagekit/a.py:2", "imagekit/a.py:3", "imagekit/a.py:7"]


def test_any_is_counted_as_a_name_in_code_only(tmp_path: Path) -> None:
    code = "from typing import Any\n# Any in a comment\nx: Any = 'Any'\n"
    figures = shape.measure(_plant(tmp_path, {"imagekit/a.py": code}))
    assert figures["any_tokens"].value == 2


def test_a_docstring_does_not_count_in_a_handler_s_body(tmp_path: Path) -> None:
    text = 'def f():\n    """Doc.\n\n    More.\n    """\n' + "".join(
        f"    x{i} = 1\n" for i in range(30)
    )
    figures = shape.measure(_plant(tmp_path, {"imagekit/cli/a.py": text}))
    assert figures["cli_functions_over_30_lines"].value == 0


def test_big_modules_untyped_dicts_and_model_copy_updates_are_counted(tmp_path: Path) -> None:
    big = "x = 1\n" * 401
    patched = (
        "r = r.model_copy(update={'a': 1})\nr = r.model_copy(\n    update={})\nr.model_copy()\n"
    )
    figures = shape.measure(
        _plant(
            tmp_path,
            {
                "imagekit/big.py": big,
                "imagekit/small.py": "x = 1\n" * 400,
                "imagekit/typed.py": (
                    "from typing import Any\nd: dict[str, Any] = {}\ne: dict[str, object] = {}\n"
                    "def f(m: Mapping[str, Any], n: Mapping[str, str]) -> None: ...\n"
                ),
                "imagekit/records.py": patched,
            },
        )
    )
    assert figures["modules_over_400_lines"].value == 1
    assert figures["untyped_dicts"].value == 3
    assert figures["model_copy_update"].value == 2


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("from imagekit import b\n", "from imagekit import a\n"),
        ("from . import b\n", "from .a import something\n"),  # relative imports resolved
        ("import imagekit.b\n", "def f():\n    from imagekit.a import g\n"),  # in a function
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from imagekit.b import B\n",
            "from imagekit.a import A\n",
        ),
    ],
    ids=["absolute", "relative", "in-a-function", "type-checking"],
)
def test_an_import_circle_is_found(tmp_path: Path, a: str, b: str) -> None:
    root = _plant(tmp_path, {"imagekit/a.py": a, "imagekit/b.py": b})
    cycles = shape.measure(root)["import_cycles"]
    assert cycles.value == 1
    assert cycles.where == ["imagekit.a <-> imagekit.b"]


def test_a_package_listing_its_submodules_is_no_circle(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "imagekit/sub/__init__.py": "from imagekit.sub import leaf\n",
            "imagekit/sub/leaf.py": "x = 1\n",
            "imagekit/user.py": "from imagekit.sub.leaf import x\n",
        },
    )
    assert shape.measure(root)["import_cycles"].value == 0


def test_a_figure_above_its_limit_fails_naming_what_counts() -> None:
    figures = {"untyped_dicts": shape.Figure(3, ["imagekit/a.py (3)"])}
    problems = shape.check(figures, {"untyped_dicts": 2})
    assert len(problems) == 1
    assert "above its limit 2" in problems[0] and "imagekit/a.py (3)" in problems[0]


def test_a_figure_below_its_limit_asks_for_the_limit_to_come_down() -> None:
    problems = shape.check({"untyped_dicts": shape.Figure(1)}, {"untyped_dicts": 2})
    assert len(problems) == 1 and "Lower the limit to 1" in problems[0]
    assert shape.check({"untyped_dicts": shape.Figure(2)}, {"untyped_dicts": 2}) == []


def test_a_ceiling_fails_above_and_holds_below() -> None:
    assert shape.check({"kernel_lines": shape.Figure(1500)}, {"kernel_lines": 2000}) == []
    problems = shape.check({"kernel_lines": shape.Figure(2001)}, {"kernel_lines": 2000})
    assert len(problems) == 1 and "above its limit 2000" in problems[0]


def test_a_figure_without_a_limit_and_a_stale_limit_fail() -> None:
    problems = shape.check({"new": shape.Figure(0)}, {"gone": 1})
    assert any("new = 0 has no limit" in p for p in problems)
    assert any("gone: a limit for no figure" in p for p in problems)
