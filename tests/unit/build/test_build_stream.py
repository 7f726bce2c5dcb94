"""BuildLog: recorded Docker build streams in, log lines, current step and outcome out."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.build.stream import TAIL_LINES, BuildLog

IMAGE_ID = "sha256:6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3"

# The legacy builder, as docker-py's low-level `build(decode=True)` yields it: the step
# header and its newline arrive as separate items, and so can halves of a line.
LEGACY_SUCCESS: list[dict[str, Any]] = [
    {"stream": "Step 1/5 : ARG BASE_IMAGE=imagekit-base/debian:bookworm"},
    {"stream": "\n"},
    {"stream": "Step 2/5 : FROM ${BASE_IMAGE}"},
    {"stream": "\n"},
    {"stream": " ---> 5f1a2b3c4d5e\n"},
    {"stream": "Step 3/5 : COPY requirements.txt /tmp/imagekit/"},
    {"stream": "\n"},
    {"stream": " ---> 0b1c2d3e4f50\n"},
    {"stream": "Step 4/5 : RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install"},
    {"stream": " -r /tmp/imagekit/requirements.txt\n"},
    {"stream": " ---> Running in 0a1b2c3d4e5f\n"},
    {"stream": "Collecting torch==2.13.0\n  Downloading torch-2.13.0-cp311-"},
    {"stream": "cp311-manylinux_2_28_x86_64.whl (184.2 MB)\n"},
    {"stream": "Successfully installed torch-2.13.0\n"},
    {"stream": " ---> Removed intermediate container 0a1b2c3d4e5f\n"},
    {"stream": " ---> 9e8d7c6b5a40\n"},
    {"stream": "Step 5/5 : LABEL io.imagekit.flavour=slim"},
    {"stream": "\n"},
    {"stream": " ---> Running in 1f2e3d4c5b6a\n"},
    {"stream": " ---> Removed intermediate container 1f2e3d4c5b6a\n"},
    {"stream": " ---> 6a7b8c9d0e1f\n"},
    {"aux": {"ID": IMAGE_ID}},
    {"stream": "Successfully built 6a7b8c9d0e1f\n"},
    {"stream": "Successfully tagged imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim\n"},
]

PIP_COMMAND = "/bin/sh -c python3 -m venv /opt/venv && /opt/venv/bin/pip install -r r.txt"
FAILURE = f"The command '{PIP_COMMAND}' returned a non-zero code: 1"

LEGACY_FAILURE: list[dict[str, Any]] = [
    {"stream": "Step 1/3 : FROM imagekit-base/debian:bookworm"},
    {"stream": "\n"},
    {"stream": " ---> 5f1a2b3c4d5e\n"},
    {"stream": "Step 2/3 : RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -r r.txt"},
    {"stream": "\n"},
    {"stream": " ---> Running in 0a1b2c3d4e5f\n"},
    {"stream": "ERROR: Could not find a version that satisfies the requirement torch==9.9.9\n"},
    {"stream": "ERROR: No matching distribution found for torch==9.9.9\n"},
    {"errorDetail": {"code": 1, "message": FAILURE}, "error": FAILURE},
]

# The engine went away mid-build: the stream just stops, with no error item and no id.
LEGACY_CUT_OFF: list[dict[str, Any]] = [
    {"status": "Pulling from library/ubuntu", "id": "24.04"},
    {"stream": "Step 1/2 : FROM ubuntu:24.04"},
    {"stream": "\n"},
    {"stream": " ---> 61b2756d6fa9\n"},
    {"stream": "Step 2/2 : RUN apt-get update"},
    {"stream": "\n"},
    {"stream": " ---> Running in 2b3c4d5e6f70\n"},
    {"stream": "Get:1 http://archive.ubuntu.com/ubuntu noble InRelease [256 kB]"},
]

# `docker buildx build --progress plain`, which BuildxBuilder feeds one line per item.
BUILDX_LINES = [
    '#0 building with "default" instance using docker driver\n',
    "#1 [internal] load build definition from Dockerfile\n",
    "#1 transferring dockerfile: 2.10kB done\n",
    "#1 DONE 0.0s\n",
    "#5 [builder 2/4] RUN --mount=type=cache,target=/root/.cache/pip pip install -r r.txt\n",
    "#5 1.234 ERROR: Could not find a version that satisfies the requirement torch==9.9.9\n",
    '#5 ERROR: process "/bin/sh -c pip install -r r.txt" did not complete successfully\n',
    "------\n",
    " > [builder 2/4] RUN --mount=type=cache,target=/root/.cache/pip pip install -r r.txt:\n",
    "------\n",
    "ERROR: failed to solve: process did not complete successfully: exit code: 1\n",
]


def fed(items: list[dict[str, Any]]) -> tuple[BuildLog, list[str]]:
    """A BuildLog that took every item and was closed, and the lines it returned."""
    log = BuildLog()
    returned: list[str] = []
    for item in items:
        returned += log.feed(item)
    returned += log.close()
    return log, returned


def test_successful_stream_yields_the_image_id_from_the_aux_item() -> None:
    log, _ = fed(LEGACY_SUCCESS)

    assert not log.failed
    assert log.error is None
    # The full id of the aux item wins over the short id of "Successfully built".
    assert log.image_id == IMAGE_ID


def test_lines_split_across_items_are_joined_and_every_line_is_returned_once() -> None:
    log, returned = fed(LEGACY_SUCCESS)

    assert returned == log.lines
    assert (
        "Step 4/5 : RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -r "
        "/tmp/imagekit/requirements.txt" in log.lines
    )
    assert (
        "  Downloading torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl (184.2 MB)" in log.lines
    )
    assert all("\n" not in line for line in log.lines)
    assert log.lines[-1] == "Successfully tagged imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim"


@pytest.mark.parametrize(
    "items,index,count,step",
    [
        (LEGACY_SUCCESS[:2], 1, 5, "ARG BASE_IMAGE=imagekit-base/debian:bookworm"),
        (LEGACY_SUCCESS[:4], 2, 5, "FROM ${BASE_IMAGE}"),
        (
            LEGACY_SUCCESS[:10],
            4,
            5,
            "RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install"
            " -r /tmp/imagekit/requirements.txt",
        ),
        (LEGACY_SUCCESS, 5, 5, "LABEL io.imagekit.flavour=slim"),
        (
            LEGACY_FAILURE,
            2,
            3,
            "RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -r r.txt",
        ),
    ],
    ids=["first-step", "second-step", "step-split-across-items", "last-step", "failing-step"],
)
def test_current_step_follows_the_step_headers(
    items: list[dict[str, Any]], index: int, count: int, step: str
) -> None:
    log, _ = fed(items)

    assert (log.step_index, log.step_count, log.step) == (index, count, step)


def test_a_step_header_is_not_taken_before_its_line_is_complete() -> None:
    log = BuildLog()
    log.feed({"stream": "Step 1/5 : FROM ubun"})

    assert (log.step_index, log.step) == (0, "")
    log.feed({"stream": "tu:24.04\n"})
    assert (log.step_index, log.step) == (1, "FROM ubuntu:24.04")


def test_successfully_built_gives_the_id_when_no_aux_item_came() -> None:
    items = [item for item in LEGACY_SUCCESS if "aux" not in item]

    log, _ = fed(items)

    assert not log.failed
    assert log.image_id == "6a7b8c9d0e1f"


def test_error_item_fails_the_build_with_its_message_and_the_last_lines() -> None:
    log, returned = fed(LEGACY_FAILURE)

    assert log.failed
    assert log.error == FAILURE
    assert returned[-1] == f"ERROR: {FAILURE}"
    message = log.failure_message()
    assert message.splitlines()[0] == FAILURE
    assert "--- last lines of the build log ---" in message
    assert "ERROR: No matching distribution found for torch==9.9.9" in message
    assert "Step 2/3 : RUN python3 -m venv" in message


@pytest.mark.parametrize(
    "item,expected",
    [
        ({"error": "boom", "errorDetail": {"message": "detailed boom"}}, "boom"),
        ({"errorDetail": {"code": 1, "message": "only the detail"}}, "only the detail"),
        ({"error": "  padded message \n"}, "padded message"),
        ({"errorDetail": {}}, "build failed"),
    ],
    ids=["error-wins", "detail-only", "stripped", "no-message"],
)
def test_error_message_is_taken_from_whichever_field_has_one(
    item: dict[str, Any], expected: str
) -> None:
    log, _ = fed([item])

    assert log.failed
    assert log.error == expected


def test_error_after_an_image_id_still_fails_the_build() -> None:
    items = [*LEGACY_SUCCESS[:-2], {"error": "failed to tag the image", "errorDetail": {}}]

    log, _ = fed(items)

    assert log.image_id == IMAGE_ID
    assert log.failed
    assert log.failure_message().startswith("failed to tag the image\n")


def test_stream_that_ends_without_an_image_id_is_a_failure() -> None:
    log, _ = fed(LEGACY_CUT_OFF)

    assert log.error is None
    assert log.image_id is None
    assert log.failed
    message = log.failure_message()
    assert message.startswith("the build ended without producing an image\n")
    assert "Step 2/2 : RUN apt-get update" in message


def test_pull_progress_items_become_log_lines() -> None:
    log, _ = fed(LEGACY_CUT_OFF)

    assert log.lines[0] == "Pulling from library/ubuntu 24.04"


def test_close_flushes_the_last_line_that_had_no_newline() -> None:
    log = BuildLog()

    assert log.feed(LEGACY_CUT_OFF[-1]) == []
    assert log.lines == []
    flushed = log.close()

    expected = "Get:1 http://archive.ubuntu.com/ubuntu noble InRelease [256 kB]"
    assert flushed == [expected]
    assert log.lines == [expected]
    assert list(log.tail) == [expected]
    assert log.close() == []  # nothing is flushed twice


def test_close_with_nothing_pending_returns_nothing() -> None:
    log, _ = fed(LEGACY_SUCCESS)

    assert log.close() == []


def test_a_final_successfully_built_line_without_newline_counts_after_close() -> None:
    log = BuildLog()
    log.feed({"stream": "Step 1/1 : FROM scratch\n"})
    log.feed({"stream": "Successfully built 0123456789ab"})

    assert log.failed
    log.close()
    assert not log.failed
    assert log.image_id == "0123456789ab"


def test_tail_keeps_only_the_last_lines_while_lines_keeps_all() -> None:
    count = TAIL_LINES * 3
    items = [{"stream": f"line {i}\n"} for i in range(count)]
    items.append({"error": "boom"})

    log, _ = fed(items)

    assert TAIL_LINES == 50
    assert len(log.lines) == count + 1
    assert list(log.tail) == [f"line {i}" for i in range(count - TAIL_LINES + 1, count)] + [
        "ERROR: boom"
    ]
    message = log.failure_message()
    assert "line 100" not in message.splitlines()
    assert message.splitlines()[-1] == "ERROR: boom"
    assert len(message.splitlines()) == 2 + TAIL_LINES


def test_carriage_returns_of_progress_output_are_dropped() -> None:
    log, _ = fed([{"stream": "Downloading 10%\r\n"}, {"stream": "done\r\n"}])

    assert log.lines == ["Downloading 10%", "done"]


def test_buildx_plain_progress_lines_are_kept_whole_for_the_failure_message() -> None:
    log = BuildLog()
    for raw in BUILDX_LINES:
        log.feed({"stream": raw})
    log.close()
    # BuildxBuilder sets the error from the exit code; the log carries the why.
    log.error = "docker buildx build exited with 1"

    assert log.lines == [raw.removesuffix("\n") for raw in BUILDX_LINES]
    assert log.failed
    message = log.failure_message()
    assert message.splitlines()[0] == "docker buildx build exited with 1"
    assert message.splitlines()[-1] == (
        "ERROR: failed to solve: process did not complete successfully: exit code: 1"
    )


# A two-stage legacy build as the engine streamed it (Docker 26.1.5, containerd store): the
# builder stage ends where the runtime stage's FROM begins, and its last image is left untagged.
TWO_STAGES = [
    "Step 1/7 : ARG BASE_IMAGE=imagekit-base/debian:bookworm",
    "Step 2/7 : FROM ${BASE_IMAGE} AS builder",
    " ---> aab71299ab8c",
    'Step 3/7 : LABEL io.imagekit.stage="builder" io.imagekit.cell="fast-exp"',
    " ---> Running in 3b409e506cac",
    " ---> Removed intermediate container 3b409e506cac",
    " ---> 3b9a1bbb68a8",
    "Step 4/7 : RUN echo hello > /made",
    " ---> Using cache",
    " ---> 594048b51f53",
    "Step 5/7 : FROM ${BASE_IMAGE} AS runtime",
    " ---> aab71299ab8c",
    "Step 6/7 : COPY --from=builder /made /made",
    " ---> 4bf136a782c9",
    'Step 7/7 : LABEL io.imagekit.cell="fast-exp"',
    " ---> a332a240ebfb",
    "Successfully built a332a240ebfb",
]


def test_the_last_image_of_each_stage_before_the_built_one_is_a_stray() -> None:
    log = BuildLog()
    for line in TWO_STAGES:
        log.feed({"stream": line + "\n"})
    assert not log.failed
    assert log.stage_images == log.stray_images == ["594048b51f53"]


def test_a_failed_build_also_leaves_the_last_image_of_its_unfinished_stage() -> None:
    log = BuildLog()
    for line in TWO_STAGES[:7]:
        log.feed({"stream": line + "\n"})
    log.feed({"error": "The command '/bin/sh -c echo hello > /made' returned a non-zero code: 1"})
    assert log.failed and log.stage_images == []
    assert log.stray_images == ["3b9a1bbb68a8"]


def test_a_single_stage_build_and_buildkit_leave_no_stray() -> None:
    legacy = BuildLog()
    for item in LEGACY_SUCCESS:
        legacy.feed(item)
    assert legacy.stray_images == []
    buildkit = BuildLog()
    buildkit.feed(
        {"stream": "#5 [builder 1/4] FROM docker.io/library/debian\n#9 [runtime 1/3] FROM x\n"}
    )
    assert buildkit.stray_images == []
