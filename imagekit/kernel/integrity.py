"""The integrity seal of a record's section: a digest bound to the image id, and with a key an
HMAC.

Pure. `imagekit verify` writes a `seal` section beside the `verify` section of each image
record, and `imagekit audit` an `audit_seal` beside its `audit` section; the gate refuses a
record whose seal is missing or does not match, so a record flipped from fail to pass in
`results/` is no longer trusted as it stands.

What each part resists, honestly: the digest is public arithmetic. It catches an accidental or
naive edit (a status flipped by hand, a file cut short, a record copied onto another image id),
but whoever edits a record on purpose can compute the digest again. The HMAC is keyed with a
secret only the verify host holds (`IMAGEKIT_RESULTS_KEY`): without that secret an edited record
cannot be sealed again, so with the key set on both sides the gate trusts only records the
keyholder wrote. Past the gate, the cosign signature on the published digest is what carries
the proof (`publish/attest.py`).
"""

from __future__ import annotations

import hashlib
import hmac
import json

from imagekit.kernel.json import JsonObject, JsonValue
from imagekit.kernel.records import Seal

KEY_ENV = "IMAGEKIT_RESULTS_KEY"


def canonical(data: JsonValue) -> bytes:
    """The canonical JSON of `data`: sorted keys, no spaces, UTF-8."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _sealed_bytes(section: JsonObject, name: str) -> bytes:
    return canonical({"image_id": section.get("image_id"), name: section})


def key_id(key: bytes) -> str:
    """Which key sealed a record, without saying the key."""
    return hashlib.sha256(key).hexdigest()[:16]


def seal(section: JsonObject, key: bytes | None = None, name: str = "verify") -> Seal:
    """The seal of a record's section `name` (verify, audit) as it is written to disk (its JSON
    form)."""
    body = _sealed_bytes(section, name)
    return Seal(
        image_id=str(section["image_id"]),
        digest="sha256:" + hashlib.sha256(body).hexdigest(),
        hmac=("hmac-sha256:" + hmac.new(key, body, hashlib.sha256).hexdigest()) if key else None,
        key_id=key_id(key) if key else None,
    )


def seal_problem(
    section: JsonValue, sealed: JsonValue, key: bytes | None = None, name: str = "verify"
) -> str:
    """Why `sealed` does not vouch for the section `name` as read from disk ("" when it does;
    None: the record has no such section). With `key`, the record must carry an HMAC made with
    that very key."""
    if not isinstance(section, dict):
        return f"no {name} section"
    if not sealed:
        return "the record has no integrity seal (written by hand or by an older imagekit)"
    try:
        got = Seal.model_validate(sealed)
    except ValueError:
        return "the record's integrity seal is malformed"
    want = seal(section, key, name)
    if got.image_id != section.get("image_id"):
        return "the record's seal is for another image id"
    if got.digest != want.digest:
        return f"the record does not match its integrity seal (edited after {name} wrote it)"
    if key is not None:
        if got.hmac is None:
            return f"the record is not sealed with a key, and {KEY_ENV} asks for one"
        if got.key_id != want.key_id:
            return f"the record was sealed with another key (key id {got.key_id})"
        assert want.hmac is not None
        if not hmac.compare_digest(got.hmac, want.hmac):
            return (
                "the record's keyed seal does not match (edited and sealed again without the key)"
            )
    return ""
