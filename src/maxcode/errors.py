"""Errors that the command line turns into one clear line and an exit code."""

from __future__ import annotations


class MaxcodeError(Exception):
    """Bad usage or bad input (a missing file, a malformed task, an unknown model): exit 2."""

    exit_code = 2


class TaskError(MaxcodeError):
    """A task folder, problem file or PIE row that cannot be loaded or is inconsistent."""


class JobFailed(MaxcodeError):
    """The job ran and failed (exit 1): nothing was wrong with the input."""

    exit_code = 1


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a recorded run (or bench); everything so far is kept, and ``run_id``
    resumes it."""

    def __init__(self, run_id: str, command: str = "optimize") -> None:
        super().__init__(run_id)
        self.run_id = run_id
        """The run (or bench) to resume."""
        self.resume = f"maxcode {command} --resume {run_id}"
        """The command line that resumes it."""
