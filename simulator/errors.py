"""The simulator's error tree.

SeventsError
└── SimulatorError
    └── ScenarioError    a scenario file is invalid; ``problems`` lists every problem found
"""

from __future__ import annotations

from sevents.errors import ExitCode, SeventsError


class SimulatorError(SeventsError):
    """Base of the errors the simulator raises on purpose."""


class ScenarioError(SimulatorError):
    """The scenario is invalid; every problem is listed, not only the first."""

    exit_code = ExitCode.INVALID

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid scenario:\n" + "\n".join(f"  - {p}" for p in self.problems))
