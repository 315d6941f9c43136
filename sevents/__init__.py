"""Shared pieces of the sevents pipeline: the wire contract, layered config, logging, retry and telemetry."""

__version__ = "0.1.0"
