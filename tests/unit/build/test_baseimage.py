"""Base bootstrap: suites, the mmdebstrap command, the image config and the docker-archive.

mmdebstrap never runs here: `bootstrap` is driven with a stand-in that writes a tiny
root filesystem tar, and an engine stand-in that only reads the archive it is given.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.adapters import baseimage
from imagekit.adapters.baseimage import (
    DEBIAN_SUITES,
    UBUNTU_SUITES,
    BootstrapError,
    _docker_archive,
    bootstrap,
    distribution,
    image_config,
    mmdebstrap_command,
)
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.rootfs_cache import RootfsCache, release_url, rootfs_key
from imagekit.build.distro_packages import BASE_PACKAGES
from imagekit.build.requests import BootstrapCommand
from imagekit.errors import InputError
from imagekit.kernel import labels as L

TAG = "imagekit-base/debian:bookworm"
CREATED = "2023-11-14T22:13:20Z"


def rootfs_tar(path: Path, mtime: float | None = None) -> Path:
    """A tiny root filesystem tar with fixed member metadata."""
    with tarfile.open(path, "w") as archive:
        for name, data in [("etc/os-release", b"ID=debian\n"), ("bin/true", b"\x7fELF")]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            archive.addfile(info, io.BytesIO(data))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {
            m.name: archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.isfile()
        }


# Suites -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "suite,expected",
    [
        ("bullseye", "debian"),
        ("bookworm", "debian"),
        ("trixie", "debian"),
        ("sid", "debian"),
        ("jammy", "ubuntu"),
        ("noble", "ubuntu"),
    ],
)
def test_distribution_of_known_suites(suite: str, expected: str) -> None:
    assert distribution(suite) == expected


@pytest.mark.parametrize("suite", ["xenial", "Bookworm", "debian-12", ""])
def test_unknown_suite_is_an_input_error_listing_the_known_suites(suite: str) -> None:
    with pytest.raises(InputError) as caught:
        distribution(suite)

    assert repr(suite) in caught.value.message
    for known in DEBIAN_SUITES | UBUNTU_SUITES:
        assert known in caught.value.hint


# The mmdebstrap command -----------------------------------------------------------


SECURITY = "http://deb.debian.org/debian-security"
DEBIAN = "http://deb.debian.org/debian"
SNAPSHOT = "http://snapshot.debian.org/archive/debian/20250101T000000Z"


@pytest.mark.parametrize(
    "request_,mirror,security",
    [
        (
            BootstrapCommand("bookworm", TAG),
            "http://deb.debian.org/debian",
            f"deb {SECURITY} bookworm-security main",
        ),
        (
            BootstrapCommand("noble", "base/ubuntu:noble"),
            "http://archive.ubuntu.com/ubuntu",
            "deb http://security.ubuntu.com/ubuntu noble-security main",
        ),
        (BootstrapCommand("bookworm", TAG, mirror=SNAPSHOT), SNAPSHOT, None),
        (
            BootstrapCommand(
                "bookworm",
                TAG,
                mirror=SNAPSHOT,
                security_mirror="http://snapshot.debian.org/archive/debian-security/20250101T000000Z/",
            ),
            SNAPSHOT,
            "deb http://snapshot.debian.org/archive/debian-security/20250101T000000Z"
            " bookworm-security main",
        ),
        (
            BootstrapCommand("bookworm", TAG, security_mirror="none"),
            "http://deb.debian.org/debian",
            None,
        ),
        (BootstrapCommand("sid", TAG), "http://deb.debian.org/debian", None),
    ],
    ids=[
        "debian-default",
        "ubuntu-default",
        "explicit-mirror",
        "explicit-mirror-and-security",
        "security-none",
        "sid-has-none",
    ],
)
def test_mmdebstrap_command_writes_a_tar_of_the_suite_and_its_security_suite(
    request_: BootstrapCommand, mirror: str, security: str | None
) -> None:
    """The security suite is a second source (its fixes installed, and kept in the base's apt
    sources) unless a mirror of one's own is given alone, `none` is asked, or there is none."""
    command = mmdebstrap_command(request_, Path("/tmp/out/rootfs.tar"))

    assert command[0] == "mmdebstrap"
    assert "--format=tar" in command
    assert "--variant=minbase" in command
    assert "--include=python3,python3-venv,ca-certificates" in command
    tail = [request_.suite, "/tmp/out/rootfs.tar", mirror, *([security] if security else [])]
    assert command[-len(tail) :] == tail
    label = json.loads(image_config(request_, "0" * 64, CREATED))["config"]["Labels"]
    assert label[L.BASE_SECURITY] == (security.split()[2] if security else "none")


