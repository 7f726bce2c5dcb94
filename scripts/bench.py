"""`make bench`: speed and size figures measured side by side in one run.

Build section (the build issue's targets):
  - no-op rebuild of the CPU demo matrix / cold build              <= 0.02
  - rebuild after changing a probe file / cold build               <= 0.02
  - slim size / naive single-stage image (base + build tools + pip
    install torch with its wheels and caches left in)              <= 0.75
  - slim size / (base size + installed virtualenv size)            <= 1.05

Verify section (the verify issue's targets), on the slim image just built:
  - verify wall time / (container start + one `import torch` + the
    probes' own compute time)                                       <= 1.3
  - one container per probe / all probes in one container           >= 3
  - one `imagekit audit` of the slim, warm, in seconds              <= 10

CUDA section (the CUDA issue's figures), on the CUDA example (torch 2.14.1, CUDA 13.0):
  - slim CUDA image size, and slim / (base + installed virtualenv)  <= 1.05
  - slim / the official runtime image of a recent release (about 6 GB
    uncompressed, 2.6.0-cuda12.4-cudnn9-runtime)                     <= 0.8
  - full / slim, and the bytes full adds, split into JupyterLab +
    TensorBoard, SSH, compilers, the CUDA compiler (and the rest)

Speed section (the speed issue's targets), against the expert Dockerfile in bench/expert/:
see scripts/bench_speed.py (cold builds on both builders for both examples, the registry
cache on a fresh engine, zstd against gzip for the pull and first import, pip against uv, the
pruning steps).

Everything is built into a repository of its own and removed afterwards. The
figures are printed and written to bench/results/cpu.json, cuda.json and speed-*.json.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "cpu.yaml"
CUDA_EXAMPLE = ROOT / "examples" / "cuda-local.yaml"
# Docker Hub lists pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime at about 6 GB uncompressed.
OFFICIAL_RUNTIME_BYTES = 6_000_000_000

NAIVE_DOCKERFILE = """\
FROM {base}
RUN apt-get update && apt-get install -y build-essential python3-dev python3-pip python3-venv
COPY wheelhouse/ /wheelhouse/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --find-links /wheelhouse torch==2.13.0
"""


def run_build(
    matrix: Path, wheelhouse: Path, results: Path, *extra: str, ca: bool = False
) -> float:
    """Build `matrix`; `ca`: with the default CA bundle, as `make demo-cuda` builds (so its
    cached layers are reused), else with none."""
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "imagekit",
            "build",
            "--matrix",
            str(matrix),
            # The examples also name linux/arm64 (built under emulation: make demo-arm64).
            "--platform",
            "linux/amd64",
            "--wheelhouse",
            str(wheelhouse),
            *(() if ca else ("--no-ca-cert",)),
            "--results",
            str(results),
            *extra,
        ],
        env={**os.environ, "CI": "true"},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        sys.exit(f"bench: build failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def venv_bytes(client: docker.DockerClient, image: str) -> int:
    out = client.containers.run(image, ["du", "-sb", "/opt/venv"], remove=True)
    return int(out.decode().split()[0])


def remove_images(client: docker.DockerClient, repository: str, before: set[str]) -> None:
    """Remove the bench's images and the build stages it left (which are their children),
    in passes until nothing more goes."""
    while True:
        mine = [
            i
            for i in client.images.list(all=True)
            if any(t.startswith(repository) for t in i.tags)
            or (i.id not in before and not i.tags and i.labels.get("io.imagekit.stage"))
        ]
        removed = 0
        for image in mine:
            try:
                client.images.remove(image.id, force=True)
                removed += 1
            except docker.errors.APIError:
                continue  # a child still holds it; the next pass gets it
        if not mine or not removed:
            for image in mine:
                print(f"bench: could not remove {image.tags}", file=sys.stderr)
            return


def verify_json(image: str, results: Path, *args: str) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "imagekit",
            "verify",
            image,
            "--no-structure",
            "--results",
            str(results),
            "--json",
            *args,
        ],
        env={**os.environ, "CI": "true"},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        sys.exit(f"bench: verify failed:\n{done.stderr[-3000:]}")
    return next(iter(json.loads(done.stdout)["images"].values()))["verify"]


def audit_seconds(image: str, results: Path) -> tuple[float, int]:
    """The wall time of one `imagekit audit` of `image` against the distribution's security
    suite, warm (the second of two: the first fills the engine's and the OS's caches), and the
    pending fixes it found."""
    for _ in range(2):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "imagekit", "audit", image, "--results", str(results), "--json"],
            capture_output=True, text=True, cwd=ROOT, check=False,
        )  # fmt: skip
        took = time.monotonic() - started
        if done.returncode not in (0, 9):  # 9: it lacks fixes, which is a finding, not a fault
            sys.exit(f"bench: audit failed:\n{done.stderr[-3000:]}")
    record = next(iter(json.loads(done.stdout)["images"].values()))["audit"]
    return took, sum(1 for f in record["findings"] if f["fixed"])


def verify_figures(client: docker.DockerClient, image: str, work: Path) -> dict[str, float]:
    """One container for all probes against its floor, and against a container per probe."""
    started = time.monotonic()
    client.containers.run(image, ["true"], remove=True, entrypoint=[])
    start_s = time.monotonic() - started
    out = client.containers.run(
        image,
        [
            "python3",
            "-c",
            "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)",
        ],
        remove=True,
        entrypoint=[],
    )
    import_s = float(out.decode().strip().splitlines()[-1])
    record = verify_json(image, work / "verify")
    compute_s = sum(p["duration_s"] for p in record["probes"])
    per_probe = 0.0
    for probe in record["probes"]:
        single = verify_json(image, work / "verify-single", "--probes", probe["probe"])
        per_probe += single["timings"]["probe_wall_s"]
    return {
        "container_start_s": round(start_s, 3),
        "import_torch_s": round(import_s, 3),
        "probe_compute_s": round(compute_s, 3),
        "verify_wall_s": record["timings"]["probe_wall_s"],
        "per_probe_wall_s": round(per_probe, 3),
    }


def cpu_section(args: argparse.Namespace, client: docker.DockerClient) -> int:
    """The build, verify, audit and HPC (export, Slurm verify) figures of the CPU demo;
    returns how many targets were missed."""
    import bench_hpc

    repository = f"imagekit-bench-{secrets.token_hex(3)}/pytorch"
    before = {i.id for i in client.images.list(all=True)}
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-") as tmp:
        work = Path(tmp)
        matrix = work / "matrix.yaml"
        text = DEMO.read_text().replace("imagekit-demo/pytorch", repository)
        matrix.write_text(text.replace('"imagekit-base/debian:bookworm"', f'"{args.base}"'))
        results = work / "results"
        probe = ROOT / "probes" / "README.md"
        original = probe.read_text()
        try:
            print("bench: cold build (no cache) ...", file=sys.stderr)
            cold_s = run_build(matrix, args.wheelhouse, results, "--no-cache")
            print("bench: no-op rebuild ...", file=sys.stderr)
            noop_s = run_build(matrix, args.wheelhouse, results)
            probe.write_text(original + f"\n<!-- bench {secrets.token_hex(4)} -->\n")
            print("bench: rebuild after a probe change ...", file=sys.stderr)
            probe_s = run_build(matrix, args.wheelhouse, results)
            probe.write_text(original)

            slim_ref = f"{repository}:2.13.0-cpu-py3.11-slim"
            slim_bytes = client.images.get(slim_ref).attrs["Size"]
            full_bytes = client.images.get(f"{repository}:2.13.0-cpu-py3.11-full").attrs["Size"]
            base_bytes = client.images.get(args.base).attrs["Size"]
            venv = venv_bytes(client, slim_ref)

            print("bench: naive single-stage image ...", file=sys.stderr)
            naive_ctx = work / "naive"
            naive_ctx.mkdir()
            (naive_ctx / "Dockerfile").write_text(NAIVE_DOCKERFILE.format(base=args.base))
            subprocess.run(
                ["cp", "-al", str(args.wheelhouse), str(naive_ctx / "wheelhouse")], check=True
            )
            naive_tag = f"{repository}:naive"
            started = time.monotonic()
            client.images.build(path=str(naive_ctx), tag=naive_tag, rm=True, forcerm=True)
            naive_s = time.monotonic() - started
            naive_bytes = client.images.get(naive_tag).attrs["Size"]

            print("bench: verify, all probes in one container ...", file=sys.stderr)
            verify = verify_figures(client, slim_ref, work)
            print("bench: audit against the security suite ...", file=sys.stderr)
            audit_s, pending = audit_seconds(slim_ref, work / "audit")
            (work / "hpc").mkdir()
            hpc = bench_hpc.hpc_figures(client, slim_ref, work / "hpc")
        finally:
            probe.write_text(original)
            remove_images(client, repository, before)

    figures = {
        "cold_build_s": round(cold_s, 1),
        "noop_rebuild_s": round(noop_s, 1),
        "probe_change_rebuild_s": round(probe_s, 1),
        "naive_build_s": round(naive_s, 1),
        "slim_bytes": slim_bytes,
        "full_bytes": full_bytes,
        "base_bytes": base_bytes,
        "venv_bytes": venv,
        "naive_bytes": naive_bytes,
        "audit_warm_s": round(audit_s, 2),
        "audit_pending_fixes": pending,
    }
    figures |= verify | hpc
    floor = verify["container_start_s"] + verify["import_torch_s"] + verify["probe_compute_s"]
    ratios = [
        ("no-op rebuild / cold build", noop_s / cold_s, 0.02, "<="),
        ("probe-change rebuild / cold build", probe_s / cold_s, 0.02, "<="),
        ("slim / naive single-stage", slim_bytes / naive_bytes, 0.75, "<="),
        ("slim / (base + venv)", slim_bytes / (base_bytes + venv), 1.05, "<="),
        ("verify wall / (start + import + compute)", verify["verify_wall_s"] / floor, 1.3, "<="),
        (
            "one container per probe / one for all",
            verify["per_probe_wall_s"] / verify["verify_wall_s"],
            3.0,
            ">=",
        ),
        ("one audit of the slim, warm (s)", audit_s, 10.0, "<="),
    ]
    print_figures("build (CPU demo, torch 2.13.0, Debian 12)", figures)
    failed = print_ratios(ratios)
    write_results(args.out_dir / "cpu.json", figures, ratios)
    return failed


Ratio = tuple[str, float, float, str]


def print_figures(title: str, figures: dict) -> None:
    """Sizes in GB, times in seconds, one per line."""
    print(f"\nimagekit bench: {title}")
    for key, value in figures.items():
        shown = f"{value / 1e9:.3f} GB" if key.endswith("bytes") else f"{value:.2f} s"
        print(f"  {key:<30} {shown}")


def print_ratios(ratios: list[Ratio]) -> int:
    """Print each ratio against its target; returns how many were missed."""
    failed = 0
    for name, value, target, op in ratios:
        ok = value <= target if op == "<=" else value >= target
        failed += not ok
        print(f"  {name:<42} {value:.4f}  (target {op} {target})  {'ok' if ok else 'MISSED'}")
    return failed


def write_results(path: Path, figures: dict, ratios: list[Ratio], **extra: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "figures": figures,
        "ratios": {n: {"value": round(v, 4), "target": f"{op} {t}"} for n, v, t, op in ratios},
        **extra,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


# Run inside an image: every installed Python distribution with the bytes of its files, and
# every Debian package with its Installed-Size (KiB).
INVENTORY = r"""
import json, os, subprocess
from importlib import metadata
dists = {}
for dist in metadata.distributions():
    total = 0
    for f in dist.files or ():
        path = dist.locate_file(f)
        try:
            if not os.path.islink(path):
                total += os.path.getsize(path)
        except OSError:
            pass
    dists[dist.metadata["Name"].lower().replace("_", "-")] = total
