"""Signed evidence on a real registry: publish signs and attests with cosign, `imagekit attest
verify` checks it, promotion keeps it, and the gate refuses records edited after verify."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from imagekit.kernel.integrity import seal
from imagekit.publish.attest import SBOM_PREDICATE, VERIFY_PREDICATE
from imagekit.publish.provenance import PROVENANCE_PREDICATE
from tests.integration.conftest import DemoBuild, imagekit
from tests.integration.test_promotion import publish as promotion_publish
from tests.integration.test_publish import (  # noqa: F401 - `registry` is a fixture
    SLIM,
    SLIM_TAG,
    registry,
)


def cosign(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("cosign")
    if binary is None:
        pytest.fail("cosign is not installed; run `make engine`")
    return subprocess.run(
        [binary, *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COSIGN_PASSWORD": "", **(env or {})},
        check=False,
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two throwaway key pairs: `trusted` signs what imagekit publishes, `other` is a stranger."""
    folder = tmp_path_factory.mktemp("keys")
    found = {}
    for name in ("trusted", "other"):
        made = cosign("generate-key-pair", "--output-key-prefix", str(folder / name))
        assert made.returncode == 0, made.stderr
        found[name] = folder / f"{name}.key"
        found[f"{name}.pub"] = folder / f"{name}.pub"
    return found


def publish(demo_build: DemoBuild, where: str, *args: str, results: Path | None = None):
    """`imagekit publish` as test_promotion runs it, with cosign's key password empty."""
    return promotion_publish(demo_build, where, *args, results=results, env={"COSIGN_PASSWORD": ""})


def attest_verify(reference: str, key: Path, *args: str):
    return imagekit("attest", "verify", reference, "--key", str(key), *args)


@pytest.fixture(scope="module")
def signed(
    demo_verify: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
    keys: dict[str, Path],
) -> dict:
    """The verified demo slim, published and signed with the trusted key."""
    result = publish(demo_build, f"{registry}/signed", "--signing-key", str(keys["trusted"]))
    assert result.code == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["images"][0]


def versioned(record: dict) -> dict:
    return next(t for t in record["tags"] if t["kind"] == "versioned")


def predicates(reference: str, key: Path, kind: str) -> list[dict]:
    found = cosign(
        "verify-attestation",
        "--key",
        str(key),
        "--insecure-ignore-tlog",
        "--allow-http-registry",
        "--type",
        kind,
        reference,
    )
    assert found.returncode == 0, found.stderr
    return [
        json.loads(base64.b64decode(json.loads(line)["payload"]))["predicate"]
        for line in found.stdout.splitlines()
    ]


def test_publish_signs_the_digest_and_attaches_the_record_and_the_sbom(
    signed: dict, keys: dict[str, Path]
) -> None:
    tag = versioned(signed)
    assert signed["status"] == "published", signed["reasons"]
    assert signed["signed_digest"] == tag["digest"]
    assert signed["attestations"] == [VERIFY_PREDICATE, SBOM_PREDICATE, PROVENANCE_PREDICATE]
    reference = tag["tag"].rpartition(":")[0] + "@" + tag["digest"]
    [record] = predicates(reference, keys["trusted.pub"], VERIFY_PREDICATE)
    assert record["image"]["digest"] == tag["digest"] and record["level"] == "cpu"
    assert record["image"]["image_id"] == signed["image_id"]
    assert record["platform"] == "linux/amd64" and record["gpu"] is None
    assert {p["name"]: p["status"] for p in record["probes"]}["ddp"] == "pass"
    assert record["engine"]["server_version"]
    [sbom] = predicates(reference, keys["trusted.pub"], SBOM_PREDICATE)
    names = {c["purl"].split("@")[0] for c in sbom["components"]}
    assert "pkg:pypi/torch" in names and "pkg:deb/debian/libc6" in names  # one SBOM, both


def test_attest_verify_passes_for_the_signed_image(signed: dict, keys: dict[str, Path]) -> None:
    tag = versioned(signed)
    result = attest_verify(
        tag["tag"], keys["trusted.pub"], "--require-level", "cpu", "--require-probe", "ddp"
    )
    assert result.code == 0, result.stderr
    assert tag["digest"] in result.stdout and "level cpu" in result.stdout


