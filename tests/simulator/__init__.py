"""Tests of the IMDS simulator: protocol, scenarios, faults, and the collector against it."""
