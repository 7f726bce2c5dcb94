"""`make bench`'s speed section: imagekit against a hand-written expert Dockerfile.

Measured side by side in one run, on the engine `make engine` sets up (Docker 26, containerd
store), with the same base and wheelhouse and no build cache:

  - cold build of slim / the expert two-stage Dockerfile (bench/expert/), for the legacy
    builder (the SDK) and BuildKit (buildx), for the CPU and the CUDA example      <= 1.0
    and slim's size / the expert image's size                                      <= 1.0
    The slim measured is the example's without torch.compile (`compile: false`), which is
    the expert image's promise: torch in a venv, no compiler. The CPU example's default slim
    (with g++ for torch.compile) is measured too and printed, without a target.
  - warm build on a fresh engine from a registry cache / cold build (buildx)        <= 0.2
  - pull of the CUDA slim image from a local registry into an empty engine and the first
    `import torch` in it, zstd layers / gzip layers                                 <= 0.6
  - the installer, in the builder's place: pip against uv, bytecode compiled by both, and
    `import torch` as the image's user (who cannot write __pycache__ into the venv)
  - each pruning step's seconds and bytes, per example (the build log's `prune_venv steps:`)

The fresh engine is a second dockerd with the containerd store and no way out, started and
removed here (tests/integration/engines.py), so neither the host's images nor its build cache
are touched. Results: bench/results/speed-cpu.json, speed-cuda.json.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imagekit.adapters.engine import DockerEngine  # noqa: E402
from tests.integration.engines import (  # noqa: E402
    OtherEngine,
    copy_image,
    running_registry,
    start_docker20,
    start_docker_classic,
    start_docker_containerd,
    start_docker_fresh,
    stop,
)

EXPERT = ROOT / "bench" / "expert"
EXAMPLES = {"cpu": ROOT / "examples" / "cpu.yaml", "cuda": ROOT / "examples" / "cuda-local.yaml"}
TAGS = {"cpu": "2.13.0-cpu-py3.11-slim", "cuda": "2.14.1-cuda13.0-cudnn9-py3.11-slim"}
# What the expert installs: torch and numpy, as slim does (the CUDA example leaves triton out
# of slim; the expert, written by hand, would not know to).
EXPERT_REQUIREMENTS = {"cpu": "torch==2.13.0 numpy", "cuda": "torch==2.14.1 numpy"}
BRIDGE, SUBNET = "ikt-br2", "10.213.9.1/24"
IMPORT = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"


def say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def image_bytes(client: docker.DockerClient, reference: str) -> int:
    """The image's size as imagekit records it (the sum of its history on every store)."""
    image = DockerEngine(client).inspect_image(reference)
    assert image is not None, reference
    return image.size_bytes


def matrix_for(example: str, repository: str, base: str, folder: Path, *, compile_: bool) -> Path:
    text = EXAMPLES[example].read_text().replace("imagekit-demo/pytorch", repository)
    text = text.replace('"imagekit-base/debian:bookworm"', f'"{base}"')
    # The key itself, not a comment that mentions it (cpu.yaml's does).
    if not compile_ and not re.search(r"^\s+compile:\s*false\s*$", text, re.MULTILINE):
        text = text.replace("  slim:\n", "  slim:\n    compile: false\n", 1)
    path = folder / f"{example}-{'compile' if compile_ else 'plain'}.yaml"
    path.write_text(text)
    return path


def imagekit_build(
    matrix: Path, wheelhouse: Path, results: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[float, dict]:
    """A slim build through the CLI; its seconds and its record."""
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable, "-m", "imagekit", "build", "--matrix", str(matrix),
            "--flavour", "slim", "--platform", "linux/amd64", "--wheelhouse", str(wheelhouse),
            "--no-ca-cert",
            "--results", str(results), "--json", *args,
        ],
        env={**os.environ, "CI": "true", **(env or {})},
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"bench: imagekit build failed:\n{done.stderr[-3000:]}")
    (record,) = json.loads(done.stdout)["results"]
    return seconds, record


