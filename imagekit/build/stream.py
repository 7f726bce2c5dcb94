"""Read the JSON stream of a Docker build (pure: items in, log lines and outcome out).

The low-level API streams dicts such as `{"stream": "Step 3/9 : RUN ..."}`,
`{"aux": {"ID": "sha256:..."}}` and, on failure, `{"error": ..., "errorDetail":
{...}}`. A failure does not raise in docker-py: it is only an item in the
stream, so every item must be looked at.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from imagekit.kernel.json import JsonValue

TAIL_LINES = 50
# The start of the line a failed build step writes about itself (templates/Dockerfile.j2's
# apt_install): the reader makes the rest the failure's reason instead of the engine's line.
FAILURE_MARKER = "imagekit-build-failure:"
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
# BuildKit's plain progress: "#7 [builder 3/5] RUN pip install ..."
_BUILDKIT_STEP = re.compile(r"^#\d+ \[(?:[\w.-]+ )?(\d+)/(\d+)\] (.*)$")
_SUCCESS = re.compile(r"^Successfully built ([0-9a-f]{12,64})$")
# The legacy builder's image after each step (" ---> 3f2a1b0c9d8e"), and a stage's start.
_STEP_IMAGE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")
_FROM = re.compile(r"^FROM\s", re.IGNORECASE)
# A step's own account of its failure (templates/Dockerfile.j2's apt_install), as the legacy
# builder streams it and as BuildKit's plain progress prefixes it ("#9 4.210 ...").
_MARKED = re.compile(r"^(?:#\d+ \d+(?:\.\d+)? )?" + re.escape(FAILURE_MARKER) + r" (.+)$")


@dataclass
class BuildLog:
    """Accumulates a build's output: every line, the current step, the result."""

    lines: list[str] = field(default_factory=list)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    step: str = ""
    step_index: int = 0
    step_count: int = 0
    image_id: str | None = None
    error: str | None = None
    # What a failed step said of itself: a better reason than the engine's shell line.
    step_reason: str | None = None
    # The legacy builder's image of each stage that ended before the last one began (the
    # builder stages: untagged, the image does not contain them).
    stage_images: list[str] = field(default_factory=list)
    _step_image: str | None = None
    _partial: str = ""

    def feed(self, item: Mapping[str, JsonValue]) -> list[str]:
        """Take one stream item (a decoded JSON object); return the complete log lines it
        finished."""
        finished: list[str] = []
        if "error" in item or "errorDetail" in item:
            detail = item.get("errorDetail")
            said = detail.get("message") if isinstance(detail, Mapping) else None
            message = str(item.get("error") or said or "build failed")
            self.error = message.strip()
            finished.append(f"ERROR: {self.error}")
        if "stream" in item:
            text = self._partial + str(item["stream"])
            *complete, self._partial = text.split("\n")
            finished += [line.rstrip("\r") for line in complete]
        aux = item.get("aux")
        if isinstance(aux, Mapping) and "ID" in aux:
            self.image_id = str(aux["ID"])
        if "status" in item:  # base image pulls report progress this way
            finished.append(str(item["status"]) + (f" {item['id']}" if "id" in item else ""))
        for line in finished:
            self._take(line)
        return finished

    def close(self) -> list[str]:
        """Flush a last line that had no newline."""
        if self._partial:
            line, self._partial = self._partial, ""
            self._take(line)
            return [line]
        return []

    def _take(self, line: str) -> None:
        self.lines.append(line)
        self.tail.append(line)
        if match := _STEP.match(line) or _BUILDKIT_STEP.match(line):
            self.step_index, self.step_count = int(match.group(1)), int(match.group(2))
            self.step = match.group(3)
            if _STEP.match(line) and _FROM.match(self.step):
                if self._step_image:
                    self.stage_images.append(self._step_image)
                self._step_image = None
        elif match := _STEP_IMAGE.match(line):
            self._step_image = match.group(1)
        elif (match := _SUCCESS.match(line)) and self.image_id is None:
            self.image_id = match.group(1)
        elif match := _MARKED.match(line):
            self.step_reason = match.group(1).strip()

    @property
    def stray_images(self) -> list[str]:
        """The images of stages that are not the built image: those of ended stages and, when
        the build failed, the last one it made (a failed step's stage is not the image)."""
        last = [self._step_image] if self.failed and self._step_image else []
        return [*self.stage_images, *last]

    @property
    def failed(self) -> bool:
        """Whether the stream reported an error, or ended without an image."""
        return self.error is not None or self.image_id is None

    def failure_message(self) -> str:
        """The reason and the last lines of output, for the person reading the failure: the
        failed step's own line where it wrote one, else the engine's error."""
        reason = self.step_reason or self.error or "the build ended without producing an image"
        return reason + "\n--- last lines of the build log ---\n" + "\n".join(self.tail)
