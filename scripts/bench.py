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

Everything is built into a repository of its own and removed afterwards. The
figures are printed and written to bench/results/cpu.json.
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

NAIVE_DOCKERFILE = """\
FROM {base}
RUN apt-get update && apt-get install -y build-essential python3-dev python3-pip python3-venv
COPY wheelhouse/ /wheelhouse/
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --find-links /wheelhouse torch==2.13.0
"""


def run_build(matrix: Path, wheelhouse: Path, results: Path, *extra: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "imagekit",
            "build",
            "--matrix",
            str(matrix),
            "--wheelhouse",
            str(wheelhouse),
            "--no-ca-cert",
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--base", default="imagekit-base/debian:bookworm")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cpu.json")
    args = parser.parse_args()

    client = docker.from_env(version="auto", timeout=1800)
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
    }
    figures |= verify
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
    ]
    print("\nimagekit bench: build (CPU demo, torch 2.13.0, Debian 12)")
    for key, value in figures.items():
        shown = f"{value / 1e9:.3f} GB" if key.endswith("bytes") else f"{value:.2f} s"
        print(f"  {key:<24} {shown}")
    failed = 0
    for name, value, target, op in ratios:
        ok = value <= target if op == "<=" else value >= target
        failed += not ok
        print(f"  {name:<42} {value:.4f}  (target {op} {target})  {'ok' if ok else 'MISSED'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "figures": figures,
                "ratios": {
                    n: {"value": round(v, 4), "target": f"{op} {t}"} for n, v, t, op in ratios
                },
            },
            indent=2,
        )
        + "\n"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