def expert_build(
    target: Target, builder: str, example: str, base: str, wheelhouse: Path, tag: str
) -> float:
    """The expert Dockerfile, cold, on `builder` of the target engine; its seconds."""
    client = target.client
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-expert-") as tmp:
        context = Path(tmp)
        for name in ("Dockerfile", "Dockerfile.buildkit"):
            shutil.copy(EXPERT / name, context / name)
        subprocess.run(["cp", "-al", str(wheelhouse), str(context / "wheelhouse")], check=True)
        (context / "wheelhouse" / ".complete").unlink(missing_ok=True)
        args = {"BASE_IMAGE": base, "REQUIREMENTS": EXPERT_REQUIREMENTS[example]}
        started = time.monotonic()
        if builder == DEFAULT:
            # `docker build` as a user types it: the CLI picks its builder (BuildKit since
            # Docker 23's CLI, whatever the engine), from the Dockerfile any builder takes.
            command = ["docker", "build", "--no-cache", "-t", tag, str(context)]
            for key, value in args.items():
                command += ["--build-arg", f"{key}={value}"]
            env = {k: v for k, v in {**os.environ, **target.env}.items() if k != "DOCKER_BUILDKIT"}
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                sys.exit(f"bench: expert docker build failed:\n{done.stderr[-3000:]}")
            target.docker_build_builder = (
                "buildkit" if "#0 building with" in done.stderr else "legacy"
            )
        elif builder == "sdk":
            for item in client.api.build(
                path=str(context), tag=tag, buildargs=args, nocache=True, rm=True,
                forcerm=True, decode=True,
            ):  # fmt: skip
                if "error" in item:
                    sys.exit(f"bench: expert build failed: {item['error']}")
        else:
            command = ["docker", "buildx", "build", "--no-cache", "--load", "--quiet"]
            command += ["-f", str(context / "Dockerfile.buildkit"), "-t", tag, str(context)]
            for key, value in args.items():
                command += ["--build-arg", f"{key}={value}"]
            env = {**os.environ, **target.env}
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
        return time.monotonic() - started


@dataclass
class Target:
    """An engine the speed section builds on: the default one, or a boxed Docker 26."""

    label: str  # host, docker20, docker26-classic, docker26-containerd
    client: docker.DockerClient
    env: dict[str, str]  # what the CLI and buildx are given (DOCKER_HOST), {} for the host's
    row: dict[str, str]  # the engine and image store, as each figure records them
    docker_build_builder: str = ""  # what `docker build` unasked built with, once it has run


# The builder row of what each gives unasked: `docker build` against `imagekit build`, neither
# told which builder to use.
DEFAULT = "default"
# The engines `--speed-engines` names: the default one (whatever `make engine` installed) and
# Docker 26 boxed with each store (tests/integration/engines.py), as the engine contract runs,
# and Debian 12's Docker 20.10 boxed alike (what a fresh Debian 12 host runs).
ENGINES = ("host", "docker20", "docker26-classic", "docker26-containerd")
BOX_BRIDGE, BOX_SUBNET = "ikt-br5", "10.213.13.1/24"


def describe(client: docker.DockerClient) -> dict[str, str]:
    info = DockerEngine(client).info()
    return {"engine": info.describe(), "image_store": info.image_store}


@contextmanager
def engine_target(client: docker.DockerClient, name: str, base: str) -> Iterator[Target]:
    """The engine `name`, holding `base`; a boxed one is started here and removed after."""
    if name == "host":
        yield Target(name, client, {}, describe(client))
        return
    root = Path(f"/tmp/imagekit-bench-{name}-{secrets.token_hex(3)}")
    if name == "docker20":
        engine = start_docker20(root, BOX_BRIDGE, BOX_SUBNET)
    elif name == "docker26-classic":
        engine = start_docker_classic(root, BOX_BRIDGE, BOX_SUBNET)
    else:
        engine = start_docker_containerd(root, BOX_BRIDGE, BOX_SUBNET)
    try:
        copy_image(client, engine, base)
        other = engine.client()
        try:
            yield Target(name, other, engine.env(local=True), describe(other))
        finally:
            other.close()
    finally:
        stop(engine)


def remove(client: docker.DockerClient, *references: str) -> None:
    for reference in references:
        with suppress(docker.errors.ImageNotFound):
            client.images.remove(reference, force=True)


def dangling(client: docker.DockerClient) -> set[str]:
    return {i.id for i in client.images.list(all=True, filters={"dangling": True})}


def drop_build_cache(target: Target) -> None:
    """A boxed engine's whole build cache, after each build: the next starts as cold, cache
    mounts included (uv's would otherwise hand imagekit's next round unpacked wheels), and a
    CUDA round's 10 GB of cache cannot fill the disk. The host's is the user's: left alone."""
    if target.label != "host":
        target.client.api.prune_builds(all=True)


