"""DHCP option 245 discovery: real lease file samples of dhclient, systemd-networkd and NetworkManager."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.dhcp import discover_endpoint, parse_option_245

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("name", "address"),
    [
        ("dhclient.eth0.leases", "169.254.169.254"),  # the last lease block wins
        ("networkd-2", "168.63.129.16"),
        ("internal-eth0.lease", "169.254.169.254"),
        ("nm-device-dump.txt", "168.63.129.16"),
        ("dhclient-quoted.leases", "65.66.67.68"),
        ("dhclient-no245.leases", None),
    ],
)
def test_lease_samples(name: str, address: str | None) -> None:
    """Each client's lease format yields the address in option 245 (or None when absent)."""
    assert parse_option_245((FIXTURES / name).read_text()) == address


def test_octal_escapes_in_quoted_form() -> None:
    """dhclient's quoted form with octal escapes decodes byte by byte."""
    assert parse_option_245('option unknown-245 "\\251\\376\\251\\376";') == "169.254.169.254"


def test_wrong_length_is_ignored() -> None:
    """An option 245 that is not four bytes is not an address."""
    assert parse_option_245("option unknown-245 a9:fe:a9;") is None
    assert parse_option_245("OPTION_245=A9FEA9FE00") is None


@given(st.binary(min_size=4, max_size=4))
def test_any_address_round_trips_in_both_forms(raw: bytes) -> None:
    """Four bytes written the way dhclient or networkd writes them come back as the same IPv4 address."""
    expected = str(ipaddress.IPv4Address(raw))
    assert parse_option_245("option unknown-245 " + ":".join(f"{b:x}" for b in raw) + ";") == expected
    assert parse_option_245("OPTION_245=" + raw.hex().upper() + "\n") == expected


@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    """Any lease file text yields an address string or None, never an exception."""
    result = parse_option_245(text)
    assert result is None or isinstance(ipaddress.IPv4Address(result), ipaddress.IPv4Address)


def test_discover_prefers_the_newest_file(tmp_path: Path) -> None:
    """Among matching lease files, the most recently written one that has option 245 is used."""
    old = tmp_path / "dhclient.eth0.leases"
    new = tmp_path / "dhclient.eth1.leases"
    empty = tmp_path / "dhclient.eth2.leases"
    old.write_text((FIXTURES / "networkd-2").read_text())
    new.write_text((FIXTURES / "internal-eth0.lease").read_text())
    empty.write_text((FIXTURES / "dhclient-no245.leases").read_text())
    os.utime(old, (1_000, 1_000))
    os.utime(new, (2_000, 2_000))
    os.utime(empty, (3_000, 3_000))
    assert discover_endpoint([str(tmp_path / "dhclient*.leases")]) == "http://169.254.169.254"
    assert discover_endpoint([str(tmp_path / "nothing*")]) is None
