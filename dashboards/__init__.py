"""Grafana dashboards, alert rules and provisioning as code, the macro model tests use, and the HTML report."""
