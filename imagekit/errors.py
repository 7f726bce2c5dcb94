"""The one error family of imagekit, with an exit code per kind.

The CLI maps these to exit codes and prints them without a traceback; anything
else that escapes is a bug and is shown with its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, one per kind of failure (README.md, Commands)."""

    OK = 0
    BAD_INPUT = 2
    ENGINE_UNAVAILABLE = 3
    BUILD_FAILED = 4
    PROBE_FAILED = 5
    PUBLISH_FAILED = 6
    GPU_MISMATCH = 7
    NOT_ATTESTED = 8
    AUDIT_FAILED = 9
    INTERRUPTED = 130


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a user's input, located in its file."""

    file: str
    line: int
    col: int
    message: str
    hint: str = ""

    def format(self) -> str:
        """`file:line:col: message` and, when there is one, an indented hint."""
        text = f"{self.file}:{self.line}:{self.col}: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text


class ImagekitError(Exception):
    """Base of every expected failure. Carries a hint and an exit code."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def format(self) -> str:
        """The message a person reads, hint included."""
        return f"{self.message}\n    hint: {self.hint}" if self.hint else self.message


class InputError(ImagekitError):
    """Bad user input (files, options). Reported before any Docker call."""

    exit_code = ExitCode.BAD_INPUT


class ValidationError(InputError):
    """One or more located problems in an input file, all reported at once."""

    def __init__(self, problems: list[Problem], outcome: str = "nothing was built") -> None:
        ordered = sorted(set(problems), key=lambda p: (p.file, p.line, p.col, p.message))
        noun = "problem" if len(ordered) == 1 else "problems"
        super().__init__(f"{len(ordered)} {noun} found")
        self.problems = ordered
        self.outcome = outcome  # what the failure left undone, for the last line

    def format(self) -> str:
        """Every problem on its own line(s), then the count."""
        lines = [p.format() for p in self.problems]
        lines.append(f"{self.message}; {self.outcome}.")
        return "\n".join(lines)


class EngineUnavailableError(ImagekitError):
    """No Docker engine answers."""

    exit_code = ExitCode.ENGINE_UNAVAILABLE


class EngineError(ImagekitError):
    """The engine answered, but refused or failed what it was asked (an API error)."""

    exit_code = ExitCode.ENGINE_UNAVAILABLE


class BuildFailedError(ImagekitError):
    """An image failed to build."""

    exit_code = ExitCode.BUILD_FAILED


class ProbeFailedError(ImagekitError):
    """A required probe did not pass."""

    exit_code = ExitCode.PROBE_FAILED


class PublishError(ImagekitError):
    """Publishing was refused or failed."""

    exit_code = ExitCode.PUBLISH_FAILED


class GpuMismatchError(ImagekitError):
    """An image cannot use this host's GPUs (driver too old, architecture missing, no GPU)."""

    exit_code = ExitCode.GPU_MISMATCH


class NotAttestedError(ImagekitError):
    """An image is unsigned, signed by another key, or its attested verify record does not
    reach what is required (`imagekit attest verify`)."""

    exit_code = ExitCode.NOT_ATTESTED


class AuditFailedError(ImagekitError):
    """An audited image has findings at or above the threshold, or an outdated allowlist entry."""

    exit_code = ExitCode.AUDIT_FAILED


class GpuUnavailableError(EngineUnavailableError):
    """GPUs were asked for, but the engine cannot hand them to containers."""


class NotVerifiedError(ImagekitError):
    """Some images could not be verified at all; exits as the first of their errors did."""

    def __init__(self, message: str, hint: str, exit_code: ExitCode) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


class RegistryError(ImagekitError):
    """The registry could not be asked (unreachable, or an answer that is no answer).

    `transient`: asking again later may work (a 5xx, a dropped connection)."""

    exit_code = ExitCode.PUBLISH_FAILED

    def __init__(self, message: str, hint: str = "", *, transient: bool = False) -> None:
        super().__init__(message, hint)
        self.transient = transient


# The libraries that talk to the engine: what they raise is engine trouble.
ENGINE_LIBRARIES = ("docker", "requests", "urllib3")


def outside_error(exc: Exception) -> ImagekitError | None:
    """What an exception no adapter translated means to the user; None for a bug (its
    traceback is the report)."""
    # requests' errors are OSErrors too: what an engine library raised is engine trouble
    # that escaped the adapters' translation (exit 3), whatever its base class.
    if type(exc).__module__.split(".")[0] in ENGINE_LIBRARIES:
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        return EngineUnavailableError(
            f"the Docker engine failed: {first}",
            "check the engine (`docker info`) and run the command again",
        )
    if isinstance(exc, OSError):
        # A results folder that is a file, read-only or full, and the like: the file and the
        # reason, never a traceback.
        where = f" {exc.filename}" if exc.filename else ""
        return InputError(
            f"cannot use{where}: {exc.strerror or exc}",
            "check that the folder exists, is writable and has free space",
        )
    return None