def remove_new_dangling(client: docker.DockerClient, before: set[str]) -> None:
    """The untagged step images the builds left (the legacy builder keeps one per step), in
    passes: on the classic store a parent goes only after its children."""
    while mine := dangling(client) - before:
        removed = 0
        for image_id in mine:
            with suppress(docker.errors.APIError):
                client.images.remove(image_id, force=True)
                removed += 1
        if not removed:
            say(f"could not remove {len(mine)} untagged images")
            return


def pruning_steps(record: dict) -> dict:
    """Each pruning step's seconds and bytes, from the build's log (the image keeps no time)."""
    marker = "prune_venv steps: "
    for line in Path(record["log_path"]).read_text().splitlines():
        if marker in line:
            return json.loads(line.split(marker, 1)[1])
    sys.exit(f"bench: no `{marker}` line in {record['log_path']}")


@contextmanager
def registry() -> Iterator[str]:
    """Debian's docker-registry on a free loopback port, its data in a temporary folder."""
    with (
        tempfile.TemporaryDirectory(prefix="imagekit-bench-registry-") as tmp,
        running_registry(Path(tmp)) as host,
    ):
        yield host


@contextmanager
def fresh_engine(client: docker.DockerClient, base: str | None) -> Iterator[OtherEngine]:
    """An empty containerd-store dockerd (as a CI runner or a GPU node starts), holding only
    `base` if given; removed on the way out."""
    engine = start_docker_fresh(
        Path(f"/tmp/imagekit-bench-fresh-{secrets.token_hex(3)}"), BRIDGE, SUBNET
    )
    try:
        if base:
            copy_image(client, engine, base)
        yield engine
    finally:
        stop(engine)


def compare_builds(
    target: Target,
    example: str,
    base: str,
    wheelhouse: Path,
    work: Path,
    builders: tuple[str, ...] = ("sdk", "buildx"),
    rounds: int = 1,
) -> Iterator[dict]:
    """Expert against imagekit, cold, on each builder of one engine: one builder's figures (its
    row with its engine and image store) and pruning steps as soon as they are measured, so a
    run stopped on the next builder keeps them. With `rounds` above 1 the two builds take
    turns that many times and the row holds each round's seconds and their medians: on a
    shared 2-core machine one pair moves by 10% from run to run."""
    client = target.client
    repository = f"imagekit-bench-{secrets.token_hex(3)}/pytorch"
    plain = matrix_for(example, repository, base, work, compile_=False)
    # The legacy builder's step images go after each build: the CUDA example's are 20 GB.
    before = dangling(client)
    for builder in builders:
        row = f"{target.label}:{builder}"
        expert_tag = f"{repository}:expert-{builder}"
        reference = f"{repository}:{TAGS[example]}"
        expert_runs, imagekit_runs = [], []
        for turn in range(1, rounds + 1):
            of = f" (round {turn} of {rounds})" if rounds > 1 else ""
            say(f"{example}: expert Dockerfile, {row}, cold{of} ...")
            expert_runs.append(expert_build(target, builder, example, base, wheelhouse, expert_tag))
            expert_bytes = image_bytes(client, expert_tag)
            remove(client, expert_tag)
            remove_new_dangling(client, before)
            drop_build_cache(target)
            say(f"{example}: imagekit slim (compile: false), {row}, cold{of} ...")
            asked = () if builder == DEFAULT else ("--builder", builder)
            seconds, record = imagekit_build(
                plain, wheelhouse, work / f"r-{row}-{turn}", "--no-cache", *asked, env=target.env
            )
            imagekit_runs.append(seconds)
            slim_bytes = image_bytes(client, reference)
            steps = pruning_steps(record)
            remove(client, reference)
            remove_new_dangling(client, before)
            drop_build_cache(target)
        figures = {
            **target.row,
            "builder": builder,
            "expert_s": round(statistics.median(expert_runs), 1),
            "expert_bytes": expert_bytes,
            "imagekit_s": round(statistics.median(imagekit_runs), 1),
            "imagekit_bytes": slim_bytes,
        }
        if builder == DEFAULT:
            # Which builder each picked by itself, beside its seconds.
            figures["docker_build_builder"] = target.docker_build_builder
            figures["imagekit_builder"] = record.get("builder", "?")
            figures["imagekit_builder_why"] = record.get("builder_why", "")
        if rounds > 1:
            figures["expert_rounds_s"] = [round(x, 1) for x in expert_runs]
            figures["imagekit_rounds_s"] = [round(x, 1) for x in imagekit_runs]
        if example == "cpu":
            say(f"{example}: imagekit slim as the example has it (torch.compile), {row} ...")
            compiling = matrix_for(example, repository, base, work, compile_=True)
            seconds, _ = imagekit_build(
                compiling, wheelhouse, work / f"c-{row}", "--no-cache", *asked, env=target.env
            )
            figures["imagekit_compile_s"] = round(seconds, 1)
            figures["imagekit_compile_bytes"] = image_bytes(client, reference)
            remove(client, reference)
            remove_new_dangling(client, before)
            drop_build_cache(target)
        yield {"builds": {row: figures}, "pruning_steps": steps}


