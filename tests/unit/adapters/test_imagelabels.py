"""doctor --image's labels: from the local engine, else the registry; and when neither can say,
whose trouble it is (an engine that does not answer is exit 3, never "not in the engine")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from imagekit.adapters import engine as engine_adapter
from imagekit.adapters import imagelabels, registry, registry_api
from imagekit.errors import EngineUnavailableError, ExitCode, InputError, RegistryError

REFERENCE = "ghcr.io/acme/pytorch:2.13.0-cpu-py3.11-slim"


def no_engine() -> object:
    raise EngineUnavailableError("no engine answers at unix:///var/run/docker.sock", "make engine")


def empty_engine() -> object:
    return SimpleNamespace(local_image=lambda reference: None)


def registry_down(*args: object, **kwargs: object) -> object:
    raise RegistryError("connection refused")


@pytest.fixture(autouse=True)
def _no_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "registry_auth", lambda host: None)


@pytest.mark.parametrize(
    ("engine", "config", "kind", "code", "said"),
    [
        (no_engine, registry_down, EngineUnavailableError, ExitCode.ENGINE_UNAVAILABLE,
         "could not look for image"),
        (no_engine, lambda *a, **k: None, EngineUnavailableError, ExitCode.ENGINE_UNAVAILABLE,
         "could not look for image"),
        (empty_engine, registry_down, InputError, ExitCode.BAD_INPUT,
         "is not in the local engine, and its registry ghcr.io did not answer"),
        (empty_engine, lambda *a, **k: None, InputError, ExitCode.BAD_INPUT,
         "is neither in the local engine nor in its registry"),
    ],
    ids=["engine-down-registry-down", "engine-down-registry-lacks-it", "not-here-registry-down",
         "nowhere"],
)  # fmt: skip
def test_whose_trouble_it_is_when_no_one_has_the_labels(
    monkeypatch: pytest.MonkeyPatch,
    engine: object,
    config: object,
    kind: type[Exception],
    code: ExitCode,
    said: str,
) -> None:
    monkeypatch.setattr(engine_adapter, "open_engine", engine)
    monkeypatch.setattr(registry_api, "remote_config", config)
    with pytest.raises(kind) as caught:
        imagelabels.labels_of(REFERENCE)
    error = caught.value
    assert isinstance(error, InputError | EngineUnavailableError)
    assert error.exit_code == code
    assert said in error.message and REFERENCE in error.message
    if code == ExitCode.ENGINE_UNAVAILABLE:
        assert "no engine answers at unix:///var/run/docker.sock" in error.message
        assert error.hint == "make engine"


def test_the_registry_answers_when_the_engine_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_adapter, "open_engine", no_engine)
    config = {"config": {"Labels": {"io.imagekit.torch": "2.13.0"}}}
    monkeypatch.setattr(registry_api, "remote_config", lambda *a, **k: config)
    assert imagelabels.labels_of(REFERENCE) == {"io.imagekit.torch": "2.13.0"}