def test_mmdebstrap_command_takes_the_variant_and_packages_asked_for() -> None:
    request = BootstrapCommand("trixie", TAG, include=("python3", "git"), variant="apt")

    command = mmdebstrap_command(request, Path("rootfs.tar"))

    assert "--variant=apt" in command
    assert "--include=python3,git" in command


def test_bases_leave_out_docs_but_keep_copyright_files_unless_asked() -> None:
    slim = mmdebstrap_command(BootstrapCommand("bookworm", TAG), Path("r.tar"))
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in slim
    assert "--dpkgopt=path-include=/usr/share/doc/*/copyright" in slim
    assert slim.index("--dpkgopt=path-exclude=/usr/share/doc/*") < slim.index(
        "--dpkgopt=path-include=/usr/share/doc/*/copyright"
    )  # dpkg applies the last matching rule
    with_docs = mmdebstrap_command(BootstrapCommand("bookworm", TAG, docs=True), Path("r.tar"))
    assert not any(arg.startswith("--dpkgopt") for arg in with_docs)


def test_mmdebstrap_command_has_no_include_when_no_packages_are_asked_for() -> None:
    command = mmdebstrap_command(BootstrapCommand("bookworm", TAG, include=()), Path("r.tar"))

    assert not any(arg.startswith("--include") for arg in command)


def test_mmdebstrap_command_for_an_unknown_suite_is_refused() -> None:
    with pytest.raises(InputError, match="unknown suite 'buster'"):
        mmdebstrap_command(BootstrapCommand("buster", TAG), Path("r.tar"))


# The image config ---------------------------------------------------------------


def test_image_config_is_byte_identical_for_the_same_inputs() -> None:
    request = BootstrapCommand("bookworm", TAG)

    assert image_config(request, "ab" * 32, CREATED) == image_config(request, "ab" * 32, CREATED)


@pytest.mark.parametrize(
    "changed",
    [
        (BootstrapCommand("trixie", TAG), "ab" * 32, CREATED),
        (BootstrapCommand("bookworm", TAG, include=("python3",)), "ab" * 32, CREATED),
        (BootstrapCommand("bookworm", TAG), "cd" * 32, CREATED),
        (BootstrapCommand("bookworm", TAG), "ab" * 32, "2024-01-01T00:00:00Z"),
    ],
    ids=["suite", "include", "layer", "created"],
)
def test_image_config_changes_with_each_input(
    changed: tuple[BootstrapCommand, str, str],
) -> None:
    assert image_config(*changed) != image_config(
        BootstrapCommand("bookworm", TAG), "ab" * 32, CREATED
    )


def test_image_config_describes_one_layer_with_python_friendly_defaults() -> None:
    config = json.loads(image_config(BootstrapCommand("bookworm", TAG), "ab" * 32, CREATED))

    assert config["created"] == CREATED
    assert config["history"][0]["created"] == CREATED
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + "ab" * 32]}
    assert config["config"]["Cmd"] == ["bash"]
    assert "LANG=C.UTF-8" in config["config"]["Env"]
    assert config["config"]["Labels"]["io.imagekit.base.suite"] == "bookworm"
    assert config["config"]["Labels"]["io.imagekit.base.include"] == ",".join(BASE_PACKAGES)


# The docker-archive ---------------------------------------------------------------