def test_the_build_provenance_is_attested_and_matches_the_image(
    signed: dict, demo_build: DemoBuild, keys: dict[str, Path]
) -> None:
    tag = versioned(signed)
    reference = tag["tag"].rpartition(":")[0] + "@" + tag["digest"]
    [statement] = predicates(reference, keys["trusted.pub"], PROVENANCE_PREDICATE)
    build = demo_build.records[SLIM]["build"]
    definition = statement["buildDefinition"]
    assert definition["internalParameters"]["inputHash"] == build["input_hash"]
    uris = [d["uri"] for d in definition["resolvedDependencies"]]
    assert any(u.startswith("file:wheelhouse/torch-2.13.0") for u in uris), uris
    assert any(u.startswith("docker-image:") for u in uris), uris
    result = attest_verify(tag["tag"], keys["trusted.pub"], "--require-provenance")
    assert result.code == 0, result.stderr
    assert "provenance of build run" in result.stdout


@pytest.mark.parametrize(
    "key,args,why",
    [
        ("other.pub", (), "signed, but not by this key"),
        ("trusted.pub", ("--require-level", "gpu"), "level cpu < gpu"),
        ("trusted.pub", ("--require-probe", "cudnn"), "cudnn skip"),
    ],
    ids=["another key", "a level not reached", "a probe that did not pass"],
)
def test_attest_verify_refuses_with_one_line(
    signed: dict, keys: dict[str, Path], key: str, args: tuple[str, ...], why: str
) -> None:
    result = attest_verify(versioned(signed)["tag"], keys[key], *args)
    assert result.code == 8, (result.stdout, result.stderr)
    assert why in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_record_attested_with_another_key_is_not_trusted(
    signed: dict, keys: dict[str, Path], tmp_path: Path
) -> None:
    tag = versioned(signed)
    reference = tag["tag"].rpartition(":")[0] + "@" + tag["digest"]
    [record] = predicates(reference, keys["trusted.pub"], VERIFY_PREDICATE)
    forged = {**record, "level": "gpu", "levels": {**record["levels"], "gpu": "pass"}}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    made = cosign(
        "attest",
        "--key",
        str(keys["other"]),
        "--tlog-upload=false",
        "--yes",
        "--allow-http-registry",
        "--type",
        VERIFY_PREDICATE,
        "--predicate",
        str(tmp_path / "forged.json"),
        reference,
    )
    assert made.returncode == 0, made.stderr
    trusted = attest_verify(tag["tag"], keys["trusted.pub"], "--require-level", "gpu")
    assert trusted.code == 8 and "level cpu < gpu" in trusted.stderr
    stranger = attest_verify(tag["tag"], keys["other.pub"], "--require-level", "gpu")
    assert stranger.code == 8 and "not by this key" in stranger.stderr


def test_an_image_published_without_a_key_fails_a_required_level(
    demo_verify: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
    keys: dict[str, Path],
) -> None:
    result = publish(demo_build, f"{registry}/unsigned")
    assert result.code == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)["images"][0]
    assert record["signed_digest"] is None and record["attestations"] == []
    checked = attest_verify(versioned(record)["tag"], keys["trusted.pub"], "--require-level", "cpu")
    assert checked.code == 8 and "not signed" in checked.stderr


def test_a_record_flipped_to_pass_after_verify_is_refused_by_the_gate(
    demo_verify: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    shutil.copytree(demo_build.results, results)
    for path in results.glob(f"*/images/{SLIM}.json"):
        data = json.loads(path.read_text())
        if "verify" not in data:
            continue
        # What verify would have written for a failing autograd, sealed as verify seals ...
        for probe in data["verify"]["probes"]:
            if probe["probe"] == "autograd":
                probe["status"] = "fail"
        data["verify"]["status"] = "fail"
        data["seal"] = seal(data["verify"]).to_json()
        # ... then flipped back to pass by hand.
        for probe in data["verify"]["probes"]:
            if probe["probe"] == "autograd":
                probe["status"] = "pass"
        data["verify"]["status"] = "pass"
        path.write_text(json.dumps(data))
    result = publish(demo_build, f"{registry}/edited", results=results)
    assert result.code == 6, result.stderr[-2000:]
    record = json.loads(result.stdout)["images"][0]
    assert record["status"] == "refused" and record["tags"] == []
    assert any("does not match its integrity seal" in r for r in record["reasons"])


def test_with_a_results_key_only_records_sealed_with_it_pass(
    demo_verify: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
) -> None:
    refused = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        f"{registry}/keyed",
        "--results",
        str(demo_build.results),
        "--dry-run",
        "--json",
        env={"IMAGEKIT_RESULTS_KEY": "a secret the verify host never had"},
    )
    assert refused.code == 6
    reasons = " ".join(json.loads(refused.stdout)["images"][0]["reasons"])
    assert "not sealed with a key" in reasons


