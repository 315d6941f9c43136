"""The systemd unit's sandbox hides nothing the collector reads: checked against a model of its options, then
for real, by mounting /proc as the unit's options have systemd mount it and running the collector under it.

Issue 30: ``ProcSubset=pid`` mounts /proc with ``subset=pid``, which hides /proc/sys/kernel/random/boot_id; the
collector then logs "reboots will not be measured" and never measures one.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from collector.liveness import ALIVE_FILE, DEFAULT_BOOT_ID_FILE, load_alive, read_boot_id
from collector.settings import CollectorSettings, load_settings
from sevents import records
from tests.collector_edges.fake_imds import FakeImds

ROOT = Path(__file__).resolve().parents[2]
UNIT_PATH = ROOT / "infra/systemd/sevents-collector.service"
UNIT = UNIT_PATH.read_text()
# The configurations the unit is shipped with (it loads one of them as /etc/sevents/collector.toml).
SAMPLES = (ROOT / "infra/systemd/collector.toml", ROOT / "infra/systemd/collector-eventhubs.toml")
COLLECTOR = str(Path(sys.executable).parent / "sevents-collector")
# Top-level directories of the file system: a string literal of the collector starting with one names a file.
FS_ROOTS = ("dev", "etc", "home", "opt", "proc", "root", "run", "srv", "sys", "tmp", "usr", "var")
HOMES = tuple(PurePosixPath(p) for p in ("/home", "/root", "/run/user"))
TMPS = tuple(PurePosixPath(p) for p in ("/tmp", "/var/tmp"))
PRIVATE_DEVICES = tuple(PurePosixPath(f"/dev/{d}") for d in ("null", "zero", "full", "random", "urandom", "tty"))
PROCESS_DIR = re.compile(r"^/proc/(self|thread-self|[0-9]+)(/|$)")  # what /proc keeps under subset=pid
YES = ("yes", "true", "on", "1")
PREVIOUS_BOOT = "00000000-0000-4000-8000-000000000000"

Options = dict[str, list[str]]


# -- the unit's options and what they do to the file system (systemd.exec(5)) --------------------------------
def service_options(text: str) -> Options:
    """The [Service] settings of a unit, every assignment of each in order."""
    options: Options = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            options.setdefault(key.strip(), []).append(value.strip())
    return options


def last(options: Options, key: str, default: str = "") -> str:
    return options.get(key, [default])[-1].lower()


def flag(options: Options, key: str) -> bool:
    return last(options, key) in YES


def path_list(options: Options, key: str, base: str = "/") -> list[PurePosixPath]:
    """A list setting's paths ('-' and '+' prefixes and ':options' dropped; an empty assignment resets)."""
    found: list[PurePosixPath] = []
    for value in options.get(key, []):
        if not value:
            found = []
        found += [PurePosixPath(base) / entry.lstrip("-+").split(":")[0] for entry in shlex.split(value)]
    return found


def under(path: PurePosixPath, top: PurePosixPath) -> bool:
    return path == top or top in path.parents


def hidden(options: Options, path: PurePosixPath) -> list[str]:
    """The options that take ``path`` out of the service's view (absent, empty or replaced)."""
    why = []
    if (
        last(options, "ProcSubset") == "pid"
        and under(path, PurePosixPath("/proc"))
        and not PROCESS_DIR.match(str(path))
    ):
        why.append("ProcSubset=pid")
    protect_home = last(options, "ProtectHome", "read-only" if flag(options, "DynamicUser") else "no")
    if protect_home in (*YES, "tmpfs") and any(under(path, home) for home in HOMES):
        why.append(f"ProtectHome={protect_home}")
    for key in ("InaccessiblePaths", "TemporaryFileSystem"):
        why += [f"{key}={top}" for top in path_list(options, key) if under(path, top)]
    if (flag(options, "PrivateTmp") or flag(options, "DynamicUser")) and any(under(path, tmp) for tmp in TMPS):
        why.append("PrivateTmp=yes")
    if flag(options, "ProtectKernelLogs") and str(path) in ("/proc/kmsg", "/dev/kmsg"):
        why.append("ProtectKernelLogs=yes")
    if flag(options, "PrivateDevices") and under(path, PurePosixPath("/dev")) and path not in PRIVATE_DEVICES:
        why.append("PrivateDevices=yes")
    return why


def read_only(options: Options, path: PurePosixPath) -> list[str]:
    """The options that leave ``path`` read-only (the deepest rule naming it wins, as in systemd)."""
    writable = [*path_list(options, "ReadWritePaths")]
    for key, base in (("StateDirectory", "/var/lib"), ("CacheDirectory", "/var/cache"), ("LogsDirectory", "/var/log")):
        writable += path_list(options, key, base)
    writable += path_list(options, "RuntimeDirectory", "/run")
    depth = max((len(w.parts) for w in writable if under(path, w)), default=0)
    why = [
        f"ReadOnlyPaths={top}"
        for top in path_list(options, "ReadOnlyPaths")
        if under(path, top) and len(top.parts) >= depth
    ]
    system = last(options, "ProtectSystem", "strict" if flag(options, "DynamicUser") else "no")
    if not depth and system == "strict":
        why.append("ProtectSystem=strict")
    elif system in (*YES, "full") and any(under(path, PurePosixPath(p)) for p in ("/usr", "/boot", "/efi")):
        why.append(f"ProtectSystem={system}")
    return why


