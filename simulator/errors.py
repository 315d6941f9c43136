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
        super().__init__("; ".join(self.problems))

    def lines(self, prog: str) -> str:
        """What a command prints: one line per problem, each ``PROG: invalid scenario: PROBLEM`` (the form of
        ``sevents.config.error_lines``), so a log shipper or ``head -1`` sees the whole of each problem."""
        return "\n".join(f"{prog}: invalid scenario: {problem}" for problem in self.problems)