def warm_from_registry(
    client: docker.DockerClient, base: str, wheelhouse: Path, work: Path
) -> dict:
    """Cold build with --cache-to, then the same build on a fresh engine with --cache-from."""
    repository = f"imagekit-bench-{secrets.token_hex(3)}/pytorch"
    matrix = matrix_for("cpu", repository, base, work, compile_=False)
    with registry() as host:
        cache = f"{host}/{repository.split('/')[0]}/cache"
        say("cpu: cold buildx build with --cache-to ...")
        cold_s, _ = imagekit_build(
            matrix,
            wheelhouse,
            work / "cold",
            "--no-cache",
            "--builder",
            "buildx",
            "--cache-to",
            cache,
        )
        remove(client, f"{repository}:{TAGS['cpu']}")
        with fresh_engine(client, base) as engine:
            say("cpu: the same build on a fresh engine with --cache-from ...")
            warm_s, _ = imagekit_build(
                matrix, wheelhouse, work / "warm", "--builder", "buildx", "--cache-from", cache,
                env=engine.env(local=True),
            )  # fmt: skip
    return {"cold_with_cache_to_s": round(cold_s, 1), "warm_fresh_engine_s": round(warm_s, 1)}


def pull_and_start(
    client: docker.DockerClient, base: str, wheelhouse: Path, work: Path, example: str
) -> dict:
    """Push the slim image with gzip and with zstd layers; pull each into an empty engine and
    time the pull plus the first `import torch` (what a GPU node pays before work starts)."""
    repository = f"imagekit-bench-{secrets.token_hex(3)}/pytorch"
    matrix = matrix_for(example, repository, base, work, compile_=False)
    reference = f"{repository}:{TAGS[example]}"
    figures: dict[str, float | int] = {}
    with registry() as host:
        for compression in ("gzip", "zstd"):
            say(f"{example}: buildx build with {compression} layers, push ...")
            imagekit_build(
                matrix, wheelhouse, work / f"p-{compression}", "--builder", "buildx",
                "--compression", compression,
            )  # fmt: skip
            pushed = f"{host}/{repository}:{compression}"
            client.images.get(reference).tag(pushed)
            for line in client.images.push(pushed, stream=True, decode=True):
                if "error" in line:
                    sys.exit(f"bench: push of {pushed} failed: {line['error']}")
            remove(client, pushed, reference)
            with fresh_engine(client, None) as engine:
                say(f"{example}: pull ({compression}) into an empty engine, first import torch ...")
                started = time.monotonic()
                subprocess.run(
                    ["docker", "pull", "-q", pushed], check=True, stdout=subprocess.DEVNULL,
                    env={**os.environ, **engine.env(local=True)},
                )  # fmt: skip
                pulled_s = time.monotonic() - started
                out = subprocess.run(
                    ["docker", "run", "--rm", pushed, "python", "-c", IMPORT], check=True,
                    capture_output=True, text=True, env={**os.environ, **engine.env(local=True)},
                )  # fmt: skip
                total_s = time.monotonic() - started
            figures[f"{compression}_pull_s"] = round(pulled_s, 1)
            figures[f"{compression}_pull_and_import_s"] = round(total_s, 1)
            figures[f"{compression}_import_torch_s"] = round(float(out.stdout.split()[-1]), 2)
    return figures


