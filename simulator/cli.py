"""``sevents-imds-sim``: run a scenario on a simulated IMDS and log what happens to each VM."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
from types import FrameType

from sevents.errors import EXIT_STATUS, ExitCode, exit_code
from sevents.logs import setup_logging
from sevents.version import add_version_flag
from simulator.attested import AttestationRootError, attested_authority
from simulator.control import jsonable
from simulator.errors import ScenarioError
from simulator.loader import builtin_names, load_scenario
from simulator.server import SimServer

log = logging.getLogger("simulator")

EPILOG = """\
Every VM of the scenario's fleet is served under its own base URL: a collector on VM NAME uses
  http://HOST:PORT/vm/NAME   (then /metadata/scheduledevents?api-version=... and /metadata/instance?...,
                             /metadata/attested/document?api-version=...&nonce=... signed by a test root)
Plain /metadata/... without /vm/NAME answers as the first VM.

Control and inspection endpoints (no Metadata header needed):
  GET  /_sim/status              scenario, speed, events by state, faults injected
  GET  /_sim/vms                 every VM: name, vmId, fault/update domain, group, base path
  GET  /_sim/truth               what really happened per (event, VM): scheduled, approved, started, ended
  GET  /_sim/history?vm=NAME     every document the VM's IMDS went through
  GET  /_sim/approvals           every approval received: at, vm, event_id, source (http | script)
  GET  /_sim/faults              faults still armed
  POST /_sim/faults              arm faults, e.g. {"vm": "web-0", "kind": "429", "count": 3, "retry_after": 2}
                                 kinds: 429 410 500 timeout slow malformed truncated reset; "vm": "*" = all

Scenario times are Azure's real timings (15 min notice, ~10 min Started); --speed compresses them:
--speed 60 makes a minute of scenario time pass in one second.

"""
EPILOG += EXIT_STATUS.replace("(ClickHouse, network, file)", "(cannot listen, cannot write --truth-out)") + "\n"


def _speed(text: str) -> float:
    """A finite positive speed factor (nan or inf would only fail later, inside the engine's clock arithmetic)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text!r}")
    return value


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (the socket layer raises OverflowError, not OSError, beyond that)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        prog="sevents-imds-sim",
        description="Simulated Azure Instance Metadata Service (Scheduled Events) for a fleet of VMs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(parser)
    parser.add_argument(
        "--scenario", default="demo", help="built-in scenario name or path to a TOML file (default: demo)"
    )
    parser.add_argument(
        "--speed", type=_speed, default=None, help="scenario seconds per wall second (default: the scenario's own)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8080, help="port to bind, 0 = any free port (default: 8080)")
    parser.add_argument("--list-scenarios", action="store_true", help="list the built-in scenarios and exit")
    parser.add_argument("--exit-when-done", action="store_true", help="exit once every scenario event has ended")
    parser.add_argument(
        "--linger", type=float, default=2.0, help="with --exit-when-done, keep serving this many seconds (default: 2)"
    )
    parser.add_argument(
        "--truth-out", default=None, help="write the ground truth as JSON to this file on exit (default: not written)"
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="(default: info)"
    )
    parser.add_argument(
        "--attestation-root",
        nargs=2,
        metavar=("CERT_PEM", "KEY_PEM"),
        help="sign /metadata/attested/document under this test root (its certificate and unencrypted key); the "
        "ingest's attestation_ca_file names CERT_PEM (default: a root generated at start, see --attestation-root-out)",
    )
    parser.add_argument("--attestation-root-out", help="write the test root's certificate (PEM) to this file")
    return parser


def _list() -> int:
    for name in builtin_names():
        print(f"{name:20} {load_scenario(name).description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.truth_out and not os.path.isdir(os.path.dirname(os.path.abspath(args.truth_out))):
        # Checked up front: finding out only after the whole scenario ran would waste the run.
        parser.error(f"--truth-out: directory of {args.truth_out} does not exist")
    setup_logging(args.log_level)
    if args.list_scenarios:
        return _list()
    try:
        scenario = load_scenario(args.scenario)
        authority = attested_authority(args.attestation_root, args.attestation_root_out)
        server = SimServer(scenario, speed=args.speed, host=args.host, port=args.port, attested=authority)
    except ScenarioError as e:
        print(e.lines("sevents-imds-sim"), file=sys.stderr)
        return exit_code(e)
    except AttestationRootError as e:
        print(f"sevents-imds-sim: {e}", file=sys.stderr)
        return int(ExitCode.INVALID)
    except OSError as e:
        print(f"sevents-imds-sim: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return exit_code(e)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with server:
        # The first line on stdout is the base URL, so a script that started us with --port 0 can read it.
        print(server.base_url, flush=True)
        while not stop.wait(0.1):
            if args.exit_when_done and server.done():
                stop.wait(args.linger)
                break
        if args.truth_out and not _write_truth(args.truth_out, server.truth()):
            return 1
        log.info("simulator stopped", extra={"scenario": scenario.name, "done": server.done()})
    return 0


def _write_truth(path: str, truth: object) -> bool:
    try:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(jsonable(truth), out, indent=1)
    except OSError as e:
        print(f"sevents-imds-sim: cannot write --truth-out {path}: {e.strerror or e}", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