out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Installed-Size}\\n"],
                     capture_output=True, text=True).stdout
debs = {n: int(s or 0) * 1024 for n, s in (line.split() for line in out.splitlines())}
print(json.dumps({"dists": dists, "debs": debs}))
"""

CUDA_COMPILER = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl")
SSH = ("openssh-", "libwrap0", "libcbor", "libfido2", "ncurses-term", "runit-helper")
COMPILERS = (
    "build-essential", "gcc", "g++", "cpp", "make", "binutils", "libc6-dev", "libc-dev-bin",
    "linux-libc-dev", "libgcc-", "libstdc++-", "libasan", "liblsan", "libtsan", "libubsan",
    "libitm", "libquadmath", "libatomic", "libgomp", "libcc1", "libisl", "libmpc", "libmpfr",
    "libctf", "libgprofng", "libjansson", "libsframe", "libbinutils", "libcrypt-dev", "libnsl-dev",
    "libtirpc-dev", "rpcsvc-proto", "dpkg-dev", "libdpkg-perl", "patch", "python3.11-dev",
    "libpython3.11-dev", "libpython3-dev", "python3-dev", "libexpat1-dev", "zlib1g-dev",
    "ninja-build", "libalgorithm-", "libfile-fcntllock-perl", "fakeroot", "libfakeroot",
)  # fmt: skip


def inventory(client: docker.DockerClient, image: str) -> dict:
    out = client.containers.run(image, ["python3", "-c", INVENTORY], remove=True, entrypoint=[])
    return json.loads(out.decode())


def full_additions(slim: dict, full: dict) -> dict[str, int]:
    """The bytes full adds to slim, by what they are for."""
    split = {
        "jupyterlab_tensorboard": 0,
        "ssh": 0,
        "compilers": 0,
        "cuda_compiler": 0,
        "triton_back": 0,
        "other_tools": 0,
    }
    for name, size in full["dists"].items():
        if name in slim["dists"]:
            continue
        if name.startswith(CUDA_COMPILER):
            split["cuda_compiler"] += size
        elif name == "triton":
            split["triton_back"] += size
        else:
            split["jupyterlab_tensorboard"] += size
    for name, size in full["debs"].items():
        if name in slim["debs"]:
            continue
        if name.startswith(SSH):
            split["ssh"] += size
        elif name.startswith(COMPILERS):
            split["compilers"] += size
        else:
            split["other_tools"] += size  # curl, git, less, tini, nss_wrapper and what they need
    return split


def cuda_section(args: argparse.Namespace, client: docker.DockerClient) -> int:
    """The size figures of the CUDA example; returns how many targets were missed."""
    repository = f"imagekit-bench-{secrets.token_hex(3)}/pytorch"
    before = {i.id for i in client.images.list(all=True)}
    with tempfile.TemporaryDirectory(prefix="imagekit-bench-cuda-") as tmp:
        work = Path(tmp)
        matrix = work / "matrix.yaml"
        text = CUDA_EXAMPLE.read_text().replace("imagekit-demo/pytorch", repository)
        matrix.write_text(text.replace('"imagekit-base/debian:bookworm"', f'"{args.base}"'))
        try:
            print(
                "bench: CUDA example build (layers the engine has cached are reused) ...",
                file=sys.stderr,
            )
            build_s = run_build(matrix, args.cuda_wheelhouse, work / "results", ca=True)
            tag = "2.14.1-cuda13.0-cudnn9-py3.11"
            slim_ref, full_ref = f"{repository}:{tag}-slim", f"{repository}:{tag}-full"
            slim_bytes = client.images.get(slim_ref).attrs["Size"]
            full_bytes = client.images.get(full_ref).attrs["Size"]
            base_bytes = client.images.get(args.base).attrs["Size"]
            venv = venv_bytes(client, slim_ref)
            adds = full_additions(inventory(client, slim_ref), inventory(client, full_ref))
            pruned = json.loads(
                client.containers.run(
                    slim_ref, ["cat", "/opt/venv/imagekit-pruned.json"], remove=True, entrypoint=[]
                )
            )
        finally:
            remove_images(client, repository, before)
    added = full_bytes - slim_bytes
    # The C/C++ headers slim keeps packed come back unpacked in full.
    adds["headers_unpacked"] = sum(pruned["headers_packed"].values())
    adds["unattributed"] = added - sum(adds.values())
    figures = {
        "build_s": round(build_s, 1),
        "slim_bytes": slim_bytes,
        "base_bytes": base_bytes,
        "venv_bytes": venv,
        "full_bytes": full_bytes,
        "full_adds_bytes": added,
        "pruned_from_slim_venv_bytes": pruned["saved_bytes"],
        "official_runtime_bytes": OFFICIAL_RUNTIME_BYTES,
    }
    ratios: list[Ratio] = [
        ("CUDA slim / (base + venv)", slim_bytes / (base_bytes + venv), 1.05, "<="),
        (
            "CUDA slim / official runtime image (6 GB)",
            slim_bytes / OFFICIAL_RUNTIME_BYTES,
            0.8,
            "<=",
        ),
    ]
    print_figures("CUDA (torch 2.14.1, CUDA 13.0, Debian 12)", figures)
    print(f"  full / slim                    {full_bytes / slim_bytes:.3f}")
    print("  what full adds (Python packages by RECORD, Debian packages by Installed-Size):")
    for key, value in adds.items():
        print(f"    {key:<28} {value / 1e9:.3f} GB")
    failed = print_ratios(ratios)
    write_results(
        args.out_dir / "cuda.json",
        figures,
        ratios,
        full_over_slim=round(full_bytes / slim_bytes, 4),
        full_adds=adds,
    )
    return failed


def speed(args: argparse.Namespace, client: docker.DockerClient) -> int:
    """imagekit against the expert Dockerfile (scripts/bench_speed.py); targets missed."""
    import bench_speed

    wheelhouses = {"cpu": args.wheelhouse, "cuda": args.cuda_wheelhouse}
    if args.speed_examples:
        wheelhouses = {k: v for k, v in wheelhouses.items() if k in args.speed_examples}
    failed = 0
    builders = tuple(args.speed_builders or ("sdk", "buildx", "default"))
    parts = tuple(args.speed_parts or bench_speed.PARTS)
    engines = tuple(args.speed_engines or ("host",))
    for example, document, ratios in bench_speed.speed_section(
        client, args.base, wheelhouses, builders, parts, engines, args.speed_rounds
    ):
        print(f"\nimagekit bench: speed against the expert Dockerfile ({example})")
        print(json.dumps(document, indent=1))
        failed += print_ratios(ratios)
        merge_results(args.out_dir / f"speed-{example}.json", document, ratios)
    return failed


def layers(args: argparse.Namespace, client: docker.DockerClient) -> int:
    """The bytes neighbouring CUDA images share (scripts/bench_layers.py); targets missed."""
    import bench_layers

    failed = 0
    wheelhouses = [args.cuda_wheelhouse, args.neighbour_wheelhouse]
    # BuildKit: what CI pipelines build with, and a CUDA pair in half the legacy builder's time
    # on the containerd store; the layers are the same on both builders (the test of issue 29).
    sections = bench_layers.layers_section(client, args.base, wheelhouses, builder="buildx")
    for figures, ratios in sections:
        print("\nimagekit bench: layers shared by neighbouring CUDA images")
        print(json.dumps(figures, indent=1))
        failed += print_ratios(ratios)
        write_results(args.out_dir / "layers.json", figures, ratios, engine=engine_row(client))
    return failed


def engine_row(client: docker.DockerClient) -> dict[str, str]:
    """The engine and image store a figure was measured on, for its row."""
    from imagekit.adapters.engine import DockerEngine

    info = DockerEngine(client).info()
    return {"engine": info.describe(), "image_store": info.image_store}


def merge_results(path: Path, parts: dict, ratios: list[Ratio]) -> None:
    """Write the parts measured now over those of an earlier run (each part keeps the time
    it was measured at), so a run of some parts does not drop the others."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    document = json.loads(path.read_text()) if path.is_file() else {"figures": {}, "ratios": {}}
    for name, figures in parts.items():
        earlier = document["figures"].get(name)
        if name == "builds" and isinstance(earlier, dict):
            # A run of one engine or builder keeps the others' rows; rows named by the builder
            # alone (before rows named their engine) go.
            earlier = {k: v for k, v in earlier.items() if ":" in k}
            figures = {**earlier, **figures}
        document["figures"][name] = figures
        document.setdefault("measured_at", {})
        if isinstance(document["measured_at"], dict):
            document["measured_at"][name] = now
    for n, v, t, op in ratios:
        document["ratios"][n] = {"value": round(v, 4), "target": f"{op} {t}", "measured_at": now}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheelhouse", type=Path, help="the CPU demo's wheelhouse")
    parser.add_argument("--cuda-wheelhouse", type=Path, help="the CUDA example's wheelhouse")
    parser.add_argument("--base", default="imagekit-base/debian:bookworm")
    parser.add_argument("--only", choices=("cpu", "cuda", "speed", "layers"))
    parser.add_argument(
        "--neighbour-wheelhouse", type=Path, help="torch 2.13.0's CUDA 13.0 wheels (layers)"
    )
    parser.add_argument(
        "--speed-examples", nargs="*", choices=("cpu", "cuda"), help="the speed section's examples"
    )
    parser.add_argument(
        "--speed-parts",
        nargs="*",
        choices=("builds", "cache", "installers", "pull"),
        help="the speed section's parts (default: all)",
    )
    parser.add_argument(
        "--speed-builders",
        nargs="*",
        choices=("sdk", "buildx", "default"),
        help="the speed section's builders; default: `docker build` and `imagekit build` as"
        " typed, each picking its own (default: sdk buildx default)",
    )
    parser.add_argument(
        "--speed-engines",
        nargs="*",
        choices=("host", "docker20", "docker26-classic", "docker26-containerd"),
        help="the engines the speed section builds on (default: the host's)",
    )
    parser.add_argument(
        "--speed-rounds",
        type=int,
        default=1,
        help="cold builds of the expert and of slim, taking turns, per row: each round's"
        " seconds are recorded and the ratio is of their medians (default: 1)",
    )
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    sections = [args.only] if args.only else ["cpu", "cuda", "speed", "layers"]
    speed_examples = args.speed_examples or ["cpu", "cuda"]
    for section, needs in (("cpu", args.wheelhouse), ("cuda", args.cuda_wheelhouse)):
        wanted = section in sections or ("speed" in sections and section in speed_examples)
        if wanted and needs is None:
            parser.error(
                f"the {section} section needs --{'cuda-' if section == 'cuda' else ''}wheelhouse"
            )
    client = docker.from_env(version="auto", timeout=1800)
    missed = 0
    if "cpu" in sections:
        missed += cpu_section(args, client)
    if "cuda" in sections:
        missed += cuda_section(args, client)
    if "speed" in sections:
        missed += speed(args, client)
    if "layers" in sections:
        if args.cuda_wheelhouse is None or args.neighbour_wheelhouse is None:
            parser.error("the layers section needs --cuda-wheelhouse and --neighbour-wheelhouse")
        missed += layers(args, client)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
