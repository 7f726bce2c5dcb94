"""`imagekit build`'s choices and the decisions made from them: the builder (guessed before the
engine is asked, chosen once it is known), the BuildKit-only options, the request's settings
reaching the builder as they are, and `build_images` asking the world in that order."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from imagekit.adapters.results import RunFolder
from imagekit.build.context import ContextInputs
from imagekit.build.inputs import RenderInputs
from imagekit.build.options import (
    BuilderCause,
    BuilderChoice,
    BuildkitAsk,
    BuildNetwork,
    Compression,
    builder_refusal,
    guess_buildx,
    pick_builder,
)
from imagekit.build.outcome import missing_parent, summary
from imagekit.build.ports import Builder, BuildOutcome, BuildRequest, LineSink
from imagekit.build.render import RenderOptions
from imagekit.build.requests import BootstrapCommand, BuildCommand, BuildSettings
from imagekit.build.security import SecuritySource
from imagekit.build.use_case import build_images
from imagekit.errors import EngineUnavailableError, InputError
from imagekit.events import Event, EventSink
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.records import BuildRecord, BuildStatus
from imagekit.kernel.vocabulary import BuilderName, EngineName, ImageStore
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.matrix.selection import Selection
from tests.fakes import FakeEngine, FakeIndexes

ROOT = Path(__file__).resolve().parents[3]
CPU_BASE = "imagekit-base/debian:bookworm"


PLUGIN = "0.13.1"  # the buildx plugin's version, as `docker buildx version` gives it
DOCKER = EngineInfo(server_version="26.1.5", api_version="1.45")
PODMAN = EngineInfo(server_version="4.3.1", api_version="1.41", name=EngineName.PODMAN)
OLD_DOCKER = EngineInfo(server_version="18.06.3", api_version="1.38")


# The closed sets ----------------------------------------------------------------------------


def test_the_choices_are_the_values_the_command_line_takes() -> None:
    assert [c.value for c in BuilderChoice] == ["sdk", "buildx", "auto"]
    assert [c.value for c in Compression] == ["gzip", "zstd"]
    assert [c.value for c in BuildNetwork] == ["default", "none"]


def test_the_default_network_asks_the_builder_for_none() -> None:
    assert BuildNetwork.DEFAULT.mode is None
    assert BuildNetwork.NONE.mode == "none"


def test_a_build_status_is_ok_when_built_or_up_to_date() -> None:
    assert [s for s in BuildStatus if s.ok] == [BuildStatus.BUILT, BuildStatus.UP_TO_DATE]


def test_a_build_record_takes_its_status_as_text_and_keeps_it_as_text_in_json() -> None:
    record = BuildRecord(
        name="a", reference="r", flavour="slim", status="up-to-date", message="", duration_s=0
    )
    assert record.status is BuildStatus.UP_TO_DATE and record.ok
    assert record.to_json()["status"] == "up-to-date"


# The BuildKit-only options ------------------------------------------------------------------


def test_buildkit_options_are_named_as_on_the_command_line() -> None:
    assert BuildkitAsk().wants == []
    ask = BuildkitAsk("r/from", "r/to", Compression.ZSTD)
    assert ask.wants == ["--cache-from", "--cache-to", "--compression zstd"]


def test_the_request_refuses_buildkit_options_with_the_sdk_builder(tmp_path: Path) -> None:
    sdk = BuilderChoice.SDK
    with pytest.raises(InputError, match="--compression gzip need BuildKit"):
        BuildCommand(Selection(), BuildSettings(sdk, compression=Compression.GZIP), RenderInputs())
    # The default, auto, takes them: refused once the engine is known if it has no BuildKit.
    assert BuildSettings(compression=Compression.GZIP).builder is BuilderChoice.AUTO


# The builder ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "plugin", "guess"),
    [
        (BuilderChoice.SDK, PLUGIN, False),
        (BuilderChoice.BUILDX, None, True),  # refused once the engine is known
        (BuilderChoice.AUTO, PLUGIN, True),
        (BuilderChoice.AUTO, None, False),
    ],
)
def test_the_guess_before_the_engine_is_buildx_where_asked_or_where_auto_finds_the_plugin(
    choice: BuilderChoice, plugin: str | None, guess: bool
) -> None:
    assert guess_buildx(choice, plugin) is guess


def test_auto_is_the_default_builder() -> None:
    assert BuildSettings().builder is BuilderChoice.AUTO


@pytest.mark.parametrize(
    ("choice", "plugin", "engine", "builder", "cause", "line"),
    [
        (
            BuilderChoice.AUTO, PLUGIN, DOCKER, BuilderName.BUILDX, BuilderCause.PLUGIN,
            "builder: buildx (BuildKit: the buildx plugin 0.13.1 on Docker 26.1.5)",
        ),
        (
            BuilderChoice.AUTO, None, DOCKER, BuilderName.SDK, BuilderCause.NO_PLUGIN,
            "builder: sdk (legacy: no docker buildx plugin answers (`make engine` installs one))",
        ),
        (
            BuilderChoice.AUTO, PLUGIN, PODMAN, BuilderName.SDK, BuilderCause.NO_BUILDKIT,
            "builder: sdk (legacy: Podman 4.3.1's API has no BuildKit)",
        ),
        (
            BuilderChoice.AUTO, PLUGIN, OLD_DOCKER, BuilderName.SDK, BuilderCause.NO_BUILDKIT,
            "builder: sdk (legacy: Docker 18.06.3's API 1.38 has no BuildKit)",
        ),
        (
            BuilderChoice.SDK, PLUGIN, DOCKER, BuilderName.SDK, BuilderCause.ASKED,
            "builder: sdk (legacy: --builder sdk)",
        ),
        (
            BuilderChoice.BUILDX, PLUGIN, DOCKER, BuilderName.BUILDX, BuilderCause.ASKED,
            "builder: buildx (BuildKit: --builder buildx, the buildx plugin 0.13.1 on Docker "
            "26.1.5)",
        ),
    ],
)  # fmt: skip
def test_the_builder_is_picked_with_the_reason_people_read(
    choice: BuilderChoice,
    plugin: str | None,
    engine: EngineInfo,
    builder: BuilderName,
    cause: BuilderCause,
    line: str,
) -> None:
    pick = pick_builder(choice, plugin=plugin, engine=engine)
    assert (pick.builder, pick.cause, pick.line) == (builder, cause, line)
    assert pick.buildx is (builder is BuilderName.BUILDX)


@pytest.mark.parametrize(
    ("api_version", "has_buildkit"),
    [("1.39", True), ("1.45", True), ("1.38", False), ("1.9", False), (None, True), ("x", True)],
)
def test_docker_has_buildkit_from_api_1_39_and_podman_never(
    api_version: str | None, has_buildkit: bool
) -> None:
    assert EngineInfo(api_version=api_version).has_buildkit is has_buildkit
    assert not EngineInfo(api_version=api_version, name=EngineName.PODMAN).has_buildkit


def test_buildx_is_refused_without_buildkit_or_without_the_plugin() -> None:
    no_api = builder_refusal(
        BuilderChoice.BUILDX, has_buildkit=False, plugin=PLUGIN, engine="Podman 5"
    )
    assert no_api is not None and no_api.message.startswith("Podman 5: its Docker API")
    no_plugin = builder_refusal(
        BuilderChoice.BUILDX, has_buildkit=True, plugin=None, engine="Docker"
    )
    assert no_plugin is not None and "plugin is not installed" in no_plugin.message
    for choice in (BuilderChoice.SDK, BuilderChoice.AUTO):
        assert builder_refusal(choice, has_buildkit=False, plugin=None, engine="") is None


# The settings are the request's own -------------------------------------------------------


def test_settings_take_a_compression_or_network_given_as_text() -> None:
    settings = BuildSettings(
        builder=BuilderChoice.BUILDX,
        compression="gzip",  # type: ignore[arg-type]
        network="none",  # type: ignore[arg-type]
    )
    assert settings.compression is Compression.GZIP and settings.network is BuildNetwork.NONE


# build_images: the order it asks the world in -------------------------------------------------


class OkBuilder:
    name = "ok"

    def __init__(self, engine: FakeEngine, asked: list[BuildRequest]) -> None:
        self.engine, self.asked = engine, asked

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        self.asked.append(request)
        image = "sha256:" + "e" * 64
        self.engine.add(request.reference, image, request.labels)
        return BuildOutcome(True, image)


class Tools:
    """A world of fakes that writes down what was asked of it, in order."""

    def __init__(
        self,
        tmp_path: Path,
        engine: FakeEngine,
        plugin: bool = True,
        driver: str = "docker",
        bad_inputs: bool = False,
    ) -> None:
        self.tmp_path, self.engine, self.plugin, self.driver = tmp_path, engine, plugin, driver
        self.bad_inputs = bad_inputs
        self.asked: list[str] = []
        self.events: list[Event] = []
        self.built: list[BuildRequest] = []

    def render(self, buildkit: bool) -> tuple[RenderOptions, ContextInputs]:
        self.asked.append(f"render buildkit={buildkit}")
        if self.bad_inputs:
            raise InputError("--wheelhouse is empty")
        return RenderOptions(buildkit=buildkit), ContextInputs()

    def buildx_version(self) -> str | None:
        self.asked.append("plugin")
        return PLUGIN if self.plugin else None

    def buildx_driver(self) -> str:
        self.asked.append("driver")
        return self.driver

    def check_results(self) -> None:
        self.asked.append("check results")

    def connect(self) -> FakeEngine:
        self.asked.append("connect")
        return self.engine

    def builder(self, buildkit: bool) -> Builder:
        self.asked.append(f"builder buildkit={buildkit}")
        return OkBuilder(self.engine, self.built)

    def say(self, line: str) -> None:
        self.asked.append(f"say {line}")

    def tidy(self) -> None:
        self.asked.append("tidy")

    def open_run(self) -> RunFolder:
        self.asked.append("open run")
        return RunFolder.create(self.tmp_path / "results")

    @contextmanager
    def view(self) -> Iterator[EventSink]:
        def sink(event: Event) -> None:
            self.events.append(event)

        yield sink

    def security(self) -> SecuritySource:
        return SecuritySource(FakeIndexes({}))


@pytest.fixture
def slim() -> list[ImagePlan]:
    plans = load_matrix(ROOT / "examples" / "cpu.yaml").plans
    return [p for p in plans if p.flavour == "slim"]


def engine(**facts: object) -> FakeEngine:
    fake = FakeEngine(facts=EngineInfo(**facts))  # type: ignore[arg-type]
    fake.add(CPU_BASE, "sha256:" + "b" * 64, labels={L.BASE_SUITE: "bookworm"})  # bootstrapped
    return fake


def test_auto_on_podman_checks_the_inputs_again_for_the_sdk_builder(
    tmp_path: Path, slim: list[ImagePlan]
) -> None:
    tools = Tools(tmp_path, engine(name=EngineName.PODMAN))
    report = build_images(slim, BuildSettings(builder=BuilderChoice.AUTO), tools)
    assert tools.asked == [
        "plugin",
        "render buildkit=True",
        "check results",
        "connect",
        "render buildkit=False",
        "say builder: sdk (legacy: Podman ?'s API has no BuildKit)",
        "tidy",
        "open run",
        "builder buildkit=False",
    ]
    assert [r.status for r in report.results] == [BuildStatus.BUILT] * len(slim)
    assert {(r.builder, r.builder_why) for r in report.results} == {
        (BuilderName.SDK, "legacy: Podman ?'s API has no BuildKit")
    }
    assert report.failed == [] and report.root.parent == tmp_path / "results"


def test_the_request_s_settings_reach_the_builder_as_they_are(
    tmp_path: Path, slim: list[ImagePlan]
) -> None:
    """`build_images` takes the request's settings as they are: no copy to leave one behind."""
    tools = Tools(tmp_path, engine(image_store=ImageStore.CONTAINERD))
    settings = BuildSettings(
        builder=BuilderChoice.BUILDX,
        no_cache=True,
        labels=(("team", "ml"),),
        cache_from="127.0.0.1:5000/cache/from",
        network=BuildNetwork.NONE,
        source_date_epoch=1700000000,
    )
    build_images(slim, settings, tools)
    assert [r.name for r in tools.built] == [p.name for p in slim]
    for plan, asked in zip(slim, tools.built, strict=True):
        assert asked.no_cache and asked.labels["team"] == "ml" and asked.network == "none"
        assert asked.cache_from == f"127.0.0.1:5000/cache/from:{plan.local_tag}"
        assert asked.build_args["SOURCE_DATE_EPOCH"] == "1700000000"


