"""`make bench`'s layers section: the bytes that move between neighbouring images.

The CUDA example (torch 2.14.1, CUDA 13.0) and its neighbour (torch 2.13.0, CUDA 13.0, PyPI's
wheels), both flavours, built from one wheelhouse that holds both sets of wheels (as one CI run
resolves the unpinned dependencies once), pushed to a local registry. From the registry's
manifests:

  - a node that holds one image and pulls its neighbour downloads the layers it lacks:
      by digest (the containerd store, and what a registry stores)
      by chain (the classic store, which reuses a layer only on top of the same layers)
    against the bytes of the wheels that really differ between the two (their files as PyPI
    serves them)                                                    <= 1.1
  - the bytes the same pull would take with the venv as one layer (as before issue 29);
  - the registry's stored bytes for the four images, against the sum of their sizes.

The images are built with the builder asked for (bench.py asks for buildx) on the default
engine, and removed afterwards with the steps they left. Results: bench/results/layers.json.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docker
import yaml
from bench_speed import ROOT, dangling, registry, remove, remove_new_dangling, say

from imagekit.publish.inventory import normalized

EXAMPLE = ROOT / "examples" / "cuda-local.yaml"
NEIGHBOUR = "2.13.0"
CELLS = {"2.13.0": "2.13.0-cu130-py3.11", "2.14.1": "2.14.1-cu130-py3.11"}
# What a pushed image's manifest may be: the classic store pushes Docker's schema 2, the
# containerd store OCI's, and BuildKit an index (the image beside its attestations).
MANIFESTS = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
# Every distribution in the image, with its version (run in the image).
DISTS = (
    "import json; from importlib import metadata; "
    "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in metadata.distributions()})))"
)


def neighbour_matrix(repository: str, base: str, folder: Path) -> Path:
    """The CUDA example for linux/amd64 with the neighbouring release added."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document["repository"] = repository
    document["bases"] = {"debian-12": base}
    document["defaults"].pop("platforms", None)
    (release,) = document["releases"]
    document["releases"] = [{**release, "torch": NEIGHBOUR}, release]
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def joined_wheelhouse(folders: list[Path], into: Path) -> Path:
    """One folder holding every wheel of `folders` (links, not copies)."""
    into.mkdir()
    for folder in folders:
        for wheel in folder.glob("*.whl"):
            if not (into / wheel.name).exists():
                (into / wheel.name).hardlink_to(wheel)
    (into / ".complete").touch()
    return into


def wheel_bytes(wheelhouse: Path) -> dict[tuple[str, str], int]:
    """(normalised name, version) -> the wheel's bytes, for every wheel of the folder."""
    found = {}
    for wheel in wheelhouse.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        found[(normalized(name), version)] = wheel.stat().st_size
    return found


