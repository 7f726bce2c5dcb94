"""bake_file: the docker-bake.json definition of a plan, without buildx."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagekit.build.bake import bake_file, target_name
from imagekit.build.render import RenderedImage, RenderOptions, render_image
from imagekit.kernel import labels as L
from imagekit.matrix.load import Matrix, load_matrix
from imagekit.matrix.plan import ImagePlan

ROOT = Path(__file__).resolve().parents[3]
CONTEXTS = Path("/ctx")


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


def images(plans: list[ImagePlan]) -> list[tuple[RenderedImage, Path]]:
    return [(render_image(p, RenderOptions(buildkit=True)), CONTEXTS / p.name) for p in plans]


def named(matrix: Matrix, *names: str) -> list[ImagePlan]:
    by_name = {p.name: p for p in matrix.plans}
    return [by_name[n] for n in names]


def test_every_image_is_a_target_with_its_context_dockerfile_args_and_label(
    matrix: Matrix,
) -> None:
    bake = bake_file(images(matrix.plans))

    assert len(bake["target"]) == len(matrix.plans)
    for plan in matrix.plans:
        target = bake["target"][target_name(plan)]
        assert target["context"] == str(CONTEXTS / plan.name)
        assert target["dockerfile"] == "Dockerfile"
        assert target["labels"] == {L.MANAGED: "true"}
        if plan.flavour == "slim":
            assert target["args"] == {"BASE_IMAGE": plan.cell.base_image}
        else:
            assert target["args"] == {"SLIM_IMAGE": plan.slim_reference}


@pytest.mark.parametrize(
    "name,target",
    [
        ("2.8.0-cu128-py3.12-slim", "2_8_0-cu128-py3_12-slim"),
        ("2.15.0-jammy-cu132-py3.11-slim", "2_15_0-jammy-cu132-py3_11-slim"),
        ("2.15.0-cpu-py3.12-full", "2_15_0-cpu-py3_12-full"),
    ],
)
def test_target_names_keep_only_letters_digits_underscore_and_dash(
    matrix: Matrix, name: str, target: str
) -> None:
    (plan,) = named(matrix, name)

    assert target_name(plan) == target
    assert target in bake_file(images([plan]))["target"]


def test_full_target_takes_its_slim_target_as_the_slim_image_context(matrix: Matrix) -> None:
    plans = named(matrix, "2.8.0-cu128-py3.12-slim", "2.8.0-cu128-py3.12-full")

    bake = bake_file(images(plans))

    full = bake["target"]["2_8_0-cu128-py3_12-full"]
    assert full["contexts"] == {
        "ghcr.io/acme-ml/pytorch:2.8.0-cuda12.8-cudnn9-py3.12-slim": (
            "target:2_8_0-cu128-py3_12-slim"
        )
    }
    assert full["args"]["SLIM_IMAGE"] in full["contexts"]
    assert "contexts" not in bake["target"]["2_8_0-cu128-py3_12-slim"]


def test_full_target_without_its_slim_in_the_bake_has_no_contexts(matrix: Matrix) -> None:
    plans = named(matrix, "2.8.0-cu126-py3.12-slim", "2.8.0-cu128-py3.12-full")

    bake = bake_file(images(plans))

    assert "contexts" not in bake["target"]["2_8_0-cu128-py3_12-full"]


def test_tags_are_the_reference_then_each_alias_in_the_repository(matrix: Matrix) -> None:
    (plan,) = named(matrix, "2.15.0-cu132-py3.12-full")

    (target,) = bake_file(images([plan]))["target"].values()

    assert target["tags"] == [
        "ghcr.io/acme-ml/pytorch:2.15.0-cuda13.2-cudnn9-py3.12-full",
        "ghcr.io/acme-ml/pytorch:2.15-cuda13.2-full",
        "ghcr.io/acme-ml/pytorch:latest-full",
        "ghcr.io/acme-ml/pytorch:latest",
    ]


def test_image_without_aliases_is_tagged_with_its_reference_only(matrix: Matrix) -> None:
    (plan,) = named(matrix, "2.15.0-jammy-cu132-py3.11-slim")

    (target,) = bake_file(images([plan]))["target"].values()

    assert target["tags"] == [plan.reference]


@pytest.mark.parametrize(
    "ca_bundle,secret",
    [(None, None), (Path("/etc/ssl/corp-ca.pem"), ["id=ca,src=/etc/ssl/corp-ca.pem"])],
    ids=["no-ca", "ca"],
)
def test_ca_bundle_becomes_a_secret_of_every_target(
    matrix: Matrix, ca_bundle: Path | None, secret: list[str] | None
) -> None:
    plans = named(matrix, "2.8.0-cu128-py3.12-slim", "2.8.0-cu128-py3.12-full")

    bake = bake_file(images(plans), ca_bundle)

    for target in bake["target"].values():
        assert target.get("secret") == secret


def test_groups_are_default_slim_and_full(matrix: Matrix) -> None:
    bake = bake_file(images(matrix.plans))

    groups: dict[str, Any] = bake["group"]
    assert sorted(groups) == ["default", "full", "slim"]
    assert groups["default"]["targets"] == sorted(target_name(p) for p in matrix.plans)
    for flavour in ("slim", "full"):
        expected = sorted(target_name(p) for p in matrix.plans if p.flavour == flavour)
        assert groups[flavour]["targets"] == expected
    assert set(groups["slim"]["targets"]) | set(groups["full"]["targets"]) == set(bake["target"])


def test_bake_file_is_json_and_stable_whatever_the_order_of_the_images(matrix: Matrix) -> None:
    forward = bake_file(images(matrix.plans))
    backward = bake_file(images(list(reversed(matrix.plans))))

    assert json.dumps(forward) == json.dumps(backward)
