"""The error tree the central commands share, and the one place that maps errors to process exit codes.

SeventsError                  exit 1: something the process needed failed (store, network, file)
├── ConfigError               exit 2: invalid configuration or arguments; every problem is listed
├── ingest.errors.IngestError exit 1: InvalidRecord, StoreError (RejectedRows), Interrupted, MigrationError,
│                                     TargetError
└── simulator.errors.SimulatorError
    └── ScenarioError         exit 2: an invalid scenario is invalid input, like a bad flag

Every command line (sevents-collector, sevents-ingest, sevents-report, sevents-imds-sim, sevents-demo) uses the
same numbers; see ``EXIT_STATUS``. argparse's own usage errors are also 2, and Ctrl-C is 130 (128 + SIGINT).
Only ``sevents-collector`` exits 3 (``ExitCode.NO_STATE``): its state directory cannot be used or read.

The collector's own errors are not in this tree: a daemon rides them out inside its parts rather than end with
them. Its tree is drawn in the ``collector`` package's docstring; the ingest's in ``ingest/errors.py``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes shared by every command."""

    OK = 0
    FAILED = 1  # a dependency or an output failed: ClickHouse, the network, a file that cannot be written
    INVALID = 2  # invalid configuration, arguments or scenario: nothing was attempted
    # sevents-collector only: its state directory cannot be used. once/run: in use or unusable (or --metrics-addr
    # cannot be bound); status: no outbox there, or the directory or the outbox cannot be read (permission denied)
    NO_STATE = 3
    INTERRUPTED = 130  # stopped by SIGINT before finishing


EXIT_STATUS = (
    "exit status: 0 ok, 1 a dependency or output failed (ClickHouse, network, file), "
    "2 invalid configuration, arguments or scenario, 130 interrupted."
)


class SeventsError(Exception):
    """Base of every error this project raises on purpose; ``exit_code`` is what a command exits with."""

    exit_code: ExitCode = ExitCode.FAILED


class ConfigError(SeventsError):
    """The configuration is invalid; ``problems`` lists every problem found, not only the first."""

    exit_code = ExitCode.INVALID

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


def exit_code(error: BaseException) -> int:
    """The exit code for an error that ends a command: ours carry it, the rest are failures or interruptions."""
    if isinstance(error, SeventsError):
        return int(error.exit_code)
    if isinstance(error, KeyboardInterrupt):
        return int(ExitCode.INTERRUPTED)
    return int(ExitCode.FAILED)