def test_docker_archive_image_id_is_the_sha256_of_its_config(tmp_path: Path) -> None:
    rootfs = rootfs_tar(tmp_path / "rootfs.tar")
    layer_sha = sha256(rootfs.read_bytes())
    config = image_config(BootstrapCommand("bookworm", TAG), layer_sha, CREATED)

    image_id = _docker_archive(rootfs, config, TAG, tmp_path / "image.tar")

    files = read_archive(tmp_path / "image.tar")
    (manifest,) = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == [TAG]
    assert image_id == "sha256:" + sha256(files[manifest["Config"]])
    assert files[manifest["Config"]] == config
    (layer,) = manifest["Layers"]
    # The engine checks the layer against the config's diff_id when it loads it.
    assert "sha256:" + sha256(files[layer]) == json.loads(config)["rootfs"]["diff_ids"][0]


def test_docker_archive_ids_are_identical_for_identical_inputs(tmp_path: Path) -> None:
    # Same content, different file times: as two mmdebstrap runs with SOURCE_DATE_EPOCH.
    first = rootfs_tar(tmp_path / "a.tar", mtime=1_000_000)
    second = rootfs_tar(tmp_path / "b.tar", mtime=2_000_000)
    config = image_config(BootstrapCommand("bookworm", TAG), sha256(first.read_bytes()), CREATED)

    one = _docker_archive(first, config, TAG, tmp_path / "one.tar")
    two = _docker_archive(second, config, TAG, tmp_path / "two.tar")

    assert one == two
    assert read_archive(tmp_path / "one.tar") == read_archive(tmp_path / "two.tar")


# bootstrap, with stand-ins for mmdebstrap and the engine ---------------------------


class FakeApi:
    def __init__(self, answer: list[dict[str, Any]]) -> None:
        self.answer = answer
        self.loaded: bytes | None = None

    def load_image(self, data: Any, quiet: bool = False) -> Any:
        self.loaded = data.read()
        return iter(self.answer)