def test_bad_inputs_are_refused_before_the_engine_is_asked(
    tmp_path: Path, slim: list[ImagePlan]
) -> None:
    tools = Tools(tmp_path, engine(), bad_inputs=True)
    with pytest.raises(InputError):
        build_images(slim, BuildSettings(), tools)
    # The plugin is a local program, asked so that the inputs are checked for its builder.
    assert tools.asked == ["plugin", "render buildkit=True"]
    sdk = Tools(tmp_path, engine(), bad_inputs=True)
    with pytest.raises(InputError):
        build_images(slim, BuildSettings(builder=BuilderChoice.SDK), sdk)
    assert sdk.asked == ["render buildkit=False"]


def test_buildx_without_buildkit_is_refused_before_anything_is_built(
    tmp_path: Path, slim: list[ImagePlan]
) -> None:
    tools = Tools(tmp_path, engine(name=EngineName.PODMAN))
    with pytest.raises(EngineUnavailableError, match="has no BuildKit"):
        build_images(slim, BuildSettings(builder=BuilderChoice.BUILDX), tools)
    assert "tidy" not in tools.asked and "open run" not in tools.asked


def test_the_driver_is_asked_only_for_buildkit_options(
    tmp_path: Path, slim: list[ImagePlan]
) -> None:
    plain = Tools(tmp_path, engine(image_store=ImageStore.CONTAINERD))
    build_images(slim, BuildSettings(builder=BuilderChoice.BUILDX), plain)
    assert "driver" not in plain.asked
    forced = Tools(tmp_path, engine(image_store=ImageStore.CLASSIC))
    ask = BuildSettings(builder=BuilderChoice.BUILDX, compression=Compression.ZSTD)
    with pytest.raises(EngineUnavailableError, match="--compression needs buildx's docker"):
        build_images(slim, ask, forced)
    assert "driver" in forced.asked and "open run" not in forced.asked


