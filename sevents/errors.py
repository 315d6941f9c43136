"""Errors shared by every sevents process.

SeventsError
└── ConfigError      bad configuration: the process refuses to start and lists every problem
"""

from __future__ import annotations


class SeventsError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(SeventsError):
    """The configuration is invalid; ``problems`` lists every problem found, not only the first."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))
