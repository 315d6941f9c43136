"""Tests of the collector's pure core: decode, transitions, enrich."""