# What a build came to, in words ---------------------------------------------------------------


def test_a_missing_parent_says_how_to_get_it(slim: list[ImagePlan]) -> None:
    plan = slim[0]
    said = missing_parent(plan, CPU_BASE, "")
    assert said.startswith(f"the base image {CPU_BASE} is not in the engine; pull it with --pull")
    assert missing_parent(plan, CPU_BASE, "denied").endswith(" (pull failed: denied)")


def test_the_summary_of_a_finished_image() -> None:
    built = BuildRecord(
        name="a",
        reference="r",
        flavour="slim",
        status=BuildStatus.BUILT,
        message="built",
        size_bytes=1_500_000_000,
        layer_count=7,
        duration_s=42.4,
    )
    assert summary(built) == "built (1.50 GB, 7 layers, 42s)"
    failed = BuildRecord(
        name="a", reference="r", flavour="slim", status="failed", message="no\nmore", duration_s=1
    )
    assert summary(failed) == "failed: no"


def test_a_base_tag_must_be_name_colon_tag() -> None:
    for tag in ("imagekit-base/debian", "Bad Name:1", "host:5000/base"):
        with pytest.raises(InputError, match="is not NAME:TAG"):
            BootstrapCommand("bookworm", tag)
    assert BootstrapCommand("bookworm", "host:5000/base:bookworm").tag.endswith(":bookworm")
