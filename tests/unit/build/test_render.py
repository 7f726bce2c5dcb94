"""Rendering: the Dockerfiles and build contexts imagekit writes, and their input hashes."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.adapters.contexts import (
    compare_tree,
    read_static_manifest,
    render_tree,
    swap_static_for_manifest,
    write_folder,
)
from imagekit.adapters.lint import lint
from imagekit.build import context
from imagekit.build.context import (
    PLAN_FILE,
    STATIC_FILES,
    STATIC_MANIFEST,
    ContextInputs,
    check_wheelhouse,
    context_files,
    input_hash,
    resolve_ca_bundle,
)
from imagekit.build.render import (
    FULL_FILES,
    LAYER_SCRIPT,
    PRUNE_SCRIPT,
    SITE_FILES,
    RenderedImage,
    RenderOptions,
    render_image,
)
from imagekit.build.security import SecurityStep
from imagekit.errors import InputError
from imagekit.matrix.load import Matrix, load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.resources import templates_dir
from tests.fakes import counting_file_sha256

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden"


@pytest.fixture(scope="module")
def default_matrix() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


@pytest.fixture(scope="module")
def golden_matrix() -> Matrix:
    return load_matrix(GOLDEN / "matrix.yaml")


def plan_named(matrix: Matrix, name: str) -> ImagePlan:
    return next(p for p in matrix.plans if p.name == name)


def write_context(
    rendered: RenderedImage,
    out: Path,
    inputs: ContextInputs | None = None,
    *,
    input_hash: str | None = None,
) -> Path:
    """One image's context written to `out/<name>/`, as a build or `render --out` writes it."""
    files = context_files(rendered, inputs, input_hash=input_hash)
    return write_folder(out, rendered.plan.name, files)


def stages(dockerfile: str) -> list[str]:
    """The Dockerfile split at each FROM, the text before the first FROM dropped."""
    return re.split(r"(?m)^FROM ", dockerfile)[1:]


def instructions(stage: str) -> list[str]:
    """The instruction keywords of a stage, continuation lines and comments skipped."""
    words, continued = [], False
    for line in stage.splitlines()[1:]:
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            words.append(stripped.split()[0])
        continued = stripped.endswith("\\")
    return words


@pytest.mark.parametrize("folder,buildkit", [("docker", False), ("buildkit", True)])
def test_committed_goldens_match_a_fresh_render(
    golden_matrix: Matrix, folder: str, buildkit: bool
) -> None:
    options = RenderOptions(buildkit=buildkit)
    plans = list(golden_matrix.plans)
    differences = compare_tree(
        plans, options, ContextInputs(), GOLDEN / folder, static_manifest=True
    )
    assert differences == [], "\n".join(differences) + "\nrun `make goldens` if intended"
    for plan in plans:
        # Goldens hold only what is rendered: the static files are in the manifest, not copied.
        rendered = render_image(plan, options)
        kept = {p.name for p in (GOLDEN / folder / plan.name).iterdir()}
        rendered_names = {"Dockerfile", PLAN_FILE, *rendered.files} - STATIC_FILES
        assert kept == rendered_names | {STATIC_MANIFEST}


def template_source(name: str) -> Path:
    return templates_dir() / ("full" if name in FULL_FILES else "") / name


def test_golden_static_manifests_list_the_template_sources_by_sha256() -> None:
    assert {*FULL_FILES, PRUNE_SCRIPT, LAYER_SCRIPT, *SITE_FILES} == STATIC_FILES
    manifests = sorted(GOLDEN.glob(f"*/*/{STATIC_MANIFEST}"))
    assert len(manifests) == 2 * len(list(GOLDEN.glob("docker/*/" + PLAN_FILE)))
    for manifest in manifests:
        listed = read_static_manifest(manifest)
        assert PRUNE_SCRIPT in listed and set(listed) <= STATIC_FILES, manifest
        for name, sha in listed.items():
            assert sha == hashlib.sha256(template_source(name).read_bytes()).hexdigest(), (
                f"{manifest}: {name} differs from templates/; run `make goldens` if intended"
            )


def test_a_changed_golden_is_reported_with_a_diff(golden_matrix: Matrix, tmp_path: Path) -> None:
    plans = list(golden_matrix.plans)
    render_tree(plans, RenderOptions(), ContextInputs(), tmp_path)
    target = tmp_path / plans[0].name / "Dockerfile"
    target.write_text(target.read_text().replace("pipefail", "errexit"))
    differences = compare_tree(plans, RenderOptions(), ContextInputs(), tmp_path)
    assert len(differences) == 1
    assert '-SHELL ["/bin/bash", "-o", "errexit"' in differences[0]


def test_a_rendered_out_dir_is_compared_file_by_file_static_files_included(
    golden_matrix: Matrix, tmp_path: Path
) -> None:
    plans = list(golden_matrix.plans)
    render_tree(plans, RenderOptions(), ContextInputs(), tmp_path)
    assert compare_tree(plans, RenderOptions(), ContextInputs(), tmp_path) == []
    script = tmp_path / plans[0].name / PRUNE_SCRIPT
    script.write_text(script.read_text() + "# edited\n")
    (tmp_path / plans[-1].name / PRUNE_SCRIPT).unlink()
    differences = compare_tree(plans, RenderOptions(), ContextInputs(), tmp_path)
    assert len(differences) == 2
    assert "-# edited" in differences[0]
    assert differences[1].endswith(f"{PRUNE_SCRIPT}: missing")


