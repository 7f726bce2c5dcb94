"""The committed JSON Schemas: of matrix.yaml (up to date; accepts and rejects what it should)
and of a results record (up to date; the records imagekit writes validate against it)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from imagekit.adapters.results import RunFolder
from imagekit.build.context import ContextInputs
from imagekit.build.ports import BuildOutcome, BuildRequest, LineSink
from imagekit.build.render import RenderOptions, image_labels
from imagekit.build.use_case import BuildContexts, BuildRun, BuildSettings
from imagekit.kernel.records import ImageRecord, results_schema, results_schema_text
from imagekit.matrix.compat import load_compat
from imagekit.matrix.load import load_matrix
from imagekit.matrix.schema import MatrixFile, json_schema
from imagekit.resources import probes_dir
from imagekit.verify.requests import VerifySettings
from imagekit.verify.run import VerifyRun
from imagekit.verify.settings import Target
from tests.fakes import Events, FakeEngine, FakeInspector, FakeProbeRunner, image_id

REPO = Path(__file__).resolve().parents[3]
SCHEMA_FILE = REPO / "imagekit" / "data" / "matrix.schema.json"
RESULTS_SCHEMA_FILE = REPO / "imagekit" / "data" / "results.schema.json"
DEFAULT_MATRIX = REPO / "matrix.yaml"

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def committed_schema() -> Doc:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator(committed_schema: Doc) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(committed_schema)


@pytest.fixture
def matrix() -> Doc:
    """A fresh copy of the default matrix.yaml, as a YAML loader sees it."""
    return copy.deepcopy(_default_matrix())


def _default_matrix() -> Doc:
    doc = yaml.safe_load(DEFAULT_MATRIX.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def _errors(validator: jsonschema.Draft202012Validator, doc: Doc) -> list[tuple[str, str]]:
    return [(e.json_path, e.message) for e in validator.iter_errors(doc)]


def test_committed_schema_is_what_imagekit_generates(committed_schema: Doc) -> None:
    assert committed_schema == json_schema(), (
        "imagekit/data/matrix.schema.json is out of date; run `make schema`"
    )


def test_committed_schema_is_a_valid_draft_2020_12_schema(committed_schema: Doc) -> None:
    assert committed_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(committed_schema)


def test_default_matrix_points_editors_at_the_committed_schema() -> None:
    first_line = DEFAULT_MATRIX.read_text(encoding="utf-8").splitlines()[0]
    assert first_line == "# yaml-language-server: $schema=imagekit/data/matrix.schema.json"


def test_default_matrix_validates(validator: jsonschema.Draft202012Validator, matrix: Doc) -> None:
    assert _errors(validator, matrix) == []


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(key: str) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        del doc[key]

    return mutate


def _exclude_only(exclusion: Doc) -> Callable[[Doc], None]:
    def mutate(doc: Doc) -> None:
        doc["exclude"] = [exclusion]

    return mutate


# (what is wrong, how to break the default matrix, where the schema reports it, what it says)
INVALID = [
    pytest.param(
        _set(("colour",), "blue"),
        "$",
        "Additional properties are not allowed ('colour' was unexpected)",
        id="unknown-top-level-key",
    ),
    pytest.param(
        _set(("releases", 0, "cuda"), [12.6, 12.8]),
        "$.releases[0].cuda[0]",
        "12.6 is not of type 'string'",
        id="cuda-as-list-of-numbers",
    ),
    pytest.param(
        _delete("releases"),
        "$",
        "'releases' is a required property",
        id="missing-releases",
    ),
    pytest.param(
        _exclude_only({"torch": "2.9.1", "cuda": "13.0"}),
        "$.exclude[0]",
        "'reason' is a required property",
        id="exclusion-without-reason",
    ),
    pytest.param(
        _set(("releases",), []),
        "$.releases",
        "[] should be non-empty",
        id="empty-releases",
    ),
    pytest.param(
        _set(("releases", 0, "torch"), "2.7"),
        "$.releases[0].torch",
        "'2.7' does not match '^\\\\d+\\\\.\\\\d+\\\\.\\\\d+$'",
        id="torch-without-patch-version",
    ),
]


@pytest.mark.parametrize(("break_it", "where", "message"), INVALID)
def test_schema_rejects_invalid_matrix(
    validator: jsonschema.Draft202012Validator,
    matrix: Doc,
    break_it: Callable[[Doc], None],
    where: str,
    message: str,
) -> None:
    break_it(matrix)
    assert (where, message) in _errors(validator, matrix)


@pytest.mark.parametrize(("break_it", "where", "message"), INVALID)
def test_models_reject_what_the_schema_rejects(
    matrix: Doc, break_it: Callable[[Doc], None], where: str, message: str
) -> None:
    break_it(matrix)
    with pytest.raises(ValidationError):
        MatrixFile.model_validate(matrix)


# `python` is one version or a list of them, in `defaults` and in each entry.
PYTHON_ACCEPTED = [
    pytest.param(("defaults", "python"), "3.12", id="defaults-string"),
    pytest.param(("defaults", "python"), ["3.11", "3.12"], id="defaults-list"),
    pytest.param(("releases", 0, "python"), "3.12", id="entry-string"),
    pytest.param(("releases", 0, "python"), ["3.12"], id="entry-list"),
]


@pytest.mark.parametrize(("path", "value"), PYTHON_ACCEPTED)
def test_schema_accepts_python_as_string_or_list(
    validator: jsonschema.Draft202012Validator,
    matrix: Doc,
    path: tuple[str | int, ...],
    value: Any,
) -> None:
    _set(path, value)(matrix)
    assert _errors(validator, matrix) == []
    MatrixFile.model_validate(matrix)


# YAML turns an unquoted `python: 3.12` into a float and `3.10` into 3.1; the schema says no.
PYTHON_REJECTED = [
    pytest.param(3.12, id="float"),
    pytest.param([3.11, 3.12], id="list-of-floats"),
    pytest.param([], id="empty-list"),
    pytest.param("3", id="major-only"),
]


@pytest.mark.parametrize("value", PYTHON_REJECTED)
def test_schema_rejects_python_that_is_not_a_major_minor_string(
    validator: jsonschema.Draft202012Validator, matrix: Doc, value: Any
) -> None:
    _set(("releases", 0, "python"), value)(matrix)
    errors = _errors(validator, matrix)
    assert errors, f"python: {value!r} was accepted"
    assert {where for where, _ in errors} == {"$.releases[0].python"}
    with pytest.raises(ValidationError):
        MatrixFile.model_validate(matrix)


# The results record ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def results_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(RESULTS_SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def test_committed_results_schema_is_what_imagekit_generates() -> None:
    assert RESULTS_SCHEMA_FILE.read_text(encoding="utf-8") == results_schema_text(), (
        "imagekit/data/results.schema.json is out of date; run `make schema`"
    )


def test_committed_results_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = results_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


class InstantBuilder:
    """Builds at once: the image lands in the engine with the labels its Dockerfile gives it;
    the image named `fail` fails."""

    name = "instant"

    def __init__(self, engine: FakeEngine, labels: dict[str, str], fail: str) -> None:
        self.engine, self.labels, self.fail = engine, labels, fail

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        request.log_path.write_text("Step 1/1 : FROM base\n", encoding="utf-8")
        if request.name == self.fail:
            return BuildOutcome(False, None, "The command returned a non-zero code: 1")
        built = image_id(request.reference)
        self.engine.add(request.reference, built, {**self.labels, **request.labels}, 900_000_000)
        return BuildOutcome(True, built)


def test_the_records_imagekit_writes_validate_against_the_results_schema(
    tmp_path: Path, results_validator: jsonschema.Draft202012Validator
) -> None:
    slim, full = load_matrix(REPO / "examples" / "cpu.yaml").plans
    engine = FakeEngine()
    engine.add("imagekit-base/debian:bookworm", image_id("base"))
    builder = InstantBuilder(engine, image_labels(slim, RenderOptions()), fail=full.name)
    contexts = BuildContexts(RenderOptions(), ContextInputs())
    builds = RunFolder.create(tmp_path / "results", "build")
    BuildRun(engine, builder, [slim, full], BuildSettings(), contexts, builds, Events()).execute()
    verifies = RunFolder.create(tmp_path / "results", "verify")
    facts = {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2"}
    VerifyRun.of(
        engine,
        FakeProbeRunner(env_facts=facts),
        FakeInspector(failing=("no setuid binaries",)),
        verifies,
        VerifySettings(probes_dir=probes_dir()),
        Events(),
        load_compat(),
    ).execute([Target(slim.name, slim.reference, slim.required_probes)])

    files = sorted((tmp_path / "results").glob("*/images/*.json"))
    assert len(files) == 3  # slim built, full failed, slim verified
    for path in files:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert list(results_validator.iter_errors(record)) == [], path
    built, verified = builds.read_image(slim.name), verifies.read_image(slim.name)
    assert built is not None and verified is not None
    whole = ImageRecord(plan=built.plan, build=built.build, verify=verified.verify)
    assert sorted(whole.to_json()) == ["build", "plan", "verify"]
    assert list(results_validator.iter_errors(whole.to_json())) == []


def test_the_results_schema_rejects_what_is_not_a_record(
    results_validator: jsonschema.Draft202012Validator,
) -> None:
    assert list(results_validator.iter_errors({}))  # a record has at least one section
    assert list(results_validator.iter_errors({"verify": {"status": "pass"}}))
    assert list(results_validator.iter_errors({"colour": "blue"}))
