"""IMDS endpoint discovery for non-VNET VMs: the address in DHCP option 245 of the lease files.

Classic (non-VNET) VMs and cloud services reach the metadata service at the address the Azure DHCP server
hands out in private option 245 (four bytes, an IPv4 address), not at 169.254.169.254. The parser is pure and
understands the forms the common DHCP clients write:

- ISC dhclient (also NetworkManager's dhclient backend): ``option unknown-245 a9:fe:a9:fe;`` inside
  ``lease { ... }`` blocks, or a quoted string with octal escapes when the bytes happen to be printable;
  the last lease in the file is the newest.
- systemd-networkd and NetworkManager's internal client: ``OPTION_245=A9FEA9FE`` (hex, key=value).
- NetworkManager state / ``nmcli`` dumps: ``private_245 = a9:fe:a9:fe`` or ``unknown_245=...``.
"""

from __future__ import annotations

import glob
import ipaddress
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

DEFAULT_LEASE_GLOBS: Final = (
    "/var/lib/dhcp/dhclient*.lease*",
    "/var/lib/dhclient/*.lease*",
    "/var/lib/NetworkManager/*.lease",
    "/run/systemd/netif/leases/*",
)

_DHCLIENT = re.compile(r"option\s+unknown-245\s+(?P<value>\"(?:[^\"\\]|\\.)*\"|[0-9A-Fa-f:]+)\s*;")
_KEY_VALUE = re.compile(
    r"^(?:.*\s)?(?:OPTION_245|private_245|unknown_245|option_245)\s*[=:]\s*(?P<value>[0-9A-Fa-f: ]+?)\s*$",
    re.MULTILINE | re.IGNORECASE,
)


def parse_option_245(text: str) -> str | None:
    """The IPv4 address in the last option 245 of a lease file's text, or None if there is none readable."""
    found: list[bytes] = []
    for match in _DHCLIENT.finditer(text):
        raw = _dhclient_value(match.group("value"))
        if raw is not None:
            found.append(raw)
    for match in _KEY_VALUE.finditer(text):
        raw = _hex_bytes(match.group("value"))
        if raw is not None:
            found.append(raw)
    for raw in reversed(found):
        if len(raw) == 4:
            return str(ipaddress.IPv4Address(raw))
    return None


def _dhclient_value(value: str) -> bytes | None:
    if value.startswith('"'):
        return _unescape(value[1:-1])
    return _hex_bytes(value)


def _hex_bytes(value: str) -> bytes | None:
    """``a9:fe:a9:fe`` (dhclient may drop a leading zero: ``a8:3f:81:10`` vs ``a:0:0:1``) or ``A9FEA9FE``."""
    value = value.strip().replace(" ", "")
    try:
        if ":" in value:
            parts = value.split(":")
            if not all(1 <= len(p) <= 2 for p in parts):
                return None
            return bytes(int(p, 16) for p in parts)
        if len(value) % 2:
            return None
        return bytes.fromhex(value)
    except ValueError:
        return None


def _unescape(body: str) -> bytes | None:
    """dhclient's quoted form: printable bytes as themselves, others as ``\\ooo`` octal escapes."""
    out = bytearray()
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            octal = re.match(r"[0-7]{1,3}", body[index + 1 : index + 4])
            if octal:
                value = int(octal.group(), 8)
                if value > 255:
                    return None
                out.append(value)
                index += 1 + len(octal.group())
                continue
            char = body[index + 1]
            index += 1
        if ord(char) > 255:
            return None
        out.append(ord(char))
        index += 1
    return bytes(out)


def lease_files(globs: Iterable[str]) -> list[Path]:
    """The existing lease files matching ``globs``, newest first (the current lease is the one last written)."""
    paths = {Path(p) for pattern in globs for p in glob.glob(pattern)}
    files = [p for p in paths if p.is_file()]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def resolve_base_url(imds_url: str, *, discover: bool, globs: Iterable[str] = DEFAULT_LEASE_GLOBS) -> str:
    """The IMDS base URL to use: option 245's address when ``discover`` and a lease has one, else ``imds_url``."""
    if discover:
        found = discover_endpoint(globs)
        if found is not None:
            return found
        log.warning("no DHCP option 245 found; using imds_url", extra={"imds_url": imds_url})
    return imds_url


def discover_endpoint(globs: Iterable[str] = DEFAULT_LEASE_GLOBS) -> str | None:
    """``http://<address>`` from the newest lease file that carries option 245, or None."""
    for path in lease_files(globs):
        try:
            text = path.read_text(encoding="latin-1")
        except OSError as error:
            log.warning("cannot read DHCP lease file", extra={"path": str(path), "error": str(error)})
            continue
        address = parse_option_245(text)
        if address is not None:
            log.info("IMDS endpoint from DHCP option 245", extra={"path": str(path), "address": address})
            return f"http://{address}"
    return None
