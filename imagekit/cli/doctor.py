"""The doctor command: can these images use this host's GPUs?"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING

from imagekit.cli.common import app, say, show
from imagekit.cli.options import command
from imagekit.doctor.requests import DoctorRequest
from imagekit.kernel.labels import ImageLabels

if TYPE_CHECKING:
    from imagekit.kernel.publish_records import AttestedLevel


@command(app, "doctor", DoctorRequest)
def doctor(request: DoctorRequest) -> None:
    """Assess each image against this host; exit 7 when one cannot use its GPUs."""
    from imagekit.adapters.hostgpu import read_host
    from imagekit.adapters.imagelabels import doctor_targets
    from imagekit.adapters.maybe_engine import engine_or_why
    from imagekit.doctor.document import doctor_document
    from imagekit.doctor.verdict import assess, doctor_lines, engine_findings, gpu_refusal
    from imagekit.matrix.compat import load_compat

    plans = request.selection.plans() if request.selection else []
    targets = doctor_targets(plans, request.images)
    host = read_host(str(request.nvidia_smi) if request.nvidia_smi else None)
    engine, why_none = engine_or_why()
    machine = platform.machine()
    assessments = [assess(name, labels, host, load_compat(), machine) for name, labels in targets]
    attested = _attested(request)
    about = engine_findings(engine, host, why_none)
    lines = doctor_lines(machine, host, about, assessments, attested)
    show(request.json, doctor_document(host, assessments, engine, attested), "\n".join(lines))
    # The driver is there, but containers of this engine may get no GPU: CUDA images refused.
    cuda = {name for name, labels in targets if ImageLabels.parse(labels).cuda}
    if (error := gpu_refusal(assessments, cuda, engine, host)) is not None:
        raise error
    if not targets:
        say("give --image IMAGE or --matrix FILE to check images against this host")


def _attested(request: DoctorRequest) -> dict[str, AttestedLevel]:
    """With --key, what each --image's signed verify attestations say."""
    if not request.key:
        return {}
    from imagekit.adapters.cosign import cosign_with
    from imagekit.publish.attest_verify import attested_level

    reader = cosign_with("--key", request.key)
    return {ref: attested_level(reader, ref) for ref in request.images}
