"""Adapter: one CycloneDX SBOM for a whole image, made with cyclonedx-python-lib.

OS packages (dpkg) and the Python environment go into one document, each component with its
version and a package URL (`pkg:deb/debian/libc6@2.36-9?arch=amd64&distro=debian-12`,
`pkg:pypi/torch@2.13.0`); torch and the nvidia-* wheels carry the CUDA, cuDNN and NCCL versions
as properties. Every document is checked against the CycloneDX JSON schema the library ships
(offline) before it is written or attested. Reproducible: the serial number is derived from the
digest, and there is no timestamp.
"""

from __future__ import annotations

import json
import uuid

from cyclonedx.model import Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from imagekit import __version__
from imagekit.errors import PublishError
from imagekit.kernel.json import JsonObject, as_object
from imagekit.publish.ports import Inventory, Package

SPEC = SchemaVersion.V1_6


def _deb(package: Package, distro: str) -> Component:
    namespace = distro.split("-")[0] or "debian"
    qualifiers = {k: v for k, v in (("arch", package.arch), ("distro", distro)) if v}
    purl = PackageURL("deb", namespace, package.name, package.version, qualifiers or None)
    return Component(
        name=package.name,
        version=package.version,
        type=ComponentType.LIBRARY,
        purl=purl,
        bom_ref=purl.to_string(),
        properties=[Property(name="imagekit:package:type", value="os")],
    )


def _pypi(package: Package) -> Component:
    purl = PackageURL("pypi", None, package.name.lower(), package.version)
    return Component(
        name=package.name,
        version=package.version,
        type=ComponentType.LIBRARY,
        purl=purl,
        bom_ref=purl.to_string(),
        properties=[
            Property(name="imagekit:package:type", value="python"),
            *(Property(name=k, value=v) for k, v in package.properties),
        ],
    )


def problems(document: JsonObject) -> str:
    """Why `document` is not a valid CycloneDX 1.6 JSON document ("" when it is)."""
    error = JsonStrictValidator(SPEC).validate_str(json.dumps(document))
    return "" if error is None else str(error)[:500]


class CycloneDx:
    """The `SbomMaker` port over cyclonedx-python-lib."""

    def image_sbom(self, inventory: Inventory) -> JsonObject:
        """The SBOM of the whole image, checked against the CycloneDX schema."""
        image = Component(
            name=inventory.reference,
            version=inventory.digest or inventory.image_id,
            type=ComponentType.CONTAINER,
            bom_ref=inventory.digest or inventory.image_id,
            properties=[Property(name="imagekit:image-id", value=inventory.image_id)],
        )
        if inventory.distro:
            image.properties.add(Property(name="imagekit:distro", value=inventory.distro))
        seed = inventory.digest or inventory.image_id
        bom = Bom(
            serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"imagekit-sbom:{seed}"),
            metadata=BomMetaData(
                component=image,
                properties=[Property(name="imagekit:version", value=__version__)],
            ),
            components=[
                *(_deb(p, inventory.distro) for p in inventory.os_packages),
                *(_pypi(p) for p in inventory.python_packages),
            ],
        )
        bom.register_dependency(image, list(bom.components))  # the image holds them all
        document: JsonObject = json.loads(JsonV1Dot6(bom).output_as_string())
        metadata = as_object(document.get("metadata"))
        metadata.pop("timestamp", None)
        metadata.pop("tools", None)  # the library's own version: noise
        why = problems(document)
        if why:
            raise PublishError(
                f"the SBOM of {inventory.reference} is not valid CycloneDX: {why}",
                "this is a bug in imagekit; the package lists are in results/<run-id>/publish/",
            )
        return document
