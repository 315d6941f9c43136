"""A console script closes the embedded clients it opened before the interpreter exits (``as_command``).

Left open, the engine is torn down by its static destructors while its worker threads run, which now and then
kills a finished ingest with SIGSEGV (exit -11 after "ingest stopped"). Each case runs in a process of its own,
as the installed commands do: closing every client of a test worker would close the other tests' clients too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = """
import sys, threading
from ingest.clickhouse import as_command, connect

opened = []
def main() -> int:
    opened.extend(connect(sys.argv[1]) for _ in range(2))
    opened[0].command("CREATE TABLE t (n UInt8) ENGINE MergeTree ORDER BY n")
    opened[1].insert("t", [[1], [2]], column_names=["n"])
    if sys.argv[2] == "raise":
        raise RuntimeError("the command failed")
    return 3

try:
    code = as_command(main)()
except RuntimeError:
    code = 4
for client in opened:
    try:
        client.query("SELECT 1")
        print("open")
    except Exception as error:
        print("closed:", error)
sys.exit(code)
"""


@pytest.mark.parametrize(("how", "code"), [("return", 3), ("raise", 4)])
def test_the_clients_a_command_opened_are_closed_when_it_ends(tmp_path: Path, how: str, code: int) -> None:
    """Whether the command returns or raises, both clients it opened are closed after it, and its exit code
    stands; the rows it stored are there for the next process."""
    target = f"chdb://{tmp_path / 'ch'}"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, target, how], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == code, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("closed:") for line in lines), done.stdout
    again = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ingest.clickhouse import connect; "
            "print(connect(sys.argv[1]).query('SELECT sum(n) FROM t').result_rows[0][0])",
            target,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0 and again.stdout.strip() == "3", again.stderr[-2000:]
