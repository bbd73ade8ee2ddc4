"""The error types of user mistakes, shared by every layer of simlab."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user error in a config or a command: the message names the field (or file) and what
    is allowed. The CLI turns it into exit code 2, before any compute and with nothing written."""


class ResultsError(ConfigError):
    """A sweep directory or results file that cannot be read (missing, truncated, not what
    simlab wrote): the message names the file and what to do. Exit code 2 as well."""
