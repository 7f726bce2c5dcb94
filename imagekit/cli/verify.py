"""Commands that prove images: verify, probe (host mode), report."""

from __future__ import annotations

import os
import shutil
from functools import partial
from typing import TYPE_CHECKING

import typer

from imagekit.cli.common import app, note_leftovers, say, show
from imagekit.cli.options import command
from imagekit.verify.requests import ProbeCommand, ReportRequest, VerifyCommand

if TYPE_CHECKING:
    from imagekit.verify.summary import Records


@command(app, "verify", VerifyCommand)
def verify(request: VerifyCommand) -> None:
    """Verify the images, print the summary, exit 5 when one did not pass."""
    from imagekit.adapters.progress import PlainView
    from imagekit.adapters.structure import DockerInspector
    from imagekit.adapters.verifying import open_verify_run, probe_runner
    from imagekit.kernel.records import ImageRecord
    from imagekit.matrix.compat import load_compat
    from imagekit.verify import settings as vs
    from imagekit.verify.run import VerifyRun
    from imagekit.verify.summary import step_summary_file

    settings = request.settings
    targets = vs.targets_of(request.images, request.selection)
    vs.check_probes_folder(settings.probes_folder)
    named, present = [t.reference for t in targets], partial(vs.check_present, targets)
    engine, run = open_verify_run(request.results, named, [note_leftovers, present], settings)
    with probe_runner(engine, settings, run.root, say) as runner:
        inspector, compat = DockerInspector(engine), load_compat()
        verifier = VerifyRun.of(engine, runner, inspector, run, settings, PlainView(), compat)
        for note in verifier.notes():
            say(f"note: {note}")
        try:
            records = verifier.execute(targets, step_summary_file(os.environ))
        except KeyboardInterrupt:
            say(f"interrupted; finished images are recorded in {run.root}")
            raise
    images = {name: ImageRecord(verify=r).to_json() for name, r in records.items()}
    show(request.json, {"run_id": run.run_id, "images": images}, lambda: summary(run.images()))
    say(f"results: {run.root}")
    if (error := verifier.outcome_error(len(targets))) is not None:
        raise error


def summary(images: Records) -> str:
    """The summary of a run's records (`RunFolder.images()`), fitted to the terminal."""
    from imagekit.verify.summary import run_summary

    return run_summary(images, shutil.get_terminal_size().columns)


@command(app, "probe", ProbeCommand)
def probe(request: ProbeCommand) -> None:
    """Run the probes here, print what they found, exit 5 when one did not pass."""
    from imagekit.adapters.hostprobe import HostProbeRunner
    from imagekit.adapters.results import write_json
    from imagekit.resources import probes_dir
    from imagekit.verify import hostprobe as hp

    run = hp.probe_here(HostProbeRunner(), probes_dir(), request.settings)
    document = hp.host_document(run)
    if request.out is not None:
        write_json(request.out, document)
    show(request.json, document, hp.result_table(run))
    if not request.json:
        say(hp.verdict_line(run))
    if (error := hp.probe_failure(run)) is not None:
        raise error


@command(app, "report", ReportRequest)
def report(request: ReportRequest) -> None:
    """The summary of one run, or what got worse between two; or the site of every run."""
    from imagekit.adapters.results import RunFolder
    from imagekit.adapters.site import write_site
    from imagekit.verify.summary import comparison

    if request.html is not None:
        typer.echo(write_site(request.results, request.html, request.threshold).resolve())
        return
    folders = RunFolder.picked(request.runs, request.results)
    loaded = [f.images() for f in folders]
    typer.echo(summary(loaded[-1]))
    say(f"run: {folders[-1].root}")
    if len(loaded) == 2:
        ids = (folders[0].run_id, folders[1].run_id)
        found, counted = comparison(ids, loaded[0], loaded[1], request.threshold)
        typer.echo("".join(f"{line}\n" for line in found), nl=False)
        say(counted)