# -- what the collector reads and writes ----------------------------------------------------------------------
def glob_dir(pattern: str) -> PurePosixPath:
    """The directory a glob pattern looks in (its part before the first wildcard)."""
    head = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    return PurePosixPath(head if head.endswith("/") or head == pattern else head.rsplit("/", 1)[0])


def code_paths() -> dict[PurePosixPath, str]:
    """Every file-system path written as a literal in the collector's code (e.g. /proc/self/stat)."""
    found: dict[PurePosixPath, str] = {}
    for source in sorted((ROOT / "collector").rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value:
                parts = node.value.split("/")
                if len(parts) > 2 and parts[0] == "" and parts[1] in FS_ROOTS:
                    found[glob_dir(node.value)] = f"{source.relative_to(ROOT)}:{node.lineno}"
    return found


def shipped_settings() -> list[tuple[str, CollectorSettings]]:
    return [("defaults", CollectorSettings())] + [(s.name, load_settings(file=s, env={})) for s in SAMPLES]


def collector_reads(options: Options) -> dict[PurePosixPath, str]:
    """Each path the collector reads under the unit, with where it comes from."""
    reads = code_paths()
    for origin, settings in shipped_settings():
        reads[PurePosixPath(settings.boot_id_file)] = f"{origin}: boot_id_file"
        reads[PurePosixPath(settings.state_dir)] = f"{origin}: state_dir"
        reads.update({glob_dir(g): f"{origin}: dhcp_lease_globs" for g in settings.dhcp_lease_globs})
    (exec_start,) = options["ExecStart"]
    argv = shlex.split(exec_start)
    reads[PurePosixPath(argv[argv.index("--config") + 1])] = "ExecStart --config"
    return reads


def collector_writes() -> dict[PurePosixPath, str]:
    return {PurePosixPath(s.state_dir): f"{origin}: state_dir" for origin, s in shipped_settings()}


def sandbox_problems(options: Options) -> list[str]:
    problems = [
        f"{path} ({origin}) hidden by {why}"
        for path, origin in collector_reads(options).items()
        if (why := hidden(options, path))
    ]
    problems += [
        f"{path} ({origin}) not writable: {why}"
        for path, origin in collector_writes().items()
        if (why := read_only(options, path))
    ]
    return problems


def test_the_units_sandbox_hides_nothing_the_collector_reads() -> None:
    """The boot id, /proc/self/stat, the state dir, the config and the DHCP leases stay in the service's view."""
    options = service_options(UNIT)
    reads = collector_reads(options)
    assert PurePosixPath(str(DEFAULT_BOOT_ID_FILE)) in reads and PurePosixPath("/proc/self/stat") in reads
    assert sandbox_problems(options) == []
    assert last(options, "ProcSubset", "all") == "all", "ProcSubset=pid hides /proc/sys/kernel/random/boot_id"


def test_the_unit_keeps_its_proc_hardening() -> None:
    """Dropping ProcSubset=pid keeps the rest: other users' processes invisible, /proc/sys read-only."""
    options = service_options(UNIT)
    assert last(options, "ProtectProc") == "invisible"
    assert flag(options, "ProtectKernelTunables") and last(options, "ProtectSystem") == "strict"


@pytest.mark.parametrize(
    ("added", "path", "reason"),
    [
        ("ProcSubset=pid", "/proc/sys/kernel/random/boot_id", "hidden by ['ProcSubset=pid']"),
        (
            "InaccessiblePaths=-/proc/sys/kernel",
            "/proc/sys/kernel/random/boot_id",
            "InaccessiblePaths=/proc/sys/kernel",
        ),
        (
            "InaccessiblePaths=/var/lib/sevents-collector",
            "/var/lib/sevents-collector",
            "hidden by ['InaccessiblePaths=",
        ),
        ("TemporaryFileSystem=/etc:ro", "/etc/sevents/collector.toml", "hidden by ['TemporaryFileSystem=/etc']"),
        ("ReadOnlyPaths=/var/lib/sevents-collector", "/var/lib/sevents-collector", "not writable: ['ReadOnlyPaths="),
        ("ReadWritePaths=", "/var/lib/sevents-collector", "not writable: ['ProtectSystem=strict']"),
    ],
)
def test_the_sandbox_check_finds_an_option_that_hides_a_path(added: str, path: str, reason: str) -> None:
    """The check is not vacuous: each option systemd documents as hiding (or freezing) a path is caught."""
    text = UNIT.replace("\n[Install]", f"\n{added}\n[Install]")
    if added == "ReadWritePaths=":  # and no StateDirectory= either: ProtectSystem=strict leaves the dir read-only
        text = text.replace("\nStateDirectory=", "\n#StateDirectory=")
    problems = sandbox_problems(service_options(text))
    assert [p for p in problems if p.startswith(path + " (") and reason in p], problems


# -- the unit's /proc, for real -----------------------------------------------------------------------------
def proc_mount_options(options: Options) -> list[str]:
    """The procfs mount options systemd gives the service's /proc (ProtectProc= -> hidepid=, ProcSubset= -> subset=)."""
    mount = []
    if (protect := last(options, "ProtectProc", "default")) != "default":
        mount.append(f"hidepid={protect}")
    if last(options, "ProcSubset", "all") == "pid":
        mount.append("subset=pid")
    return mount


def sandbox_script(options: Options) -> str:
    """Shell commands that, in a new mount namespace, remount /proc as the unit has it, then exec "$@"."""
    mount = proc_mount_options(options)
    lines = ["set -e", f"mount -t proc {'-o ' + ','.join(mount) if mount else ''} proc /proc"]
    if flag(options, "ProtectKernelTunables"):  # /proc/sys read-only, where there is one
        lines.append(
            "if [ -d /proc/sys ]; then mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys; fi"
        )
    return "\n".join([*lines, 'exec "$@"'])


def in_sandbox(options: Options, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEVENTS_") and "PROXY" not in k.upper()}
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--fork",
            "--",
            "sh",
            "-c",
            sandbox_script(options),
            "sh",
            *argv,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def mount_namespace() -> None:
    """Skip unless /proc can be mounted with the unit's options in a mount namespace (root on Linux: CI)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the unit's /proc is a Linux procfs mount")
    if os.geteuid() != 0:
        pytest.skip("mounting /proc in a mount namespace needs root (CI runs the suite as root)")
    if missing := [tool for tool in ("unshare", "mount", "sh") if shutil.which(tool) is None]:
        pytest.skip(f"{', '.join(missing)} not installed (util-linux)")
    probe = in_sandbox({"ProtectProc": ["invisible"], "ProcSubset": ["pid"]}, ["true"])
    if probe.returncode != 0:
        pytest.skip(
            f"cannot mount /proc with hidepid=invisible,subset=pid in a mount namespace: {probe.stderr.strip()}"
        )


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    server = FakeImds().start()
    yield server
    server.stop()


def once_after_a_reboot(options: Options, imds: FakeImds, state: Path) -> tuple[datetime, list[dict[str, Any]], str]:
    """`sevents-collector once` under ``options``' /proc, its state dir last alive two minutes ago in another boot."""
    state.mkdir()
    last_alive = records.parse_time(records.format_time(datetime.now(UTC) - timedelta(minutes=2)))
    (state / ALIVE_FILE).write_text(f"{PREVIOUS_BOOT} {records.format_time(last_alive)}\n")
    argv = [COLLECTOR, "once", "--imds-url", imds.base_url, "--state-dir", str(state), "--min-request-interval", "0"]
    result = in_sandbox(options, argv)
    assert result.returncode == 0, result.stderr
    return last_alive, [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def test_under_the_units_proc_the_collector_reads_the_boot_id_and_measures_a_reboot(
    mount_namespace: None, imds: FakeImds, tmp_path: Path
) -> None:
    """With /proc mounted as the shipped unit has it, the boot id is read and a reboot becomes an impact record."""
    options = service_options(UNIT)
    boot_id = read_boot_id(DEFAULT_BOOT_ID_FILE)
    assert boot_id
    seen = in_sandbox(options, ["cat", str(DEFAULT_BOOT_ID_FILE), "/proc/self/stat"])
    assert seen.returncode == 0 and seen.stdout.startswith(boot_id + "\n"), seen.stderr

    last_alive, lines, stderr = once_after_a_reboot(options, imds, tmp_path / "state")
    assert "reboots will not be measured" not in stderr
    impacts = [r for r in lines if r["record_type"] == "impact"]
    assert [(r["detected_by"], r["began_at"]) for r in impacts] == [
        (records.DETECTED_REBOOT, records.format_time(last_alive))
    ]
    assert 119_000 <= impacts[0]["duration_ms"] < 600_000  # last alive two minutes before the collector started
    alive = load_alive(tmp_path / "state")  # the new boot's id, as the collector read it under the sandbox
    assert alive is not None and alive.boot_id == boot_id


def test_procsubset_pid_hides_the_boot_id_and_no_reboot_is_measured(
    mount_namespace: None, imds: FakeImds, tmp_path: Path
) -> None:
    """The regression the unit must not have (issue 30): under subset=pid the boot id is gone, reboots unseen."""
    options = service_options(UNIT.replace("\n[Install]", "\nProcSubset=pid\n[Install]"))
    assert proc_mount_options(options) == ["hidepid=invisible", "subset=pid"]
    seen = in_sandbox(options, ["cat", str(DEFAULT_BOOT_ID_FILE)])
    assert seen.returncode != 0 and "No such file" in seen.stderr

    _, lines, stderr = once_after_a_reboot(options, imds, tmp_path / "state")
    assert "cannot read the boot id: reboots will not be measured" in stderr
    assert not [r for r in lines if r["record_type"] == "impact"]