def fake_mmdebstrap(
    monkeypatch: pytest.MonkeyPatch, returncode: int = 0, stderr: str = ""
) -> list[dict[str, Any]]:
    """Stand in for mmdebstrap; returns the list its calls are recorded in."""
    calls: list[dict[str, Any]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append({"command": command, **kwargs})
        if returncode == 0:
            rootfs_tar(Path(next(a for a in command if a.endswith(".tar"))))
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(baseimage.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(baseimage.subprocess, "run", run)
    return calls


def loaded_config(api: FakeApi, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    assert api.loaded is not None
    (tmp_path / "loaded.tar").write_bytes(api.loaded)
    files = read_archive(tmp_path / "loaded.tar")
    (manifest,) = json.loads(files["manifest.json"])
    config = files[manifest["Config"]]
    return "sha256:" + sha256(config), json.loads(config)


def test_bootstrap_loads_the_archive_and_returns_its_image_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_mmdebstrap(monkeypatch)
    api = FakeApi([{"stream": f"Loaded image: {TAG}\n"}])
    request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_700_000_000)

    image_id = bootstrap(DockerEngine(SimpleNamespace(api=api)), request)  # type: ignore[arg-type]

    config_id, config = loaded_config(api, tmp_path)
    assert image_id == config_id
    assert config["created"] == CREATED  # from SOURCE_DATE_EPOCH, not the clock
    (call,) = calls
    assert call["env"]["SOURCE_DATE_EPOCH"] == "1700000000"
    assert call["command"][-4:-2] == ["bookworm", str(call["command"][-3])]
    assert call["command"][-1] == f"deb {SECURITY} bookworm-security main"


def test_bootstrap_twice_with_the_same_epoch_gives_the_same_image_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_mmdebstrap(monkeypatch)
    request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_700_000_000)

    ids = {
        bootstrap(DockerEngine(SimpleNamespace(api=FakeApi([]))), request)  # type: ignore[arg-type]
        for _ in range(2)
    }

    assert len(ids) == 1


def test_bootstrap_without_mmdebstrap_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(baseimage.shutil, "which", lambda name: None)

    with pytest.raises(InputError, match="mmdebstrap is not installed") as caught:
        bootstrap(DockerEngine(SimpleNamespace(api=FakeApi([]))), BootstrapCommand("bookworm", TAG))  # type: ignore[arg-type]

    assert "apt-get install mmdebstrap" in caught.value.hint


def test_bootstrap_failure_of_mmdebstrap_shows_its_last_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stderr = "\n".join(f"I: line {i}" for i in range(40)) + "\nE: cannot reach the mirror"
    fake_mmdebstrap(monkeypatch, returncode=25, stderr=stderr)
    api = FakeApi([])

    with pytest.raises(BootstrapError) as caught:
        bootstrap(DockerEngine(SimpleNamespace(api=api)), BootstrapCommand("bookworm", TAG))  # type: ignore[arg-type]

    message = caught.value.message
    assert message.startswith("mmdebstrap failed for bookworm (exit 25):")
    assert message.splitlines()[-1] == "E: cannot reach the mirror"
    assert "I: line 0" not in message.splitlines()
    assert "--mirror" in caught.value.hint
    assert api.loaded is None


def test_bootstrap_fails_when_the_engine_refuses_the_archive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docker-py does not raise for an error reported inside the load stream.
    fake_mmdebstrap(monkeypatch)
    refused = "archive/tar: invalid tar header"
    api = FakeApi([{"errorDetail": {"message": refused}, "error": refused}])

    with pytest.raises(BootstrapError, match=refused):
        bootstrap(DockerEngine(SimpleNamespace(api=api)), BootstrapCommand("bookworm", TAG))  # type: ignore[arg-type]


# The root filesystem cache: mmdebstrap runs once per mirror state --------------------------


def cache_with(folder: Path, indexes: dict[str, bytes | None], keep: int = 4) -> RootfsCache:
    """A cache whose mirror answers with `indexes[url]` (None: it does not answer)."""
    return RootfsCache(folder, release=lambda url: indexes.get(url), keep=keep)


INDEX = "http://deb.debian.org/debian/dists/bookworm/InRelease"
SECURITY_INDEX = f"{SECURITY}/dists/bookworm-security/InRelease"
BOTH = {INDEX: b"Date: Sat, 05 Dec 2026\n", SECURITY_INDEX: b"Date: Sat, 05 Dec 2026 (security)\n"}


def test_a_second_bootstrap_from_the_same_mirror_state_runs_no_mmdebstrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_mmdebstrap(monkeypatch)
    cache = cache_with(tmp_path / "bases", dict(BOTH))
    request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_700_000_000)

    first = bootstrap(DockerEngine(SimpleNamespace(api=FakeApi([]))), request, cache)  # type: ignore[arg-type]
    assert cache.reused is None and len(calls) == 1
    second_api = FakeApi([])
    second = bootstrap(DockerEngine(SimpleNamespace(api=second_api)), request, cache)  # type: ignore[arg-type]

    assert len(calls) == 1  # the kept tar, not a second install
    assert cache.reused is not None and cache.reused.parent == tmp_path / "bases"
    assert second == first  # the same bytes: the same image
    assert loaded_config(second_api, tmp_path)[0] == first
    assert cache.reused.is_file()  # loading does not consume what is kept


def test_the_base_names_the_indexes_it_was_made_from_and_its_images_inherit_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_mmdebstrap(monkeypatch)
    api = FakeApi([])
    request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_700_000_000)
    bootstrap(DockerEngine(SimpleNamespace(api=api)), request, cache_with(tmp_path, dict(BOTH)))  # type: ignore[arg-type]
    labels = loaded_config(api, tmp_path)[1]["config"]["Labels"]
    assert L.base_indexes(labels) == (
        (INDEX, hashlib.sha256(BOTH[INDEX]).hexdigest()),
        (SECURITY_INDEX, hashlib.sha256(BOTH[SECURITY_INDEX]).hexdigest()),
    )


@pytest.mark.parametrize(
    "change",
    ["index", "security index", "include", "epoch", "arch"],
)
def test_a_new_mirror_state_or_other_inputs_run_mmdebstrap_again(
    change: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_mmdebstrap(monkeypatch)
    monkeypatch.setattr(baseimage, "emulation_problem", lambda arch: None)
    indexes: dict[str, bytes | None] = dict(BOTH)
    cache = cache_with(tmp_path, indexes)
    request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_700_000_000)
    bootstrap(DockerEngine(SimpleNamespace(api=FakeApi([]))), request, cache)  # type: ignore[arg-type]

    if change == "index":  # a point release, a fix in the suite
        indexes[INDEX] = b"Date: Sun, 06 Dec 2026\n"
    elif change == "security index":  # a fix in the security suite: a new base takes it
        indexes[SECURITY_INDEX] = b"Date: Sun, 06 Dec 2026 (security)\n"
    elif change == "include":
        request = BootstrapCommand("bookworm", TAG, include=("python3", "g++"))
    elif change == "epoch":
        request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_800_000_000)
    else:
        request = BootstrapCommand("bookworm", TAG, source_date_epoch=1_700_000_000, arch="arm64")
    bootstrap(DockerEngine(SimpleNamespace(api=FakeApi([]))), request, cache)  # type: ignore[arg-type]

    assert len(calls) == 2 and cache.reused is None
    assert len(list(tmp_path.glob("*.tar"))) == 2