def test_promotion_keeps_the_attestations_of_the_candidate(
    demo_verify: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
    keys: dict[str, Path],
) -> None:
    space = f"{registry}/promoted"
    key = ("--signing-key", str(keys["trusted"]))
    pushed = publish(demo_build, space, "--candidate", "77", *key)
    assert pushed.code == 0, pushed.stderr[-2000:]
    candidate = json.loads(pushed.stdout)["images"][0]
    assert candidate["attestations"] == [VERIFY_PREDICATE, SBOM_PREDICATE, PROVENANCE_PREDICATE]
    promoted = publish(demo_build, space, "--from-candidate", "77", *key)
    assert promoted.code == 0, promoted.stderr[-2000:]
    record = json.loads(promoted.stdout)["images"][0]
    digest = candidate["tags"][0]["digest"]
    assert record["signed_digest"] == digest and record["attestations"] == [VERIFY_PREDICATE]
    final = versioned(record)["tag"]
    checked = attest_verify(final, keys["trusted.pub"], "--require-level", "cpu")
    assert checked.code == 0, checked.stderr
    reference = final.rpartition(":")[0] + "@" + digest
    assert predicates(reference, keys["trusted.pub"], SBOM_PREDICATE)  # the candidate's SBOM
    assert len(predicates(reference, keys["trusted.pub"], VERIFY_PREDICATE)) == 2
    provenance = attest_verify(final, keys["trusted.pub"], "--require-provenance")
    assert provenance.code == 0, provenance.stderr  # the candidate's statement, kept


def test_doctor_shows_the_attested_level_beside_its_verdict(
    signed: dict, keys: dict[str, Path]
) -> None:
    tag = versioned(signed)["tag"]
    result = imagekit(
        "doctor",
        "--image",
        tag,
        "--key",
        str(keys["trusted.pub"]),
        "--nvidia-smi",
        "/nonexistent/nvidia-smi",
    )
    assert result.code == 0, result.stderr
    assert f"{tag}: runs" in result.stdout and "attested level: cpu" in result.stdout
    other = imagekit("doctor", "--image", tag, "--key", str(keys["other.pub"]), "--json")
    assert other.code == 0, other.stderr
    [entry] = json.loads(other.stdout)["images"]
    assert entry["attested"]["state"] == "other key" and entry["attested"]["level"] is None


# Last in the module: it edits the signed image's attestations in the registry.


def _registry_call(
    url: str, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(response.headers), response.read()


def test_a_provenance_statement_edited_in_the_registry_is_exit_8(
    signed: dict, keys: dict[str, Path]
) -> None:
    """One byte of the attested statement changed where cosign keeps it (the DSSE envelope in
    the `sha256-DIGEST.att` manifest's layer), its signature kept: verification fails."""
    tag = versioned(signed)
    repository = tag["tag"].rpartition(":")[0]
    host, _, name = repository.partition("/")
    api = f"http://{host}/v2/{name}"
    oci = "application/vnd.oci.image.manifest.v1+json"
    att = tag["digest"].replace(":", "-") + ".att"
    _, raw = _registry_call(f"{api}/manifests/{att}", headers={"Accept": oci})
    manifest = json.loads(raw)
    [layer] = [
        entry
        for entry in manifest["layers"]
        if (entry.get("annotations") or {}).get("predicateType") == PROVENANCE_PREDICATE
    ]
    _, blob = _registry_call(f"{api}/blobs/{layer['digest']}")
    envelope = json.loads(blob)
    statement = base64.b64decode(envelope["payload"])
    edited = statement.replace(b'"inputHash":"sha256:', b'"inputHash":"sha256:0', 1)
    assert edited != statement
    envelope["payload"] = base64.b64encode(edited).decode()
    body = json.dumps(envelope).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    started, _ = _registry_call(f"{api}/blobs/uploads/", "POST", b"")
    location = urllib.parse.urljoin(f"http://{host}", started["Location"])
    joiner = "&" if "?" in location else "?"
    _registry_call(f"{location}{joiner}digest={digest}", "PUT", body,
                   {"Content-Type": "application/octet-stream"})  # fmt: skip
    layer["digest"], layer["size"] = digest, len(body)
    _registry_call(f"{api}/manifests/{att}", "PUT", json.dumps(manifest).encode(),
                   {"Content-Type": manifest.get("mediaType", oci)})  # fmt: skip
    result = attest_verify(tag["tag"], keys["trusted.pub"], "--require-provenance")
    assert result.code == 8, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