def test_a_static_file_is_checked_by_the_manifest_in_a_golden_style_folder(
    golden_matrix: Matrix, tmp_path: Path
) -> None:
    plans = list(golden_matrix.plans)
    render_tree(plans, RenderOptions(), ContextInputs(), tmp_path)
    manifests = swap_static_for_manifest(tmp_path)
    assert len(manifests) == len(plans)
    assert not list(tmp_path.glob(f"*/{PRUNE_SCRIPT}"))
    for strict in (True, None):  # None: the manifest is found, as `imagekit render --check` does
        compare = compare_tree(
            plans, RenderOptions(), ContextInputs(), tmp_path, static_manifest=strict
        )
        assert compare == []
    # Without the manifest, the missing copies are differences.
    assert compare_tree(plans, RenderOptions(), ContextInputs(), tmp_path, static_manifest=False)
    manifest = manifests[0]
    text = manifest.read_text()
    sha = read_static_manifest(manifest)[PRUNE_SCRIPT]
    manifest.write_text(text.replace(sha, "0" * 64))
    differences = compare_tree(plans, RenderOptions(), ContextInputs(), tmp_path)
    assert differences == [f"{manifest}: {PRUNE_SCRIPT} is {'0' * 64}, fresh render {sha}"]
    manifest.unlink()
    differences = compare_tree(
        plans, RenderOptions(), ContextInputs(), tmp_path, static_manifest=True
    )
    assert differences == [f"{manifest}: missing"]


def test_rendering_is_byte_identical_for_the_same_input(default_matrix: Matrix) -> None:
    for plan in default_matrix.plans:
        first, second = render_image(plan), render_image(plan)
        assert first.dockerfile == second.dockerfile
        assert first.files == second.files
        assert input_hash(first, ContextInputs()) == input_hash(second, ContextInputs())


def test_slim_has_a_builder_stage_and_a_runtime_stage_that_only_copies_the_venv(
    default_matrix: Matrix,
) -> None:
    text = render_image(plan_named(default_matrix, "2.8.0-cu128-py3.12-slim")).dockerfile
    builder, runtime = stages(text)
    assert builder.startswith("${BASE_IMAGE} AS builder")
    assert (
        "/tmp/imagekit/uv pip install --python /opt/venv/bin/python --compile-bytecode" in builder
    )
    assert "--index-url https://download.pytorch.org/whl/cu128 -r" in builder
    assert runtime.startswith("${BASE_IMAGE} AS runtime")
    # The venv, in its layers (tests/unit/build/test_layer_venv.py): the builder's folders,
    # nothing else.
    copied = [x for x in runtime.splitlines() if x.startswith("COPY")]
    assert copied and all(
        re.fullmatch(r"COPY --from=builder /tmp/imagekit/layers/[a-z0-9-]+/ /", x) for x in copied
    ), copied
    assert "pip install" not in runtime
    for forbidden in ("build-essential", "gcc", "nvidia-cuda-nvcc", "libcudnn"):
        assert forbidden not in runtime
    # apt's lists leave (what the base held, the lock and partial/, stays: not a whiteout).
    assert "find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name lock ! -name partial" in runtime


def test_slim_requirements_pin_torch_and_nothing_brings_cuda_twice(default_matrix: Matrix) -> None:
    rendered = render_image(plan_named(default_matrix, "2.14.1-cu130-py3.12-slim"))
    assert set(rendered.files) == {
        "requirements.txt",
        "prune_venv.py",
        "layer_venv.py",
        "imagekit_site.py",
        "imagekit-site.pth",
    }
    # numpy: without it every `import torch` warns; pip resolves it with torch's own deps.
    assert rendered.files["requirements.txt"] == (
        "# Rendered by imagekit for slim 2.14.1-cu130-py3.12; do not edit by hand.\n"
        "torch==2.14.1\nnumpy\n"
    )
    assert "ubuntu:24.04" in rendered.build_args["BASE_IMAGE"]


def test_full_is_built_from_the_slim_image_of_its_cell(default_matrix: Matrix) -> None:
    plan = plan_named(default_matrix, "2.14.1-cu130-py3.12-full")
    rendered = render_image(plan)
    slim = plan_named(default_matrix, "2.14.1-cu130-py3.12-slim")
    assert f"ARG SLIM_IMAGE={slim.reference}" in rendered.dockerfile
    assert rendered.build_args == {"SLIM_IMAGE": slim.reference}
    full_builder, full = stages(rendered.dockerfile)
    assert full_builder.startswith("${SLIM_IMAGE} AS full-builder")
    assert full.startswith("${SLIM_IMAGE} AS full")
    for package in ("build-essential", "git", "openssh-server", "python3.12-dev"):
        assert package in full
    # The host keys go in the RUN that installs openssh-server (where the base lacks it).
    assert "rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub" in full
    requirements = rendered.files["requirements-full.txt"]
    for package in ("jupyterlab==", "tensorboard==", "nvidia-cuda-nvcc==13.0.*"):
        assert package in requirements
    assert "    CUDA_HOME=/opt/venv/lib/python3.12/site-packages/nvidia/cu13 \\\n" in full


def test_full_of_a_cpu_cell_has_no_cuda_compiler(default_matrix: Matrix) -> None:
    rendered = render_image(plan_named(default_matrix, "2.15.0-cpu-py3.12-full"))
    assert "nvidia" not in rendered.files["requirements-full.txt"]
    assert "CUDA_HOME" not in rendered.dockerfile
    assert "NVIDIA_REQUIRE_CUDA" not in rendered.dockerfile


@pytest.mark.parametrize("flavour", ["slim", "full"])
def test_images_run_as_a_numeric_non_root_user_in_workspace(
    default_matrix: Matrix, flavour: str
) -> None:
    text = render_image(plan_named(default_matrix, f"2.15.0-cu132-py3.12-{flavour}")).dockerfile
    final = stages(text)[-1]
    users = re.findall(r"(?m)^USER (.+)$", final)
    # full starts as root for its entrypoint only, which hands over to the owner of
    # /workspace (tests/integration/test_first_hour.py); the image names its user. The group
    # nogroup marks that start apart from a typed `--user 0:0`.
    assert users[-1] == ("1000:100" if flavour == "slim" else "0:65534")
    assert 'io.imagekit.user="1000:100"' in text
    # full is FROM slim and keeps slim's working directory.
    workdirs = re.findall(r"(?m)^WORKDIR (.+)$", final)
    assert workdirs == (["/workspace"] if flavour == "slim" else [])
    assert "ADD " not in text
    cmd = re.findall(r"(?m)^CMD (.+)$", text)
    assert cmd and cmd[-1].startswith("[")
    assert 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]' in final


