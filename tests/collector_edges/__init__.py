"""Tests of the collector's edges against real loopback servers, files and subprocesses."""
