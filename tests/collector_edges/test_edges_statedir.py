"""A state dir no other user can turn against the collector (issue 29): it runs as root on the VM, so a directory
another user owns is refused, other users' write access to its own is taken away, and no state file is opened
through a link (the lock, the alive file, the disk reserve, the outbox and its WAL)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from collector.liveness import AliveFile
from collector.outbox import Outbox, OutboxIOError
from collector.statedir import LOCK_FILE, check_owner, lock_state_dir
from tests.collector_edges.fake_imds import FakeImds
from tests.collector_edges.test_edges_cli import COLLECTOR, clean_env


def another_users_dir(tmp_path: Path) -> Path:
    """A directory this process does not own: made and given away as root, else one root owns."""
    if os.geteuid() != 0:
        return Path("/")
    state = tmp_path / "theirs"
    state.mkdir(mode=0o755)
    os.chown(state, 12345, 12345)
    return state


def victim(tmp_path: Path) -> Path:
    """A file the collector must never write (root's, in the threat)."""
    path = tmp_path / "victim"
    path.write_text("keep me\n")
    return path


def test_a_state_dir_another_user_owns_is_refused_before_any_file_is_made(tmp_path: Path) -> None:
    state = another_users_dir(tmp_path)
    before = sorted(os.listdir(state))
    with pytest.raises(PermissionError, match="not by the collector's user"):
        lock_state_dir(state)
    assert sorted(os.listdir(state)) == before


def test_the_collector_refuses_it_in_one_line_and_polls_nothing(imds: FakeImds, tmp_path: Path) -> None:
    state = another_users_dir(tmp_path)
    result = subprocess.run(
        [COLLECTOR, "once", "--imds-url", imds.base_url, "--state-dir", str(state)],
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    assert b"not by the collector's user" in result.stderr and str(state).encode() in result.stderr
    assert b"Traceback" not in result.stderr
    assert imds.seen == []


@pytest.mark.parametrize("mode", [0o775, 0o777, 0o1777, 0o730])
def test_other_users_write_access_to_our_own_state_dir_is_taken_away(tmp_path: Path, mode: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, mode)
    check_owner(state)
    left = stat.S_IMODE(os.stat(state).st_mode)
    assert left & 0o022 == 0
    assert left | 0o022 == mode | 0o022, "nothing but the group's and others' write bits changes"


def test_a_lock_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = victim(tmp_path)
    (state / LOCK_FILE).symlink_to(target)
    with pytest.raises(OSError):
        lock_state_dir(state)
    assert target.read_text() == "keep me\n"


def test_an_alive_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = victim(tmp_path)
    (state / "alive").symlink_to(target)
    with pytest.raises(OSError):
        AliveFile(state, "boot-id")
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("name", ["outbox.sqlite", "outbox.sqlite-wal", "outbox.sqlite-shm"])
def test_an_outbox_file_that_is_a_link_is_not_opened(tmp_path: Path, name: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = victim(tmp_path)
    (state / name).symlink_to(target)
    with pytest.raises(OutboxIOError, match="is a link"):
        Outbox(state / "outbox.sqlite")
    assert target.read_text() == "keep me\n"


def test_a_fresh_state_dir_of_our_own_is_used_as_before(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    fd = lock_state_dir(state)
    try:
        assert (state / LOCK_FILE).is_file()
    finally:
        os.close(fd)
