"""The exception tree. Every error says what went wrong and what to do.

    SparringError
     ├── ConfigError (ValueError)            bad config / CLI input
     ├── TaskError (ValueError)              a task directory is missing or malformed
     ├── SandboxError (RuntimeError)         the sandbox infrastructure failed
     │    ├── SandboxUnavailableError        the backend cannot run here (e.g. no bwrap)
     │    └── WorkspaceFault                 the host refuses what the agent made (too large, unreadable)
     ├── ImageError (RuntimeError)           an image cannot be pulled, imported, unpacked or found
     ├── PolicyError (RuntimeError)          the policy could not produce an action
     ├── EnvironmentUsageError (RuntimeError) an Environment used out of order (step before
     │                                        reset, after the end, sync call in a running loop)
     ├── JudgeError (RuntimeError)           the judge could not score (infra, not the agent)
     ├── StoreError (RuntimeError)           the trajectory store failed or is corrupt
     └── NotBuiltError (NotImplementedError) a command or backend that is not built yet

Timeouts, OOM kills and failing tests are *results*, never exceptions: only
infrastructure faults raise.
"""

from __future__ import annotations


class SparringError(Exception):
    """Root of every error Sparring raises on purpose."""


class ConfigError(SparringError, ValueError):
    """A configuration value or command-line argument is invalid."""


class TaskError(SparringError, ValueError):
    """A task directory is missing, malformed or inconsistent."""


class SandboxError(SparringError, RuntimeError):
    """The sandbox infrastructure failed (not the command inside it)."""


class SandboxUnavailableError(SandboxError):
    """The sandbox backend cannot run on this machine."""


class WorkspaceFault(SandboxError):
    """What the agent made in its sandbox cannot be handled on the host: a fault of that sandbox alone.

    ``flag`` names the cause for records and verdicts: ``workspace_too_large``
    (apparent sizes or entries beyond the quota), ``workspace_unreadable``,
    ``workspace_changed`` (moved under a walk no freezer stopped). The agent
    caused it, so a rollout scores it 0 with the flag; nothing else is affected.
    """

    def __init__(self, message: str, flag: str) -> None:
        super().__init__(message)
        self.flag = flag


class ImageError(SparringError, RuntimeError):
    """A container image cannot be pulled, imported, built, unpacked or found in the image store."""


class PolicyError(SparringError, RuntimeError):
    """The policy failed to produce an action (server down, model missing...)."""


class EnvironmentUsageError(SparringError, RuntimeError):
    """An :class:`~sparring.env.Environment` was called out of order or from the wrong context."""


class JudgeError(SparringError, RuntimeError):
    """The judge could not produce a score for infrastructure reasons."""


class StoreError(SparringError, RuntimeError):
    """The trajectory store failed."""


class NotBuiltError(SparringError, NotImplementedError):
    """A command or backend that exists in the design but is not built yet."""


def one_line(e: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none): for a record or log
    line that must stay one line."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
