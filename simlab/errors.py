"""The error types of user mistakes, shared by every layer of simlab."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user error in a config or a command: the message names the field (or file) and what
    is allowed. The CLI turns it into exit code 2, before any compute and with nothing written."""


class ResultsError(ConfigError):
    """A sweep directory or results file that cannot be read (missing, truncated, not what
    simlab wrote): the message names the file and what to do. Exit code 2 as well."""


class StorageError(OSError):
    """A file simlab had to write could not be written (disk full, read-only place, permission
    denied): the message names the path and says what was kept. Nothing is left half-written
    (every write is a temporary file then a rename). The CLI turns it into one line and exit 1."""


class Interrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C (or SIGINT) after saving what it finished: `message` says how
    much was saved where and how to resume. The CLI prints it and exits with 130."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
