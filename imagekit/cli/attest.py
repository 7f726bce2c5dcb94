"""`imagekit attest verify`: is an image signed by this key, and does its attested verify record
reach what is required? The check to run before an image runs (or in an admission policy)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from imagekit.cli.common import JsonOption, app, dispatch, handles, print_json
from imagekit.cli.requests import LEVEL_NAMES, AttestVerifyRequest
from imagekit.errors import NotAttestedError

attest_app = typer.Typer(
    help="Check the signature and attestations imagekit publish attached to an image.",
    no_args_is_help=True,
)
app.add_typer(attest_app, name="attest")


@attest_app.command("verify")
def attest_verify_command(
    image: Annotated[str, typer.Argument(help="The image: REGISTRY/REPOSITORY:TAG or @DIGEST.")],
    key: Annotated[
        str, typer.Option("--key", help="The cosign public key the image must be signed with.")
    ],
    require_level: Annotated[
        str | None,
        typer.Option(
            "--require-level",
            help="The level the attested verify record must reach: " + ", ".join(LEVEL_NAMES),
        ),
    ] = None,
    require_probe: Annotated[
        list[str] | None,
        typer.Option("--require-probe", help="A probe that must have passed (repeatable)."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Check that IMAGE is signed by KEY and that its attested verify record reaches what is
    required. Exit 8, with one line saying why, when the image is unsigned, signed by another
    key, or its record falls short."""
    dispatch(
        lambda: AttestVerifyRequest(
            image=image,
            key=key,
            require_level=require_level,
            require_probes=tuple(require_probe or ()),
            json=json_out,
        )
    )


def attested_level(reference: str, key: str) -> dict[str, Any]:
    """What the attestations signed by `key` say about `reference`: state, digest, the level
    reached (the best attested record), and a line for people."""
    from imagekit.adapters.cosign import Cosign
    from imagekit.core.attest import VERIFY_PREDICATE, Requirement, judge
    from imagekit.core.levels import rank

    found = Cosign(key, timeout_s=120).attested(reference, VERIFY_PREDICATE)
    if found.state != "ok":
        return {"state": found.state, "digest": found.digest, "level": None, "why": found.reason}
    ok, why, records = judge(found.predicates, Requirement(), found.digest)
    levels = [str(r.level) for r in records if r.status == "pass"]
    best = max(levels, key=rank) if levels else None
    return {
        "state": "ok" if ok else "no attestation",
        "digest": found.digest,
        "level": best,
        "why": why,
    }


@handles(AttestVerifyRequest)
def attest_verify(request: AttestVerifyRequest) -> None:
    """Check one image; NotAttestedError (exit 8) with one line when it falls short."""
    from imagekit.adapters.cosign import Cosign, check_key
    from imagekit.core.attest import VERIFY_PREDICATE, Requirement, VerifyPredicate, judge

    check_key("--key", request.key)
    required = Requirement(request.require_level, request.require_probes)  # type: ignore[arg-type]
    found = Cosign(request.key, timeout_s=120).attested(request.image, VERIFY_PREDICATE)
    ok, why, records = False, found.reason, list[VerifyPredicate]()
    if found.state == "ok":
        ok, why, records = judge(found.predicates, required, found.digest)
    if request.json:
        print_json(
            {
                "image": request.image,
                "digest": found.digest,
                "state": found.state,
                "ok": ok,
                "required": required.describe(),
                "reason": why,
                "records": [r.to_json() for r in records],
            }
        )
    if not ok:
        raise NotAttestedError(f"{request.image}: {why}")
    if not request.json:
        typer.echo(
            f"{request.image}@{found.digest}: signed by {request.key}; attested {why}; "
            f"requires {required.describe()}: ok"
        )
