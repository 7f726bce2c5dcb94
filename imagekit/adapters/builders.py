"""Adapters that turn a build context into an image: the Docker SDK and `docker buildx`.

Both take a `BuildRequest`, stream output lines to a callback and to the image's
log file, and return a `BuildOutcome`; neither raises for a failed build.
"""

from __future__ import annotations

import shutil
import subprocess

import docker
import docker.errors

from imagekit.adapters.engine import DockerEngine, engine_errors, short_error
from imagekit.build.ports import BuildOutcome, BuildRequest, LineSink
from imagekit.build.stream import BuildLog
from imagekit.kernel import labels as L


def _record(log: BuildLog, lines: list[str], handle: object, on_line: LineSink) -> None:
    for line in lines:
        handle.write(line + "\n")  # type: ignore[attr-defined]
        on_line(log, line)


class SdkBuilder:
    """The legacy builder, driven through the Docker SDK's low-level API."""

    name = "sdk"

    def __init__(self, engine: DockerEngine) -> None:
        self.client = engine.client

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        """Stream the build; an error item in the stream is a failed build."""
        log = BuildLog()
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        with request.log_path.open("w", encoding="utf-8") as handle:
            try:
                with engine_errors(f"building {request.name}"):
                    stream = self.client.api.build(
                        path=str(request.context_dir),
                        dockerfile="Dockerfile",
                        tag=request.reference,
                        buildargs=request.build_args,
                        labels=request.labels,
                        nocache=request.no_cache,
                        rm=True,
                        forcerm=True,  # intermediate containers go, even when a step fails
                        pull=False,
                        network_mode=request.network,
                        platform=request.platform,
                        decode=True,
                    )
                    for item in stream:
                        _record(log, log.feed(item), handle, on_line)
                    _record(log, log.close(), handle, on_line)
            except docker.errors.APIError as exc:
                message = str(exc.explanation or exc)
                _record(log, log.feed({"error": message}), handle, on_line)
            if not request.keep_stages:
                _record(log, self.remove_stages(log.stray_images), handle, on_line)
        if log.failed:
            return BuildOutcome(False, None, log.failure_message(), log)
        image_id = log.image_id or ""
        if not image_id.startswith("sha256:"):
            with engine_errors("reading the built image"):
                image_id = self.client.api.inspect_image(request.reference)["Id"]
        return BuildOutcome(True, image_id, "", log)

    def remove_stages(self, images: list[str]) -> list[str]:
        """Remove the builder stages among `images` (the ones this build left untagged), and
        say what became of each. Only an image with imagekit's stage label and no tag goes, and
        without force: the engine keeps one that a child image or a container still uses."""
        said = []
        for short_id in images:
            try:
                image = self.client.api.inspect_image(short_id)
            except docker.errors.APIError:  # gone already (NotFound), or the engine said no
                continue
            labels = (image.get("Config") or {}).get("Labels") or {}
            if L.STAGE not in labels or [
                t for t in image.get("RepoTags") or [] if "<none>" not in t
            ]:
                continue
            what = f"builder stage {short_id[:12]} ({labels[L.STAGE]})"
            try:
                self.client.api.remove_image(image["Id"], noprune=False)
                said.append(f"imagekit: removed the {what}; --keep-stages keeps them as a cache")
            except docker.errors.APIError as exc:
                said.append(f"imagekit: kept the {what}: {short_error(exc)}")
        return said


def buildx_version() -> str | None:
    """The version of the `docker buildx` plugin (`0.13.1`), None when it does not answer."""
    if shutil.which("docker") is None:
        return None
    done = subprocess.run(
        ["docker", "buildx", "version"], capture_output=True, text=True, check=False, timeout=30
    )
    return plugin_version(done.stdout) if done.returncode == 0 else None


def plugin_version(said: str) -> str:
    """The version in what `docker buildx version` says (`github.com/docker/buildx v0.14.1
    59582f7`, Debian's `... 0.13.1+ds1 0.13.1+ds1-3`): `0.14.1`, `0.13.1` ("?" if none)."""
    words = said.split()
    return words[1].removeprefix("v").split("+")[0] if len(words) > 1 else "?"


def buildx_driver() -> str:
    """The driver of the buildx builder in use ("docker", "docker-container", ...); "" when
    buildx does not say."""
    done = subprocess.run(
        ["docker", "buildx", "inspect"], capture_output=True, text=True, check=False, timeout=60
    )
    for line in done.stdout.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Driver":
            return value.strip()
    return ""


def buildx_output(request: BuildRequest) -> list[str]:
    """Where buildx puts the image: the engine's store, as `--load` does (new layers gzip,
    layers it already holds as they are: after a zstd build, zstd), or with every layer forced
    to the compression asked for, which the containerd image store keeps as built, so a push
    sends them as they are. Without a provenance attestation: it records when the build
    started and ended and a random invocation id, so on the containerd store (which keeps it
    in the image's index) no two builds of the same inputs would be the same image."""
    if request.compression is None:
        return ["--load", "--provenance=false"]
    return [
        "--provenance=false",
        "--output",
        f"type=image,compression={request.compression},force-compression=true,oci-mediatypes=true",
    ]


def store_id(reference: str) -> tuple[str | None, str]:
    """The id the engine gives the image tagged `reference` (buildx's --iidfile holds the
    config's digest, which is the id on the classic store only: the containerd store's is the
    manifest's), or None and what docker said."""
    found = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True, text=True, check=False, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if found.returncode != 0:
        return None, found.stderr.strip() or f"{reference} is not there after the build"
    return found.stdout.strip(), ""


class BuildxBuilder:
    """BuildKit through `docker buildx build` into the engine's store (cache mounts, the CA as
    a secret, registry build caches, zstd layers)."""

    name = "buildx"

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        """Run buildx; its plain progress output is the log."""
        log = BuildLog()
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = ["docker", "buildx", "build", "--progress", "plain"]
        command += buildx_output(request)
        command += ["--file", str(request.context_dir / "Dockerfile")]
        command += ["--tag", request.reference]
        for key, value in sorted(request.build_args.items()):
            command += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(request.labels.items()):
            command += ["--label", f"{key}={value}"]
        if request.no_cache:
            command.append("--no-cache")
        if request.ca_bundle is not None:
            command += ["--secret", f"id=ca,src={request.ca_bundle}"]
        if request.network:
            command += ["--network", request.network]
        if request.platform:
            command += ["--platform", request.platform]
        if request.cache_from:
            command += ["--cache-from", f"type=registry,ref={request.cache_from}"]
        if request.cache_to:
            command += ["--cache-to", f"type=registry,ref={request.cache_to},mode=max"]
        command.append(str(request.context_dir))
        with request.log_path.open("w", encoding="utf-8") as handle:
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            try:
                assert process.stdout is not None
                for raw in process.stdout:
                    _record(log, log.feed({"stream": raw}), handle, on_line)
                _record(log, log.close(), handle, on_line)
                code = process.wait()
            except BaseException:
                process.kill()  # Ctrl-C: do not leave a build running behind us
                process.wait()
                raise
        if code != 0:
            log.error = f"docker buildx build exited with {code}"
            return BuildOutcome(False, None, log.failure_message(), log)
        image_id, said = store_id(request.reference)
        if image_id is None:
            log.error = f"the image was built but the engine does not show it: {said}"
            return BuildOutcome(False, None, log.error, log)
        log.image_id = image_id
        return BuildOutcome(True, image_id, "", log)