def test_slim_creates_home_and_a_workspace_the_user_owns(default_matrix: Matrix) -> None:
    text = render_image(plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")).dockerfile
    assert "useradd --uid 1000 --gid 100 --create-home" in text
    assert "install -d -o 1000 -g 100 -m 2775 /workspace" in text
    assert "HOME=/home/ml" in text


def test_cuda_cells_carry_nvidia_variables_and_imagekit_labels(default_matrix: Matrix) -> None:
    rendered = render_image(plan_named(default_matrix, "2.14.1-cu130-py3.12-slim"))
    text = rendered.dockerfile
    assert "NVIDIA_VISIBLE_DEVICES=all" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in text
    labels = rendered.labels
    assert labels["io.imagekit.torch"] == "2.14.1"
    assert labels["io.imagekit.cuda"] == "13.0"
    assert labels["io.imagekit.cudnn"] == "9.24.0.43"
    assert labels["io.imagekit.nccl"] == "2.30.7"
    assert labels["io.imagekit.min-driver"] == "580.65.06"
    assert "sm_90" in labels["io.imagekit.cuda-archs"].split()
    assert labels["io.imagekit.flavour"] == "slim"
    assert labels["io.imagekit.cell"] == "2.14.1-cu130-py3.12"
    assert labels["org.opencontainers.image.base.name"] == "ubuntu:24.04"
    assert labels["org.opencontainers.image.source"] == "https://github.com/acme-ml/pytorch-images"
    for key, value in labels.items():
        assert f'{key}="{value}"' in text


def test_created_and_revision_labels_appear_only_when_given(default_matrix: Matrix) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    plain = render_image(plan).dockerfile
    assert "image.created" not in plain and "image.revision" not in plain
    stamped = render_image(plan, RenderOptions(created="2026-11-30T00:00:00Z", revision="abc123"))
    assert 'org.opencontainers.image.created="2026-11-30T00:00:00Z"' in stamped.dockerfile
    assert 'org.opencontainers.image.revision="abc123"' in stamped.dockerfile


def test_label_values_are_escaped_so_they_cannot_break_out_of_quotes(
    default_matrix: Matrix,
) -> None:
    plan = replace(plan_named(default_matrix, "2.15.0-cpu-py3.12-slim"), source='x" \\ $HOME')
    text = render_image(plan).dockerfile
    assert 'org.opencontainers.image.source="x\\" \\\\ \\$HOME"' in text


@pytest.mark.parametrize("name", ["2.8.0-cu128-py3.12-slim", "2.8.0-cu128-py3.12-full"])
def test_ca_bundle_reaches_only_builder_stages_with_the_legacy_builder(
    default_matrix: Matrix, name: str
) -> None:
    text = render_image(plan_named(default_matrix, name), RenderOptions(ca_bundle=True)).dockerfile
    *builders, final = stages(text)
    assert any(re.search(r"(?m)^COPY .* ca-bundle\.crt /tmp/imagekit/$", b) for b in builders)
    assert "ca-bundle" not in final
    assert "PIP_CERT" not in final


@pytest.mark.parametrize("name", ["2.8.0-cu128-py3.12-slim", "2.8.0-cu128-py3.12-full"])
def test_ca_bundle_is_a_secret_mount_with_buildkit(default_matrix: Matrix, name: str) -> None:
    options = RenderOptions(ca_bundle=True, buildkit=True)
    text = render_image(plan_named(default_matrix, name), options).dockerfile
    assert "# syntax=" not in text  # a frontend pull would fail air-gapped
    assert "--mount=type=secret,id=ca,target=/tmp/imagekit/ca-bundle.crt" in text
    assert "COPY ca-bundle.crt" not in text
    assert "--mount=type=cache" in text


def test_the_legacy_render_has_no_buildkit_only_syntax(default_matrix: Matrix) -> None:
    for plan in default_matrix.plans:
        text = render_image(plan, RenderOptions(ca_bundle=True)).dockerfile
        assert "--mount=" not in text
        assert "# syntax=" not in text
        assert "<<" not in text  # heredocs are BuildKit-only


def test_wheelhouse_installs_offline(default_matrix: Matrix) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    text = render_image(plan, RenderOptions(wheelhouse=True)).dockerfile
    assert "COPY wheelhouse/ /tmp/imagekit/wheelhouse/" in text
    assert "--no-index --find-links /tmp/imagekit/wheelhouse" in text
    assert "--index-url" not in text


def test_mirrors_replace_the_default_indexes(default_matrix: Matrix) -> None:
    plan = plan_named(default_matrix, "2.15.0-cu132-py3.12-full")
    options = RenderOptions(
        pip_index_url="https://mirror.example/simple", extra_index_urls=("https://extra.example",)
    )
    text = render_image(plan, options).dockerfile
    assert (
        "--index-url https://mirror.example/simple --extra-index-url https://extra.example" in text
    )
    assert "pypi.org" not in text


def test_hadolint_finds_nothing_at_warning_level_in_the_default_matrix(
    default_matrix: Matrix,
) -> None:
    failing = []
    # The security step an Ubuntu base from a registry gets (imagekit check cannot know which
    # bases get it: only the build sees the base).
    noble = SecurityStep(
        "http://security.ubuntu.com/ubuntu", "noble-security", "main restricted universe "
        "multiverse", "main/binary-amd64/Packages.xz", "ab" * 32,
    )  # fmt: skip
    for plan in default_matrix.plans[:6]:  # imagekit check covers all; a sample keeps this fast
        for options in (RenderOptions(), RenderOptions(buildkit=True, ca_bundle=True)):
            for step in (None, noble):
                dockerfile = render_image(plan, options, step).dockerfile
                failing += [f for f in lint(plan.name, dockerfile) if f.fails]
    assert failing == []


def test_hadolint_reports_a_real_problem() -> None:
    findings = lint("bad", "FROM ubuntu\nRUN cd /tmp && apt-get install -y curl\nADD x /x\n")
    codes = {f.code for f in findings if f.fails}
    assert "DL3020" in codes  # ADD for a local file


def test_input_hash_follows_every_input(default_matrix: Matrix, tmp_path: Path) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    base = input_hash(render_image(plan), ContextInputs())
    other_plan = replace(plan, packages=("numpy==2.1.0",))
    assert input_hash(render_image(other_plan), ContextInputs()) != base
    ca = tmp_path / "ca.crt"
    ca.write_text("one")
    with_ca = input_hash(
        render_image(plan, RenderOptions(ca_bundle=True)), ContextInputs(ca_bundle=ca)
    )
    ca.write_text("two")
    assert (
        input_hash(render_image(plan, RenderOptions(ca_bundle=True)), ContextInputs(ca_bundle=ca))
        != with_ca
    )
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.15.0-cp312-none-any.whl").write_bytes(b"a")
    options = RenderOptions(wheelhouse=True)
    first = input_hash(render_image(plan, options), ContextInputs(wheelhouse=wheels))
    (wheels / "torch-2.15.0-cp312-none-any.whl").write_bytes(b"b")
    assert input_hash(render_image(plan, options), ContextInputs(wheelhouse=wheels)) != first


def wheelhouse_and_ca(tmp_path: Path) -> ContextInputs:
    wheels = tmp_path / "wheels"
    (wheels / "sub").mkdir(parents=True)
    (wheels / "torch-2.15.0-cp312-none-any.whl").write_bytes(b"torch")
    (wheels / "sub" / "numpy-2.1.0-cp312-none-any.whl").write_bytes(b"numpy")
    (wheels / ".complete").write_text("")
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    installer = tmp_path / "uv"
    installer.write_bytes(b"uv")
    return ContextInputs(wheelhouse=wheels, ca_bundle=ca, installer=installer)


def test_write_context_records_the_hash_it_is_given_and_hashes_no_file_again(
    default_matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    inputs = wheelhouse_and_ca(tmp_path)
    rendered = render_image(plan, RenderOptions(wheelhouse=True, ca_bundle=True))
    hashed = counting_file_sha256(monkeypatch, context)
    digest = input_hash(rendered, inputs, {"parent_image_id": "sha256:" + "b" * 64})
    # Two wheels, the CA bundle and the installer, each once; the stamp is no wheel.
    assert len(hashed) == 4
    folder = write_context(rendered, tmp_path / "out", inputs, input_hash=digest)
    assert len(hashed) == 4
    assert json.loads((folder / PLAN_FILE).read_text())["input_hash"] == digest
    assert (folder / "wheelhouse" / "sub" / "numpy-2.1.0-cp312-none-any.whl").is_file()
    # Without a given hash it is computed once, without engine inputs.
    folder = write_context(rendered, tmp_path / "out", inputs)
    assert len(hashed) == 8
    assert json.loads((folder / PLAN_FILE).read_text())["input_hash"] == input_hash(
        rendered, inputs
    )


def test_render_and_compare_tree_hash_each_external_file_once(
    golden_matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans = list(golden_matrix.plans)
    inputs = wheelhouse_and_ca(tmp_path)
    options = RenderOptions(wheelhouse=True, ca_bundle=True)
    hashed = counting_file_sha256(monkeypatch, context)
    folders = render_tree(plans, options, inputs, tmp_path / "out")
    assert len(hashed) == 4  # once for all plans
    for folder, plan in zip(folders, plans, strict=True):
        recorded = json.loads((folder / PLAN_FILE).read_text())["input_hash"]
        assert recorded == input_hash(render_image(plan, options), inputs)
    hashed.clear()
    assert compare_tree(plans, options, inputs, tmp_path / "out") == []
    assert len(hashed) == 4


def stop_builder(requests: list) -> type:
    """A builder that keeps each request and builds nothing: the context is written by then."""
    from imagekit.build.ports import BuildOutcome, BuildRequest

    class StopBuilder:
        name = "stop"

        def build(self, request: BuildRequest, on_line: object) -> BuildOutcome:
            requests.append(request)
            return BuildOutcome(False, None, "stopped after the context was written")

    return StopBuilder


def test_the_plan_file_carries_the_hash_the_build_labels_the_image_with(
    default_matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagekit.build import use_case as build
    from imagekit.build.ports import BuildRequest
    from imagekit.kernel import labels as L
    from tests.fakes import FakeEngine, store

    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    options = RenderOptions(wheelhouse=True, ca_bundle=True)
    inputs = wheelhouse_and_ca(tmp_path)
    parent_ref = render_image(plan, options).build_args["BASE_IMAGE"]
    engine = FakeEngine()
    parent = engine.add(parent_ref, "sha256:" + "b" * 64)
    requests: list[BuildRequest] = []
    StopBuilder = stop_builder(requests)

    contexts = build.BuildContexts(options, inputs)
    run = store(tmp_path)  # the context is written into the run's folder, as a build does
    build_run = build.BuildRun(
        engine, StopBuilder(), [plan], build.BuildSettings(), contexts, run, lambda event: None
    )
    hashed = counting_file_sha256(monkeypatch, context)
    result = build_run._build_one(plan)
    (request,) = requests
    recorded = json.loads((request.context_dir / PLAN_FILE).read_text())["input_hash"]
    assert recorded == request.labels[L.INPUT_HASH] == result.input_hash
    assert recorded == input_hash(
        render_image(plan, options), inputs, {"parent_image_id": parent.id}
    )
    assert len(hashed) == 4 + 4  # the build's four files, then this test's own check
    assert len(set(hashed)) == 4


def test_zstd_layers_are_another_input_and_the_buildkit_options_reach_the_builder(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    """A build that forces a compression is another image (and unforced hashes stay as they
    were); the cache repositories become one reference per image, tagged as the image is."""
    from imagekit.adapters.builders import buildx_output
    from imagekit.build import use_case as build
    from imagekit.build.options import BuilderChoice
    from imagekit.build.ports import BuildRequest
    from tests.fakes import FakeEngine, store

    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    options = RenderOptions(buildkit=True)
    inputs = ContextInputs(installer=tmp_path / "uv")
    inputs.installer.write_bytes(b"uv")  # type: ignore[union-attr]
    engine = FakeEngine()
    parent = engine.add(render_image(plan, options).build_args["BASE_IMAGE"], "sha256:" + "b" * 64)
    requests: list[BuildRequest] = []
    StopBuilder = stop_builder(requests)

    run = store(tmp_path)
    hashes = {}
    for compression in (None, "gzip", "zstd"):
        settings = build.BuildSettings(
            builder=BuilderChoice.BUILDX, compression=compression,
            cache_from="127.0.0.1:5000/cache/pytorch", cache_to="127.0.0.1:5000/cache/out",
            network="none",
        )  # fmt: skip
        contexts = build.BuildContexts(options, inputs)
        result = build.BuildRun(
            engine, StopBuilder(), [plan], settings, contexts, run, lambda e: None
        )._build_one(plan)
        hashes[compression] = result.input_hash
    _, gzip_request, zstd_request = requests
    assert hashes[None] == input_hash(
        render_image(plan, options), inputs, {"parent_image_id": parent.id}
    )
    assert len(set(hashes.values())) == 3
    assert (gzip_request.compression, zstd_request.compression) == ("gzip", "zstd")
    assert zstd_request.cache_from == f"127.0.0.1:5000/cache/pytorch:{plan.tag}"
    assert zstd_request.cache_to == f"127.0.0.1:5000/cache/out:{plan.tag}"
    assert zstd_request.network == "none"
    assert buildx_output(requests[0]) == ["--load", "--provenance=false"]
    assert buildx_output(zstd_request) == [
        "--provenance=false",
        "--output",
        "type=image,compression=zstd,force-compression=true,oci-mediatypes=true",
    ]


def test_probe_files_are_not_part_of_any_build_context(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    folder = write_context(render_image(plan), tmp_path)
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*")}
    assert names == {
        "Dockerfile",
        "requirements.txt",
        "prune_venv.py",
        "layer_venv.py",
        "imagekit-plan.json",
        "imagekit_site.py",
        "imagekit-site.pth",
        "uv",  # the installer, imagekit's own
    }
    # Only the label naming the required probes mentions them: no instruction copies one.
    dockerfile = render_image(plan).dockerfile
    lines = dockerfile.splitlines()
    assert any(line.strip().startswith("io.imagekit.required-probes=") for line in lines)
    assert all("probe" not in line for line in lines if "required-probes" not in line)


def test_write_context_copies_the_wheelhouse_and_ca_and_replaces_stale_files(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    wheels = tmp_path / "wheels"
    (wheels / "sub").mkdir(parents=True)
    (wheels / "sub" / "a.whl").write_bytes(b"wheel")
    ca = tmp_path / "ca.crt"
    ca.write_text("ca")
    out = tmp_path / "out"
    stale = out / plan.name / "old.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    folder = write_context(
        render_image(plan, RenderOptions(wheelhouse=True, ca_bundle=True)),
        out,
        ContextInputs(wheelhouse=wheels, ca_bundle=ca),
    )
    assert (folder / "wheelhouse" / "sub" / "a.whl").read_bytes() == b"wheel"
    assert (folder / "ca-bundle.crt").read_text() == "ca"
    assert not stale.exists()


def test_a_context_folder_cannot_escape_the_output_folder(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    evil = replace(plan, cell=replace(plan.cell, id="../../evil"))
    with pytest.raises(InputError, match="outside"):
        write_context(render_image(evil), tmp_path / "out")


PEM = "-----BEGIN CERTIFICATE-----\n"


@pytest.mark.parametrize(
    "environ,expected",
    [
        ({}, None),
        ({"SSL_CERT_FILE": "B"}, "B"),
        ({"REQUESTS_CA_BUNDLE": "C", "SSL_CERT_FILE": "B"}, "B"),
        ({"PIP_CERT": "A", "SSL_CERT_FILE": "B"}, "A"),
    ],
)
def test_ca_bundle_defaults_from_pip_cert_then_ssl_cert_file_then_requests(
    tmp_path: Path, environ: dict[str, str], expected: str | None
) -> None:
    for name in "ABC":
        (tmp_path / name).write_text(f"{PEM}{name}\n-----END CERTIFICATE-----\n")
    env = {k: str(tmp_path / v) for k, v in environ.items()}
    found = resolve_ca_bundle(None, env)
    assert (found.name if found else None) == expected


def test_a_ca_variable_naming_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"\$PIP_CERT names"):
        resolve_ca_bundle(None, {"PIP_CERT": str(tmp_path / "nope")})


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"hello\n", id="text"),
        pytest.param(b"\x30\x82\x03\x0a\x30\x82\x01\xf2", id="der"),
        pytest.param(b"-----BEGIN PRIVATE KEY-----\nMIIE\n", id="a-key"),
    ],
)
def test_a_ca_cert_that_is_not_a_pem_bundle_is_refused_naming_the_option(
    tmp_path: Path, content: bytes
) -> None:
    ca = tmp_path / "proxy.crt"
    ca.write_bytes(content)
    with pytest.raises(InputError) as info:
        resolve_ca_bundle(ca, {})
    assert info.value.message == (
        f"--ca-cert {ca} is not a PEM CA bundle (no -----BEGIN CERTIFICATE----- block)"
    )
    assert "PEM" in info.value.hint and "--no-ca-cert" in info.value.hint


@pytest.mark.parametrize("name", ["PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
def test_a_ca_variable_naming_a_file_that_is_not_pem_is_refused_naming_it(
    tmp_path: Path, name: str
) -> None:
    ca = tmp_path / "not-a-bundle.txt"
    ca.write_text("hello\n")
    with pytest.raises(InputError) as info:
        resolve_ca_bundle(None, {name: str(ca)})
    assert info.value.message == (
        f"${name} names {ca}, which is not a PEM CA bundle (no -----BEGIN CERTIFICATE----- block)"
    )
    assert f"unset {name}" in info.value.hint and "--no-ca-cert" in info.value.hint


def test_a_pem_bundle_whose_first_certificate_is_far_in_is_found(tmp_path: Path) -> None:
    # Comments first, and the marker across the boundary of two read blocks.
    ca = tmp_path / "bundle.pem"
    ca.write_bytes(b"#" * ((1 << 16) - 5) + PEM.encode() + b"MIIB\n-----END CERTIFICATE-----\n")
    assert resolve_ca_bundle(ca, {}) == ca


def test_a_wheelhouse_with_wheels_and_make_s_stamp_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "torch-2.15.0-cp312-none-any.whl").write_bytes(b"torch")
    (tmp_path / ".complete").write_text("")
    check_wheelhouse(tmp_path)


@pytest.mark.parametrize(
    "dotfiles",
    [pytest.param((), id="empty"), pytest.param((".complete", ".hidden.whl"), id="dotfiles-only")],
)
def test_a_wheelhouse_without_wheels_is_refused_with_how_to_fill_it(
    tmp_path: Path, dotfiles: tuple[str, ...]
) -> None:
    for name in dotfiles:
        (tmp_path / name).write_text("")
    (tmp_path / "README").write_text("no wheels here")
    with pytest.raises(InputError) as info:
        check_wheelhouse(tmp_path)
    assert info.value.message == f"--wheelhouse {tmp_path} has no wheels (*.whl)"
    assert f"pip download --only-binary=:all: -d {tmp_path}" in info.value.hint
    assert "make wheelhouse" in info.value.hint


def test_a_wheelhouse_whose_wheels_are_only_in_subfolders_is_refused(tmp_path: Path) -> None:
    # pip --find-links reads the folder, not its subfolders: the build would find nothing.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "numpy-2.1.0-cp312-none-any.whl").write_bytes(b"numpy")
    with pytest.raises(InputError) as info:
        check_wheelhouse(tmp_path)
    assert "has no wheels (*.whl) of its own" in info.value.message
    assert "sub/numpy-2.1.0-cp312-none-any.whl" in info.value.message
    assert "move the wheels up" in info.value.hint


def test_a_wheelhouse_that_is_a_file_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.15.0-cp312-none-any.whl"
    wheel.write_bytes(b"torch")
    with pytest.raises(InputError, match=r"--wheelhouse .* is not a folder"):
        check_wheelhouse(wheel)


def test_full_carries_the_workstation_entrypoint_healthcheck_and_ports(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    rendered = render_image(plan_named(default_matrix, "2.15.0-cpu-py3.12-full"))
    text = rendered.dockerfile
    assert {"entrypoint.sh", "healthcheck.sh", "sshd_config.in"} <= set(rendered.files)
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/imagekit-entrypoint"]' in text
    assert 'CMD ["jupyter"]' in text
    assert "EXPOSE 8888 6006 2222" in text
    assert 'CMD ["/usr/local/bin/imagekit-healthcheck"]' in text
    assert "libnss-wrapper" in text
    folder = write_context(rendered, tmp_path)
    assert (folder / "entrypoint.sh").stat().st_mode & 0o777 == 0o755
    assert (folder / "sshd_config.in").stat().st_mode & 0o777 == 0o644
    config = rendered.files["sshd_config.in"]
    for line in (
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # Root logs in by key only, and only where sshd itself runs as root (the entrypoint
        # fills in "no" otherwise); AllowUsers names the one user sshd runs as.
        "PermitRootLogin @ROOT_LOGIN@",
        "AllowUsers @USER@",
        "X11Forwarding no",
    ):
        assert line in config
    entrypoint = rendered.files["entrypoint.sh"]
    assert "echo prohibit-password || echo no" in entrypoint


def test_slim_has_no_entrypoint_ports_or_healthcheck(default_matrix: Matrix) -> None:
    text = render_image(plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")).dockerfile
    for word in ("EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "jupyter", "sshd"):
        assert word not in text
    assert "chmod 2775 /home/ml" in text  # any --user UID:100 can write HOME


def test_base_overrides_map_a_matrix_base_to_a_local_one(default_matrix: Matrix) -> None:
    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    options = RenderOptions(base_overrides=(("ubuntu:24.04", "imagekit-base/ubuntu:noble"),))
    rendered = render_image(plan, options)
    assert rendered.build_args == {"BASE_IMAGE": "imagekit-base/ubuntu:noble"}
    assert rendered.labels["org.opencontainers.image.base.name"] == "imagekit-base/ubuntu:noble"


CUDA_LOCAL = Path(__file__).resolve().parents[3] / "examples" / "cuda-local.yaml"


def test_slim_prunes_its_venv_in_the_builder_stage_and_leaves_triton_to_full() -> None:
    from imagekit.matrix.load import load_matrix

    matrix = load_matrix(CUDA_LOCAL)
    slim = render_image(plan_named(matrix, "2.14.1-cu130-py3.11-slim"))
    builder, _ = stages(slim.dockerfile)
    assert (
        "prune_venv.py /opt/venv --keys-removed /tmp/imagekit/keys-removed --pack-headers "
        "--leave-out triton" in builder
    )
    # The private keys the build deletes are listed for the report (verify's wheel-files check).
    assert "| tee /tmp/imagekit/keys-removed | xargs -0 -r rm -fv --" in builder
    # Pruning needs only Python: no build installs binutils (or anything) for it.
    assert "binutils" not in slim.dockerfile and "strip" not in builder.split("prune_venv")[0]
    assert builder.count("apt-get install") == 1  # only for a base without the interpreter
    full = render_image(plan_named(matrix, "2.14.1-cu130-py3.11-full"))
    full_builder, _ = stages(full.dockerfile)
    assert "-r /opt/venv/imagekit-left-out.txt" in full_builder
    assert "--keep-static-archives" in full_builder
    assert "| tee /tmp/imagekit-keys-removed | xargs -0 -r rm -fv --" in full_builder
    assert "--keys-removed /tmp/imagekit-keys-removed --report imagekit-pruned-full.json" in (
        full_builder
    )
    assert "-m tarfile -e /opt/venv/imagekit-headers.tar.gz /tmp/overlay" in full_builder
    assert "prune_venv.py" in full.files
    assert "apt-get" not in full_builder


def test_uv_keeps_pips_rule_of_the_best_version_from_any_index(default_matrix: Matrix) -> None:
    """uv asks extra indexes first and stops at the first with the package: torch would come
    from PyPI, not the CUDA index, without `unsafe-best-match` (pip's rule)."""
    plan = plan_named(default_matrix, "2.8.0-cu128-py3.12-slim")
    alone = render_image(plan).dockerfile
    assert "--index-strategy" not in alone
    extra = render_image(plan, RenderOptions(extra_index_urls=("https://mirror.example/simple",)))
    builder, _ = stages(extra.dockerfile)
    assert (
        "--index-url https://download.pytorch.org/whl/cu128 --extra-index-url "
        "https://mirror.example/simple --index-strategy unsafe-best-match" in builder
    )
    wheels = render_image(plan, RenderOptions(wheelhouse=True)).dockerfile
    assert "--no-index --find-links /tmp/imagekit/wheelhouse -r" in wheels


def test_buildkit_mounts_the_wheelhouse_and_installer_the_legacy_builder_copies_them(
    default_matrix: Matrix,
) -> None:
    plan = plan_named(default_matrix, "2.8.0-cu128-py3.12-slim")
    legacy, _ = stages(render_image(plan, RenderOptions(wheelhouse=True)).dockerfile)
    assert "COPY wheelhouse/ /tmp/imagekit/wheelhouse/" in legacy
    assert re.search(r"(?m)^COPY .* uv( ca-bundle\.crt)? /tmp/imagekit/$", legacy)
    buildkit, _ = stages(
        render_image(plan, RenderOptions(wheelhouse=True, buildkit=True)).dockerfile
    )
    assert "COPY wheelhouse" not in buildkit and "COPY uv" not in buildkit
    assert "--mount=type=bind,source=wheelhouse,target=/tmp/imagekit/wheelhouse" in buildkit
    assert "--mount=type=bind,source=uv,target=/tmp/imagekit/uv" in buildkit


def test_full_cuda_image_can_compile_extensions() -> None:
    from imagekit.matrix.load import load_matrix

    full = render_image(plan_named(load_matrix(CUDA_LOCAL), "2.14.1-cu130-py3.11-full"))
    _, stage = stages(full.dockerfile)
    assert "ninja-build" in stage
    assert "    CUDA_HOME=/opt/venv/lib/python3.11/site-packages/nvidia/cu13 \\\n" in stage
    cuda_bin = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin"
    assert f"PATH=/home/ml/.local/bin:{cuda_bin}:" in stage
    # -lcudart needs the unversioned name the wheels do not ship.
    assert 'ln -s "$(basename "$lib")" "$dev"' in stage
    requirements = full.files["requirements-full.txt"]
    for package in ("nvidia-cuda-nvcc==13.0.*", "nvidia-nvvm==13.0.*", "nvidia-cuda-cccl==13.0.*"):
        assert package in requirements


def test_cuda_slim_declares_what_the_container_toolkit_checks() -> None:
    from imagekit.matrix.load import load_matrix

    slim = render_image(plan_named(load_matrix(CUDA_LOCAL), "2.14.1-cu130-py3.11-slim"))
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in slim.dockerfile
    assert slim.labels["io.imagekit.min-driver"] == "580.65.06"
    assert "sm_90" in slim.labels["io.imagekit.cuda-archs"].split()


def test_a_flavour_that_asks_for_rdma_carries_the_user_space_rdma_stack_and_says_so() -> None:
    from imagekit.matrix.load import parse_matrix

    text = (ROOT / "examples" / "cpu.yaml").read_text()
    text = text.replace("  slim:\n", "  slim:\n    rdma: true\n", 1)
    plans = {p.flavour: p for p in parse_matrix(text, "m.yaml").plans}
    slim, full = (render_image(plans[f], RenderOptions()) for f in ("slim", "full"))
    # The runtime stage installs them where its base lacks them
    # (tests/unit/build/test_distro_packages.py).
    assert (
        "for package in g++ openssl python3.11-dev ibverbs-providers libibverbs1 rdma-core;"
    ) in slim.dockerfile
    _, runtime = stages(slim.dockerfile)
    # The stage's first RUN; the second writes the HPC runtimes' environment files.
    assert runtime.count("RUN ") == 2 and "rdma-core" in runtime.split("RUN ")[1]
    assert 'io.imagekit.rdma="yes"' in slim.dockerfile
    assert "libibverbs1" not in full.dockerfile and "io.imagekit.rdma" not in full.dockerfile
    assert lint("slim", slim.dockerfile) == []


def test_a_slim_that_compiles_carries_gcc_and_keeps_its_headers_one_that_does_not_says_so() -> None:
    from imagekit.matrix.load import parse_matrix

    text = (ROOT / "examples" / "cpu.yaml").read_text()
    compiles = {p.flavour: p for p in parse_matrix(text, "m.yaml").plans}["slim"]
    text = text.replace("  slim:\n", "  slim:\n    compile: false\n", 1)
    plans = {p.flavour: p for p in parse_matrix(text, "m.yaml").plans}
    yes, no = render_image(compiles), render_image(plans["slim"])
    assert "for package in g++ openssl python3.11-dev;" in yes.dockerfile
    assert "--pack-headers" not in yes.dockerfile and "--pack-headers" in no.dockerfile
    assert "g++" not in no.dockerfile
    assert yes.labels["io.imagekit.torch-compile"] == "yes"
    assert no.labels["io.imagekit.torch-compile"] == "no"
    assert "ENV IMAGEKIT_TORCH_COMPILE=no" in no.dockerfile
    # full compiles whatever its slim does, and unpacks the headers only where slim packed them.
    full = render_image(plans["full"])
    assert full.labels["io.imagekit.torch-compile"] == "yes"
    assert "if [ -f /opt/venv/imagekit-headers.tar.gz ]" in full.dockerfile


def test_a_slim_numpy_pinned_in_packages_is_not_asked_for_twice() -> None:
    from imagekit.matrix.load import parse_matrix

    text = (ROOT / "examples" / "cpu.yaml").read_text()
    text = text.replace("  slim:\n", '  slim:\n    packages: ["NumPy==2.4.6"]\n', 1)
    slim = {p.flavour: p for p in parse_matrix(text, "m.yaml").plans}["slim"]
    lines = render_image(slim).files["requirements.txt"].splitlines()[1:]
    assert lines == ["torch==2.13.0", "NumPy==2.4.6"]


def test_each_build_gets_its_parents_time_or_the_callers_as_its_epoch(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    """SOURCE_DATE_EPOCH reaches the builder as a build arg: the parent image's creation time
    by default (the same on every runner that holds that base), the caller's where set; it is
    part of the input hash, on the engine's platform and under emulation alike."""
    from dataclasses import replace

    from imagekit.adapters.builders import buildx_output
    from imagekit.build import use_case as build
    from imagekit.build.ports import BuildRequest
    from tests.fakes import FakeEngine, store

    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-slim")
    options = RenderOptions(buildkit=True)
    inputs = ContextInputs(installer=tmp_path / "uv")
    inputs.installer.write_bytes(b"uv")  # type: ignore[union-attr]
    from imagekit.kernel.engine import EngineInfo

    engine = FakeEngine(facts=EngineInfo(server_version="fake", architecture="x86_64"))
    base = render_image(plan, options).build_args["BASE_IMAGE"]
    parent = engine.add(base, "sha256:" + "b" * 64)
    engine.images[base] = replace(parent, created="2023-11-14T22:13:20.123456789Z")
    requests: list[BuildRequest] = []
    StopBuilder = stop_builder(requests)
    run = store(tmp_path)
    hashes = []
    for explicit in (None, None, 1800000000):
        settings = build.BuildSettings(source_date_epoch=explicit)
        contexts = build.BuildContexts(options, inputs)
        result = build.BuildRun(
            engine, StopBuilder(), [plan], settings, contexts, run, lambda e: None
        )._build_one(plan)
        hashes.append(result.input_hash)
    by_parent, again, by_caller = requests
    assert by_parent.build_args["SOURCE_DATE_EPOCH"] == "1700000000"
    assert again.build_args == by_parent.build_args
    assert by_caller.build_args["SOURCE_DATE_EPOCH"] == "1800000000"
    assert by_parent.build_args["BASE_IMAGE"] == base
    # The same epoch is the same image; another epoch another.
    assert hashes[0] == hashes[1] != hashes[2]
    # No provenance attestation: its build times would make every build another image.
    assert buildx_output(by_parent) == ["--load", "--provenance=false"]
    assert "ARG SOURCE_DATE_EPOCH" in render_image(plan, options).dockerfile
    # Built for another platform than the engine's (under qemu): the same epoch.
    engine.facts = EngineInfo(server_version="fake", architecture="aarch64")
    contexts = build.BuildContexts(options, inputs)
    build.BuildRun(
        engine, StopBuilder(), [plan], build.BuildSettings(), contexts, run, lambda e: None
    )._build_one(plan)
    assert requests[-1].build_args["SOURCE_DATE_EPOCH"] == "1700000000"


def test_a_full_gets_the_epoch_its_slim_was_built_with_and_every_build_labels_its_epoch(
    default_matrix: Matrix, tmp_path: Path
) -> None:
    """The legacy builder stamps slim's config with its build time, so full's epoch comes from
    the label slim's build wrote: a rebuilt slim (another creation time) gives full the same
    epoch, and so the same file times in every layer."""
    from dataclasses import replace

    from imagekit.build import use_case as build
    from imagekit.build.ports import BuildRequest
    from imagekit.kernel import labels as L
    from tests.fakes import FakeEngine, store

    plan = plan_named(default_matrix, "2.15.0-cpu-py3.12-full")
    options = RenderOptions()
    engine = FakeEngine()
    slim = render_image(plan, options).build_args["SLIM_IMAGE"]
    parent = engine.add(slim, "sha256:" + "c" * 64)
    requests: list[BuildRequest] = []
    run = store(tmp_path)
    for created in ("2026-12-05T12:00:00Z", "2026-12-06T08:30:00Z"):  # two builds of slim
        labels = {**parent.labels, L.SOURCE_DATE_EPOCH: "1700000000"}
        engine.images[slim] = replace(parent, created=created, labels=labels)
        contexts = build.BuildContexts(options, ContextInputs())
        build.BuildRun(
            engine,
            stop_builder(requests)(),
            [plan],
            build.BuildSettings(),
            contexts,
            run,
            lambda e: None,
        )._build_one(plan)
    assert [r.build_args["SOURCE_DATE_EPOCH"] for r in requests] == ["1700000000"] * 2
    assert [r.labels[L.SOURCE_DATE_EPOCH] for r in requests] == ["1700000000"] * 2