@pytest.mark.parametrize("mirror", [None, "file:///srv/mirror", "deb http://example.org/ x main"])
def test_a_mirror_whose_index_cannot_be_read_is_never_cached(
    mirror: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None: the default mirror does not answer the index's fetch (mmdebstrap may still reach
    it through apt's proxy); the others are mirrors given in forms imagekit does not read."""
    calls = fake_mmdebstrap(monkeypatch)
    cache = cache_with(tmp_path, {})
    request = BootstrapCommand("bookworm", TAG, mirror=mirror)

    for _ in range(2):
        bootstrap(DockerEngine(SimpleNamespace(api=FakeApi([]))), request, cache)  # type: ignore[arg-type]

    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_a_failed_mmdebstrap_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mmdebstrap(monkeypatch, returncode=25, stderr="E: cannot reach the mirror")
    cache = cache_with(tmp_path / "bases", {INDEX: b"index"})

    with pytest.raises(BootstrapError):
        bootstrap(
            DockerEngine(SimpleNamespace(api=FakeApi([]))), BootstrapCommand("bookworm", TAG), cache
        )  # type: ignore[arg-type]

    assert not (tmp_path / "bases").exists() or list((tmp_path / "bases").iterdir()) == []


def test_the_cache_keeps_the_most_recently_used_tars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_mmdebstrap(monkeypatch)
    indexes: dict[str, bytes | None] = dict(BOTH)
    cache = cache_with(tmp_path, indexes, keep=2)

    def made(n: int) -> None:
        indexes[INDEX] = f"state {n}".encode()
        bootstrap(
            DockerEngine(SimpleNamespace(api=FakeApi([]))), BootstrapCommand("bookworm", TAG), cache
        )  # type: ignore[arg-type]

    made(1)
    made(2)
    made(1)  # used again: now the most recent
    first_again = cache.reused
    os.utime(first_again, (2e9, 2e9))  # type: ignore[arg-type]  # file times as seconds apart
    made(3)

    assert len(calls) == 3
    kept = sorted(tmp_path.glob("*.tar"))
    assert len(kept) == 2 and first_again in kept  # state 2, the least recently used, went


def test_rootfs_key_ignores_nothing_that_decides_the_packages() -> None:
    command = ["mmdebstrap", "--include=python3", "bookworm", "rootfs.tar", "http://m/debian"]
    key = rootfs_key(command, None, b"index")
    assert key == rootfs_key(list(command), None, b"index")
    assert key != rootfs_key(command, None, b"other index")
    assert key != rootfs_key(command, 1, b"index")
    assert key != rootfs_key([*command[:1], "--include=g++", *command[2:]], None, b"index")


def test_release_url_of_a_mirror() -> None:
    assert release_url("http://deb.debian.org/debian/", "bookworm") == INDEX
    assert release_url("file:///srv/mirror", "bookworm") is None


def test_a_root_filesystem_kept_once_gives_the_same_time_every_time_it_is_loaded(
    tmp_path: Path,
) -> None:
    from imagekit.adapters.rootfs_cache import RootfsCache

    cache = RootfsCache(tmp_path)
    first = cache.made("k1", "2026-12-07T18:00:00Z")
    assert first == "2026-12-07T18:00:00Z"
    assert cache.made("k1", "2026-12-08T09:00:00Z") == first  # loaded again later: the same
    assert cache.made("k2", "2026-12-08T09:00:00Z") == "2026-12-08T09:00:00Z"
    assert cache.made(None, "now") == "now"
