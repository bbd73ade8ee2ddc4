"""The one error type of user mistakes, shared by every layer of simlab."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user error in a config or a command: the message names the field (or file) and what
    is allowed. The CLI turns it into exit code 2, before any compute and with nothing written."""