def installers(client: docker.DockerClient, base: str, wheelhouse: Path) -> dict:
    """pip against uv in the builder's place (same base, same wheels, bytecode compiled by
    both), then `import torch` as uid 1000, who cannot write __pycache__ into the venv; uv
    without bytecode shows what an image without .pyc pays at every start."""
    import uv

    script = r"""
set -e
python3 -m venv /opt/venv
s=$EPOCHREALTIME
case "$1" in
  pip) /opt/venv/bin/pip install -q --no-cache-dir --no-index --find-links /wh \
          --disable-pip-version-check torch==2.13.0 numpy ;;
  uv) UV_NO_CACHE=1 /uv pip install -q --python /opt/venv/bin/python --compile-bytecode \
          --no-index --find-links /wh torch==2.13.0 numpy ;;
  uv-no-pyc) UV_NO_CACHE=1 /uv pip install -q --python /opt/venv/bin/python \
          --no-index --find-links /wh torch==2.13.0 numpy ;;
esac
e=$EPOCHREALTIME
i=$(setpriv --reuid 1000 --regid 1000 --clear-groups /opt/venv/bin/python -c "$2")
j=$(setpriv --reuid 1000 --regid 1000 --clear-groups /opt/venv/bin/python -c "$2")
python3 -c "print($e - $s, $i, $j)"
"""
    figures: dict[str, float] = {}
    for installer in ("pip", "uv", "uv-no-pyc"):
        say(f"installer: {installer} ...")
        out = client.containers.run(
            base, ["bash", "-c", script, "-", installer, IMPORT], remove=True,
            volumes={str(wheelhouse): {"bind": "/wh", "mode": "ro"},
                     uv.find_uv_bin(): {"bind": "/uv", "mode": "ro"}},
        )  # fmt: skip
        install_s, first_import, second_import = (float(x) for x in out.decode().split())
        figures[f"{installer}_install_s"] = round(install_s, 1)
        figures[f"{installer}_import_torch_s"] = round(first_import, 2)
        figures[f"{installer}_import_torch_again_s"] = round(second_import, 2)
    return figures


Ratio = tuple[str, float, float, str]
# builds: expert against imagekit (and pruning steps); cache: the registry cache on a fresh
# engine (cpu); installers: pip against uv (cpu); pull: zstd against gzip (cuda).
PARTS = ("builds", "cache", "installers", "pull")


def speed_section(
    client: docker.DockerClient,
    base: str,
    wheelhouses: dict[str, Path],
    builders: tuple[str, ...] = ("sdk", "buildx"),
    parts: tuple[str, ...] = PARTS,
    engines: tuple[str, ...] = ("host",),
    rounds: int = 1,
) -> Iterator[tuple[str, dict, list[Ratio]]]:
    """Each example's figures and ratios against their targets, as soon as it is measured on
    each engine (a failure later loses nothing already measured)."""
    before = dangling(client)
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-speed-") as tmp:
        work = Path(tmp)
        for example, wheelhouse in wheelhouses.items():
            if "builds" in parts:
                for name in engines:
                    with engine_target(client, name, base) as target:
                        for document in compare_builds(
                            target, example, base, wheelhouse, work, builders, rounds
                        ):
                            yield example, document, build_ratios(example, document["builds"])
            ratios: list[Ratio] = []
            document = {}
            if example == "cpu" and "cache" in parts:
                document["registry_cache"] = warm = warm_from_registry(
                    client, base, wheelhouse, work
                )
                ratios.append((
                    "cpu warm build on a fresh engine from the registry cache / cold",
                    warm["warm_fresh_engine_s"] / warm["cold_with_cache_to_s"], 0.2, "<=",
                ))  # fmt: skip
            if example == "cpu" and "installers" in parts:
                document["installers"] = installers(client, base, wheelhouse)
            if example == "cuda" and "pull" in parts:
                document["pull_and_start"] = pull = pull_and_start(
                    client, base, wheelhouse, work, example
                )
                ratios.append((
                    "cuda pull + first import torch, zstd / gzip",
                    pull["zstd_pull_and_import_s"] / pull["gzip_pull_and_import_s"], 0.6, "<=",
                ))  # fmt: skip
            remove_new_dangling(client, before)
            if document:
                yield example, document, ratios


def build_ratios(example: str, builds: dict[str, dict]) -> list[Ratio]:
    """Slim against the expert, in time and in bytes, for each engine and builder measured."""
    ratios: list[Ratio] = []
    for row, f in builds.items():
        where = f"{row} ({f['engine']}, {f['image_store']} store)"
        ratios.append((
            f"{example} cold build, {where}: slim / expert",
            f["imagekit_s"] / f["expert_s"], 1.0, "<=",
        ))  # fmt: skip
        ratios.append((
            f"{example} image size, {where}: slim / expert",
            f["imagekit_bytes"] / f["expert_bytes"], 1.0, "<=",
        ))  # fmt: skip
    return ratios
