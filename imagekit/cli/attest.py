"""`imagekit attest verify`: is an image signed by this key, and does its attested verify record
reach what is required? The check to run before an image runs (or in an admission policy)."""

from __future__ import annotations

import datetime as dt
from functools import partial

import typer

from imagekit.cli.common import app, print_json
from imagekit.cli.options import command
from imagekit.publish.requests import AttestVerifyRequest

attest_app = typer.Typer(
    help="Check the signature and attestations imagekit publish attached to an image.",
    no_args_is_help=True,
)
app.add_typer(attest_app, name="attest")


@command(attest_app, "verify", AttestVerifyRequest)
def attest_verify(request: AttestVerifyRequest) -> None:
    """Check one image; NotAttestedError (exit 8) with one line when it falls short."""
    from imagekit.adapters.cosign import cosign_with
    from imagekit.adapters.imagelabels import labels_of
    from imagekit.publish.attest_verify import check_attestations

    reader, now = cosign_with("--key", request.key), dt.datetime.now(dt.UTC)
    labels = partial(labels_of, request.image)  # asked only where provenance is required
    check = check_attestations(reader, request.image, request.requirement(), now, labels)
    if request.json:
        print_json(check.to_json())
    if (error := check.failure()) is not None:
        raise error
    if not request.json:
        typer.echo(check.summary(request.key))
