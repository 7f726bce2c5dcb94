"""Adapter: cosign, run as a subprocess, behind the `Signer` and `AttestationReader` ports.

Offline by design: signatures and attestations go to the registry beside the image
(`sha256-<digest>.sig` / `.att`), never to a transparency log (`--tlog-upload=false` when
signing, `--insecure-ignore-tlog` when checking), so a private or air-gapped registry works.
The password of an encrypted key file is read by cosign itself from `COSIGN_PASSWORD`; registry
credentials come from the Docker config (`docker login`). A registry on the loopback interface
(127.0.0.1, localhost) is spoken to over plain HTTP, as Docker does.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from imagekit.errors import InputError
from imagekit.kernel.json import JsonObject, JsonValue, as_list, as_object
from imagekit.kernel.reference import parse
from imagekit.kernel.vocabulary import AttestationState
from imagekit.publish.ports import Attested

LOOPBACK = ("127.", "localhost", "[::1]")


def cosign_binary() -> str:
    """The cosign on PATH; InputError saying how to get one when there is none."""
    found = shutil.which("cosign")
    if found is None:
        raise InputError(
            "cosign is not installed; signing and checking attestations need it",
            "make engine installs it (Debian: apt-get install -t trixie cosign)",
        )
    return found


def loopback(reference: str) -> bool:
    """Whether `reference` names a registry on this machine's loopback interface."""
    return parse(reference).registry.startswith(LOOPBACK)


def check_key(option: str, key: str) -> None:
    """A key that is a file must exist (KMS and env:// URIs are cosign's to resolve)."""
    if "://" not in key and not Path(key).is_file():
        raise InputError(f"{option} {key}: no such key file", "give a cosign key file")


class Cosign:
    """cosign with one key: a private key to sign with, or a public key to check against."""

    def __init__(
        self, key: str, *, timeout_s: float = 300.0, environ: Mapping[str, str] | None = None
    ) -> None:
        self.key = key
        self.binary = cosign_binary()
        self.timeout_s = timeout_s
        self.environ = dict(os.environ if environ is None else environ)

    def _run(self, args: list[str], reference: str) -> subprocess.CompletedProcess[str]:
        command = [self.binary, *args]
        if loopback(reference):
            command += ["--allow-http-registry", "--allow-insecure-registry"]
        command.append(reference)
        env = {**self.environ, "COSIGN_YES": "true"}
        # An unencrypted key (an empty password) must not make cosign ask on a terminal.
        env.setdefault("COSIGN_PASSWORD", "")
        return subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            env=env,
            check=False,
        )

    def _call(self, args: list[str], reference: str) -> str:
        try:
            done = self._run(args, reference)
        except subprocess.TimeoutExpired:
            return f"cosign did not finish within {self.timeout_s:g} s"
        except OSError as exc:
            return f"cosign could not run: {exc}"
        return "" if done.returncode == 0 else f"cosign: {said(done.stderr)}"

    # Signer ---------------------------------------------------------------------------------

    def sign(self, reference: str) -> str:
        return self._call(["sign", "--key", self.key, "--tlog-upload=false", "--yes"], reference)

    def attest(
        self, reference: str, predicate_type: str, predicate: Mapping[str, JsonValue]
    ) -> str:
        with tempfile.TemporaryDirectory(prefix="imagekit-attest-") as folder:
            path = Path(folder) / "predicate.json"
            path.write_text(json.dumps(predicate, sort_keys=True), encoding="utf-8")
            args = ["attest", "--key", self.key, "--tlog-upload=false", "--yes"]
            return self._call(
                [*args, "--type", predicate_type, "--predicate", str(path)], reference
            )

    # AttestationReader -------------------------------------------------------------------------

    def attested(self, reference: str, predicate_type: str) -> Attested:
        try:
            signed = self._run(["verify", "--key", self.key, "--insecure-ignore-tlog"], reference)
            if signed.returncode != 0:
                return _refusal(signed.stderr, "signature")
            digest = _signed_digest(signed.stdout)
            args = ["verify-attestation", "--key", self.key, "--insecure-ignore-tlog"]
            found = self._run([*args, "--type", predicate_type], reference)
        except subprocess.TimeoutExpired:
            return Attested(
                AttestationState.ERROR, f"cosign did not finish within {self.timeout_s:g} s"
            )
        except OSError as exc:
            return Attested(AttestationState.ERROR, f"cosign could not run: {exc}")
        if found.returncode != 0:
            refused = _refusal(found.stderr, "attestation")
            return Attested(refused.state, refused.reason, digest)
        return Attested(
            AttestationState.OK,
            "",
            digest,
            tuple(_predicates(found.stdout, predicate_type, digest)),
        )


def said(stderr: str) -> str:
    """cosign's own reason: its `Error:` line, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error:")]
    return (errors or lines or ["failed without a message"])[-1][:400]


def _refusal(stderr: str, what: str) -> Attested:
    reason = said(stderr)
    if "no signatures found" in reason:
        return Attested(AttestationState.UNSIGNED, "the image is not signed")
    if "no matching signatures" in reason:
        return Attested(AttestationState.OTHER_KEY, "the image is signed, but not by this key")
    if "no matching attestations" in reason or "matched the predicate type" in reason:
        return Attested(AttestationState.NO_ATTESTATION, "no verify attestation signed by this key")
    if "MANIFEST_UNKNOWN" in reason or "manifest unknown" in reason:
        return Attested(AttestationState.ERROR, f"no such image in the registry ({reason})")
    return Attested(AttestationState.ERROR, f"checking the {what} failed: {reason}")


def _signed_digest(stdout: str) -> str:
    """The manifest digest `cosign verify` vouched for."""
    try:
        claims = json.loads(stdout)
        return str(claims[0]["critical"]["image"]["docker-manifest-digest"])
    except (ValueError, LookupError, TypeError):
        return ""


def _predicates(stdout: str, predicate_type: str, digest: str) -> list[JsonObject]:
    """The predicates of the DSSE envelopes `verify-attestation` printed, one per line, whose
    statement names `digest` as its subject."""
    found = []
    for line in stdout.splitlines():
        try:
            envelope = json.loads(line)
            statement = as_object(json.loads(base64.b64decode(envelope["payload"])))
        except (ValueError, LookupError, TypeError):
            continue
        if statement.get("predicateType") != predicate_type:
            continue
        subjects = [
            f"sha256:{as_object(s.get('digest')).get('sha256', '')}"
            for s in as_list(statement.get("subject"))
            if isinstance(s, dict)
        ]
        predicate = statement.get("predicate")
        if isinstance(predicate, dict) and (not digest or digest in subjects):
            found.append(predicate)
    return found


# cosign checks signatures against the registry: a slow registry is given two minutes per image.
READ_TIMEOUT_S = 120.0


def cosign_with(option: str, key: str, *, timeout_s: float = READ_TIMEOUT_S) -> Cosign:
    """cosign with `key` (given as `option`), a key file checked before anything runs."""
    check_key(option, key)
    return Cosign(key, timeout_s=timeout_s)
