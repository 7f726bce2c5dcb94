"""SLSA v1 build provenance of a published image, and what checking it against the image finds.
Pure.

With a signing key, `imagekit publish` attaches to each digest it pushes, beside the verify
record, an in-toto statement of predicate type `PROVENANCE_PREDICATE` made from the build record
of that very image id (`results/<run>/images/<image>.json`) and the image's own labels: the
build type, the matrix cell, the source repository and commit (`org.opencontainers.image.source`
and `.revision`), and as resolved dependencies the image it was built FROM (by id), each file
its context carried from outside (the wheels, uv, a CA bundle: by sha256) and the index of each
suite the base was bootstrapped from (its `io.imagekit.base.indexes` label: the security suite's
InRelease among them). `imagekit attest verify --require-provenance` reads the statements back
(cosign checks each one's signature by the key and that its subject is this digest: an edited
statement fails there) and requires one whose input hash and cell are the image's labels'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imagekit.kernel import labels as L
from imagekit.kernel.json import JsonObject, JsonValue, as_list, as_object
from imagekit.kernel.publish_records import BuildEvidence

PROVENANCE_PREDICATE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://imagekit.dev/provenance/build/v1"
BUILDER = "https://imagekit.dev/builder/v1"
OCI = "org.opencontainers.image."


def _sha256(digest: str) -> JsonObject:
    return {"sha256": digest.removeprefix("sha256:")}


def provenance(
    build: BuildEvidence, labels: Mapping[str, str], *, imagekit_version: str
) -> JsonObject:
    """The SLSA v1 provenance predicate of the image `build` made, whose labels are `labels`."""
    record, plan = build.record, build.plan
    source, revision = labels.get(f"{OCI}source", ""), labels.get(f"{OCI}revision", "")
    external: JsonObject = {
        # The plan's cell in full; without the plan record, the id the image's label gives.
        "cell": dict(plan.cell) if plan else {"id": labels.get(L.CELL, "")},
        "flavour": str(record.flavour),
        "platform": labels.get(L.PLATFORM, ""),
        "reference": record.reference,
    }
    dependencies: list[JsonValue] = []
    if source:
        external["source"] = source
        commit: JsonObject = {"gitCommit": revision} if revision else {}
        dependencies.append({"uri": f"git+{source}", "digest": commit})
    if record.parent_id:
        base = labels.get(f"{OCI}base.name", "")
        dependencies.append({"uri": f"docker-image:{base}", "digest": _sha256(record.parent_id)})
    dependencies += [
        {"uri": f"file:{m.name}", "name": m.name.rsplit("/", 1)[-1], "digest": _sha256(m.sha256)}
        for m in record.materials
    ]
    dependencies += [{"uri": url, "digest": _sha256(h)} for url, h in L.base_indexes(labels)]
    internal: JsonObject = {
        "inputHash": record.input_hash or "",
        "builder": str(record.builder or ""),
        "sourceDateEpoch": labels.get(L.SOURCE_DATE_EPOCH, ""),
    }
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external,
            "internalParameters": internal,
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {"id": BUILDER, "version": {"imagekit": imagekit_version}},
            "metadata": {"invocationId": build.run_id},
        },
    }


def judge_provenance(
    predicates: Sequence[Mapping[str, JsonValue]], labels: Mapping[str, str]
) -> tuple[bool, str]:
    """Whether a provenance statement attested to the digest is this image's: its input hash
    and cell equal the image's labels. One line saying why not, or what held."""
    wanted = (labels.get(L.INPUT_HASH, ""), labels.get(L.CELL, ""))
    said = []
    for item in predicates:
        definition = as_object(item.get("buildDefinition"))
        internal = as_object(definition.get("internalParameters"))
        cell = as_object(as_object(definition.get("externalParameters")).get("cell"))
        found = (str(internal.get("inputHash") or ""), str(cell.get("id") or ""))
        if found == wanted and all(wanted):
            run = as_object(as_object(item.get("runDetails")).get("metadata")).get("invocationId")
            deps = len(as_list(definition.get("resolvedDependencies")))
            return True, f"provenance of build run {run}, {deps} resolved dependencies"
        said.append(f"input hash {found[0] or 'none'}, cell {found[1] or 'none'}")
    if not said:
        return False, "no provenance statement is attested"
    return False, (
        f"no attested provenance matches the image (input hash {wanted[0] or 'none'}, cell "
        f"{wanted[1] or 'none'}): " + "; ".join(said)
    )