def manifest(host: str, repository: str, tag: str) -> dict:
    """The linux/amd64 image manifest a tag (or digest) names, through an index if it is one."""
    request = urllib.request.Request(
        f"http://{host}/v2/{repository}/manifests/{tag}", headers={"Accept": ",".join(MANIFESTS)}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        document = dict(json.loads(answer.read()))
    for entry in document.get("manifests", []):
        platform = entry.get("platform") or {}
        if (platform.get("os"), platform.get("architecture")) == ("linux", "amd64"):
            return manifest(host, repository, entry["digest"])
    return document


def steps(host: str, repository: str, document: dict) -> list[str]:
    """The Dockerfile step that made each layer of an image manifest (its config's history,
    without the steps that made no layer), in the manifest's order."""
    url = f"http://{host}/v2/{repository}/blobs/{document['config']['digest']}"
    with urllib.request.urlopen(url, timeout=60) as answer:
        history = json.loads(answer.read()).get("history", [])
    made = [h.get("created_by", "") for h in history if not h.get("empty_layer")]
    if len(made) != len(document["layers"]):
        return ["?"] * len(document["layers"])
    return [" ".join(step.split())[:160] for step in made]


def pull_bytes(held: list[dict], pulled: list[dict]) -> tuple[int, int]:
    """What a node holding the layers `held` downloads to run `pulled`: by digest (any layer
    it has), and by chain (only the layers below the first that differs)."""
    have = {x["digest"] for x in held}
    by_digest = sum(x["size"] for x in pulled if x["digest"] not in have)
    same = 0
    for a, b in zip(held, pulled, strict=False):
        if a["digest"] != b["digest"]:
            break
        same += 1
    by_chain = sum(x["size"] for x in pulled[same:])
    return by_digest, by_chain


def dists_of(client: docker.DockerClient, reference: str) -> set[tuple[str, str]]:
    out = client.containers.run(
        reference, ["python3", "-c", DISTS], remove=True, entrypoint=[], user="0"
    )
    return {(normalized(n), v) for n, v in json.loads(out.decode())}


def venv_layer_count(client: docker.DockerClient, reference: str) -> int:
    """How many of slim's layers are the venv's (imagekit-layers.json names its slots)."""
    out = client.containers.run(
        reference, ["cat", "/opt/venv/imagekit-layers.json"], remove=True, entrypoint=[]
    )
    return len(json.loads(out.decode()))


def build(matrix: Path, wheelhouse: Path, results: Path, builder: str) -> dict[str, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "build", "--matrix", str(matrix),
         "--platform", "linux/amd64", "--wheelhouse", str(wheelhouse), "--no-ca-cert",
         "--builder", builder, "--no-cache", "--results", str(results), "--json"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"bench: the layers section's build failed:\n{done.stderr[-3000:]}")
    return {r["name"]: r for r in json.loads(done.stdout)["results"]}


def layers_section(
    client: docker.DockerClient, base: str, wheelhouses: list[Path], builder: str = "sdk"
) -> Iterator[tuple[dict, list[tuple[str, float, float, str]]]]:
    """Build, push and measure; yields the figures and ratios once."""
    repository = f"imagekit-bench-{secrets.token_hex(3)}/pytorch"
    before = dangling(client)
    references: list[str] = []
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-layers-") as tmp, registry() as host:
        work = Path(tmp)
        wheelhouse = joined_wheelhouse(wheelhouses, work / "wheelhouse")
        matrix = neighbour_matrix(repository, base, work)
        try:
            say(f"layers: building torch {NEIGHBOUR} and 2.14.1 for CUDA 13.0, slim and full ...")
            records = build(matrix, wheelhouse, work / "results", builder)
            references = [str(r["reference"]) for r in records.values()]
            remove_new_dangling(client, before)
            images: dict[str, dict] = {}
            for name, record in records.items():
                reference = str(record["reference"])
                tag = reference.rsplit(":", 1)[1]
                pushed = f"{host}/{repository}:{tag}"
                client.api.tag(reference, f"{host}/{repository}", tag)
                references.append(pushed)
                say(f"layers: pushing {name} ...")
                for item in client.api.push(f"{host}/{repository}", tag, stream=True, decode=True):
                    if "error" in item:
                        sys.exit(f"bench: push of {name} failed: {item['error']}")
                document = manifest(host, repository, tag)
                made_by = steps(host, repository, document)
                images[name] = {
                    "reference": reference,
                    "layers": [
                        {"digest": x["digest"], "size": x["size"], "step": step}
                        for x, step in zip(document["layers"], made_by, strict=True)
                    ],
                    "dists": dists_of(client, reference),
                    "size_bytes": record["size_bytes"],
                    "build_s": record["duration_s"],
                }
            yield measure(client, images, wheel_bytes(wheelhouse), host)
        finally:
            remove(client, *references)
            remove_new_dangling(client, before)


def measure(
    client: docker.DockerClient,
    images: dict[str, dict],
    wheels: dict[tuple[str, str], int],
    host: str,
) -> tuple[dict, list[tuple[str, float, float, str]]]:
    """Each pair's download against its differing wheels; the registry's stored bytes."""
    figures: dict = {"pairs": {}}
    ratios = []
    for flavour in ("slim", "full"):
        names = {t: f"{CELLS[t]}-{flavour}" for t in CELLS}
        for held, pulled in ((NEIGHBOUR, "2.14.1"), ("2.14.1", NEIGHBOUR)):
            a, b = images[names[held]], images[names[pulled]]
            by_digest, by_chain = pull_bytes(a["layers"], b["layers"])
            have = {x["digest"] for x in a["layers"]}
            downloaded = [x for x in b["layers"] if x["digest"] not in have]
            differing = sorted(b["dists"] - a["dists"])
            unknown = [d for d in differing if d not in wheels]
            differing_bytes = sum(wheels.get(d, 0) for d in differing)
            # With the venv as one layer (before issue 29), any change in it moves all of it.
            slim = images[f"{CELLS[pulled]}-slim"]
            count = venv_layer_count(client, slim["reference"])
            venv = b["layers"][len(slim["layers"]) - count : len(slim["layers"])]
            lacking = [x for x in venv if x["digest"] not in have]
            one_layer = by_digest + (
                sum(x["size"] for x in venv) - sum(x["size"] for x in lacking) if lacking else 0
            )
            key = f"{flavour}: holds {held}, pulls {pulled}"
            figures["pairs"][key] = {
                "download_by_digest_bytes": by_digest,
                "download_by_chain_bytes": by_chain,
                "download_with_one_venv_layer_bytes": one_layer,
                "differing_wheels_bytes": differing_bytes,
                "differing": [f"{n}=={v}" for n, v in differing],
                "differing_without_a_wheel_here": [f"{n}=={v}" for n, v in unknown],
                # What the node downloads, layer by layer: the step that made it, its bytes.
                "downloaded": [{"step": x["step"], "bytes": x["size"]} for x in downloaded],
                "image_layers_bytes": sum(x["size"] for x in b["layers"]),
            }
            ratios.append(
                (f"{key}: download / differing wheels", by_digest / differing_bytes, 1.1, "<=")
            )
    # Build times of the layered venv (issue 29: keep the build fast while laying it out).
    figures["build_s"] = {name: round(i["build_s"], 1) for name, i in images.items()}
    figures["size_bytes"] = {name: i["size_bytes"] for name, i in images.items()}
    stored = registry_bytes(host)
    total = sum(sum(x["size"] for x in i["layers"]) for i in images.values())
    figures["registry"] = {"stored_bytes": stored, "sum_of_images_bytes": total}
    ratios.append(("registry stored / sum of the four images", stored / total, 1.0, "<="))
    return figures, ratios


def registry_bytes(host: str) -> int:
    """The bytes the registry stores: every blob of every repository, once (its catalog, each
    repository's manifests, their layers and configs)."""
    seen: dict[str, int] = {}
    with urllib.request.urlopen(f"http://{host}/v2/_catalog", timeout=60) as answer:
        repositories = json.loads(answer.read())["repositories"]
    for repository in repositories:
        with urllib.request.urlopen(f"http://{host}/v2/{repository}/tags/list", timeout=60) as r:
            tags = json.loads(r.read())["tags"] or []
        for tag in tags:
            document = manifest(host, repository, tag)
            for blob in [document["config"], *document["layers"]]:
                seen[blob["digest"]] = blob["size"]
    return sum(seen.values())
