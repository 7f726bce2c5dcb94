"""imagekit audit on the demo's slim image, against a security suite served here and signed
with a key made for the test, as Debian's is with its own: what the image lacks is found, a
damaged or unsigned index is refused, an unreachable one is engine trouble (exit 3)."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import http.server
import json
import lzma
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import format_datetime
from pathlib import Path

import pytest

from tests.integration.conftest import DemoBuild, imagekit
from tests.integration.engines import running_registry

pytestmark = pytest.mark.integration

SLIM = "2.13.0-cpu-py3.11-slim"
SUITE = "bookworm-security"


@dataclass
class Mirror:
    url: str
    root: Path
    keyring: Path
    gnupg: Path

    def publish(self, packages: str, *, sign: bool = True, valid_days: int = 7) -> None:
        """Write the suite's Packages.xz and its InRelease (clearsigned with the test key)."""
        dists = self.root / "dists" / SUITE
        (dists / "main" / "binary-amd64").mkdir(parents=True, exist_ok=True)
        index = lzma.compress(packages.encode())
        (dists / "main" / "binary-amd64" / "Packages.xz").write_bytes(index)
        now = dt.datetime.now(dt.UTC)
        release = (
            f"Origin: Debian\nLabel: Debian-Security\nCodename: {SUITE}\n"
            f"Date: {format_datetime(now, usegmt=True)}\n"
            f"Valid-Until: {format_datetime(now + dt.timedelta(days=valid_days), usegmt=True)}\n"
            f"SHA256:\n {hashlib.sha256(index).hexdigest()} {len(index)}"
            " main/binary-amd64/Packages.xz\n"
        )
        if not sign:
            (dists / "InRelease").write_text(release)
            return
        signed = subprocess.run(
            ["gpg", "--homedir", str(self.gnupg), "--batch", "--yes", "--clearsign",
             "--output", str(dists / "InRelease")],
            input=release, text=True, capture_output=True, check=False,
        )  # fmt: skip
        assert signed.returncode == 0, signed.stderr


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    """An HTTP server of a security suite, and the keyring of the key that signs it."""
    folder = tmp_path_factory.mktemp("security-mirror")
    gnupg = folder / "gnupg"
    gnupg.mkdir(mode=0o700)
    made = subprocess.run(
        ["gpg", "--homedir", str(gnupg), "--batch", "--passphrase", "",
         "--quick-gen-key", "imagekit test security archive", "ed25519", "sign", "1d"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    keyring = folder / "keyring.gpg"
    exported = subprocess.run(
        ["gpg", "--homedir", str(gnupg), "--export", "--output", str(keyring)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    root = folder / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Mirror(f"http://127.0.0.1:{server.server_address[1]}", root, keyring, gnupg)
    finally:
        server.shutdown()
        server.server_close()
        with contextlib.suppress(Exception):
            subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "all"], check=False)


def secured(demo_build: DemoBuild, mirror: Mirror, security: str = "") -> Path:
    """The demo matrix with a `security:` section that reads the test's mirror."""
    matrix = mirror.root.parent / "matrix.yaml"
    section = f"security: {{mirror: {mirror.url}, keyring: {mirror.keyring}{security}}}\n"
    matrix.write_text(demo_build.matrix.read_text() + "\n" + section)
    return matrix


def run_audit(demo_build: DemoBuild, mirror: Mirror, security: str = "") -> tuple[int, dict, str]:
    """Audit the demo's slim, its `security:` section reading the test's mirror."""
    done = imagekit(
        "audit", "--matrix", str(secured(demo_build, mirror, security)), "--only", SLIM,
        "--results", str(demo_build.results), "--json",
    )  # fmt: skip
    data = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.code, data, done.stderr


# A newer libssl3 than any Debian 12 has (epoch 99): the suite fixes what the image carries.
NEWER_SSL = "Package: libssl3\nSource: openssl\nVersion: 99:3.0.0-1\nArchitecture: amd64\n"
NOTHING_NEWER = "Package: libssl3\nSource: openssl\nVersion: 1.0-1\nArchitecture: amd64\n"


def test_a_fix_the_suite_has_and_the_image_lacks_fails_the_audit_and_is_recorded(
    demo_build: DemoBuild, mirror: Mirror
) -> None:
    mirror.publish(NEWER_SSL)
    code, data, stderr = run_audit(demo_build, mirror)
    assert code == 9, stderr
    record = data["images"][SLIM]["audit"]
    [finding] = record["findings"]
    assert (finding["package"], finding["fixed"], finding["verdict"]) == (
        "libssl3", "99:3.0.0-1", "refused",
    )  # fmt: skip
    assert finding["installed"].startswith("3.0.")
    assert record["os_packages"] > 50 and record["python_packages"] > 10
    assert record["security_index"]["url"] == f"{mirror.url}/dists/{SUITE}/InRelease"
    assert "libssl3" in stderr and "rebuild" in stderr
    run = demo_build.results / data["run_id"]
    written = json.loads((run / "images" / f"{SLIM}.json").read_text())
    assert written["audit"] == record and written["audit_seal"]["digest"].startswith("sha256:")
    assert 'failures="1"' in (run / "audit-junit.xml").read_text()


def test_the_matrix_security_section_decides_what_fails(
    demo_build: DemoBuild, mirror: Mirror
) -> None:
    mirror.publish(NEWER_SSL)
    code, data, stderr = run_audit(demo_build, mirror, ", refuse: none")
    assert code == 0, stderr
    [finding] = data["images"][SLIM]["audit"]["findings"]
    assert finding["verdict"] == "noted"
    # An accepted finding that has a fix is no exception any more: a rebuild takes the fix.
    (mirror.root.parent / "accepted.yaml").write_text(
        "- id: openssl@99:3.0.0-1\n  package: libssl3\n  reason: waiting for the rebuild\n"
        "  expires: 2099-01-01\n"
    )
    code, data, stderr = run_audit(demo_build, mirror, ", allowlist: accepted.yaml")
    assert code == 9, stderr
    assert f"allowlist outdated: {mirror.root.parent / 'accepted.yaml'}:1" in stderr


def test_an_image_with_nothing_newer_in_the_suite_passes(
    demo_build: DemoBuild, mirror: Mirror
) -> None:
    mirror.publish(NOTHING_NEWER)
    code, data, stderr = run_audit(demo_build, mirror)
    assert code == 0, stderr
    assert data["images"][SLIM]["audit"]["findings"] == []


def test_an_unsigned_or_damaged_index_is_never_read_as_no_fixes(
    demo_build: DemoBuild, mirror: Mirror
) -> None:
    mirror.publish(NOTHING_NEWER, sign=False)
    code, _, stderr = run_audit(demo_build, mirror)
    assert code == 2 and "signature does not hold" in stderr, stderr
    mirror.publish(NEWER_SSL)
    index = mirror.root / "dists" / SUITE / "main" / "binary-amd64" / "Packages.xz"
    index.write_bytes(lzma.compress(NOTHING_NEWER.encode()))  # not what InRelease signs
    code, _, stderr = run_audit(demo_build, mirror)
    assert code == 3 and "is not the index" in stderr, stderr


def test_an_unreachable_suite_is_engine_trouble_naming_the_url(
    demo_build: DemoBuild, mirror: Mirror
) -> None:
    gone = Mirror("http://127.0.0.1:9", mirror.root, mirror.keyring, mirror.gnupg)
    code, _, stderr = run_audit(demo_build, gone)
    assert code == 3, stderr
    assert "http://127.0.0.1:9/dists/bookworm-security/InRelease" in stderr


def test_publish_refuses_an_image_lacking_a_fix_naming_it_and_force_is_recorded(
    demo_verify: dict, demo_build: DemoBuild, mirror: Mirror, tmp_path: Path
) -> None:
    """The gate of a matrix with a `security:` section audits each image as it publishes (a
    dry run: everything is checked, nothing pushed)."""
    matrix = secured(demo_build, mirror)

    def publish(*extra: str) -> tuple[int, dict, str]:
        done = imagekit(
            "publish", "--matrix", str(matrix), "--only", SLIM, "--registry", registry,
            "--results", str(demo_build.results), "--dry-run", "--json", *extra,
        )  # fmt: skip
        return done.code, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr

    with running_registry(tmp_path) as registry:
        mirror.publish(NEWER_SSL)
        code, data, stderr = publish()
        assert code == 6, stderr
        [record] = data["images"]
        assert record["status"] == "refused"
        assert record["reasons"][0].startswith("security: 1 findings at any-fix: libssl3 3.0.")
        assert "-> 99:3.0.0-1" in record["reasons"][0]
        assert "bootstrap the base again" in record["reasons"][-1]
        run = demo_build.results / data["run_id"]
        kept = json.loads((run / "images" / f"{SLIM}.json").read_text())
        assert kept["audit"]["status"] == "fail" and kept["audit_seal"]
        code, data, stderr = publish("--force")
        assert code == 0, stderr
        [record] = data["images"]
        assert record["status"] == "dry-run" and record["forced"]
        mirror.publish(NOTHING_NEWER)
        code, data, stderr = publish()
        assert code == 0, stderr
        assert data["images"][0]["status"] == "dry-run" and not data["images"][0]["forced"]
