"""A simulated Azure IMDS (Scheduled Events and instance metadata) for a whole fleet, driven by scenarios.

Start one in-process with ``SimServer(load_scenario("demo"), speed=...).start()`` and point the collector of
VM ``NAME`` at ``server.vm_base_url(NAME)`` (``http://HOST:PORT/vm/NAME``); or run ``sevents-imds-sim``.
"""

from __future__ import annotations

from simulator.errors import ScenarioError, SimulatorError
from simulator.loader import builtin_names, load_scenario
from simulator.scenario import Scenario
from simulator.server import SimServer

BUILTIN_SCENARIOS: tuple[str, ...] = tuple(builtin_names())

__all__ = ["BUILTIN_SCENARIOS", "Scenario", "ScenarioError", "SimServer", "SimulatorError", "load_scenario"]
