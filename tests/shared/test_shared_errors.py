"""One error tree, one exit-code map: every package's errors are SeventsErrors and carry the shared codes."""

from __future__ import annotations

import pytest

from ingest.errors import IngestError, InvalidRecord, MigrationError, StoreError, TargetError
from sevents.errors import ConfigError, ExitCode, SeventsError, exit_code
from simulator.errors import ScenarioError, SimulatorError


@pytest.mark.parametrize("cls", [IngestError, InvalidRecord, MigrationError, StoreError, TargetError, SimulatorError])
def test_package_errors_are_seventserrors(cls: type[Exception]) -> None:
    assert issubclass(cls, SeventsError)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError(["port: not a number"]), ExitCode.INVALID),
        (ScenarioError(["events: empty"]), ExitCode.INVALID),
        (TargetError("in use"), ExitCode.FAILED),
        (MigrationError("edited migration"), ExitCode.FAILED),
        (OSError(28, "No space left on device"), ExitCode.FAILED),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED),
    ],
)
def test_exit_codes_come_from_one_map(error: BaseException, code: ExitCode) -> None:
    assert exit_code(error) == code


def test_invalid_input_is_2_and_failures_are_1_as_the_help_says() -> None:
    """The numbers are the ones argparse (2 for usage) and shells (130 for Ctrl-C) already use."""
    assert (ExitCode.OK, ExitCode.FAILED, ExitCode.INVALID, ExitCode.INTERRUPTED) == (0, 1, 2, 130)
