"""Azurite (Microsoft's Storage emulator) as a subprocess for blob checkpoints: loopback, free port, temp dir."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

ROOT = Path(__file__).resolve().parents[2]
AZURITE = ROOT / ".node" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's documented well-known development account (public, not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_LISTENING = re.compile(r"listens on http://127\.0\.0\.1:(\d+)")


class Azurite:
    """One running azurite-blob; ``connection_string`` reaches it."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process, self.port = process, port

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )


class CheckpointStores:
    """Makes checkpoint stores that all point at one container (``container``)."""

    def __init__(self, connection_string: str, container: str) -> None:
        self.connection_string, self.container = connection_string, container

    @classmethod
    def create(cls, azurite: Azurite, container: str) -> CheckpointStores:
        """Create ``container`` in ``azurite`` (the store expects it to exist, as it must in Azure)."""
        # The checkpoint store package ships its own copy of the storage client (azure-storage-blob is
        # not a dependency), so the container is made with that copy.
        from azure.eventhub.extensions.checkpointstoreblob._vendor.storage.blob import ContainerClient

        ContainerClient.from_connection_string(azurite.connection_string, container).create_container()
        return cls(azurite.connection_string, container)

    def __call__(self) -> BlobCheckpointStore:
        return BlobCheckpointStore.from_connection_string(self.connection_string, self.container)


@contextlib.contextmanager
def running_azurite(location: Path, timeout: float = 30.0) -> Iterator[Azurite]:
    """Start Azurite on 127.0.0.1 with a free port and data in ``location``; stop it on exit."""
    if not AZURITE.exists():
        raise RuntimeError(f"{AZURITE} is missing: run `bash scripts/setup.sh --test` first")
    command = [
        str(AZURITE),
        "--blobHost", "127.0.0.1",
        "--blobPort", "0",
        "--location", str(location),
        "--skipApiVersionCheck",
        "--disableTelemetry",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found: list[int] = []
    ready = threading.Event()

    def watch() -> None:
        assert process.stdout is not None
        for line in process.stdout:  # keep draining so Azurite never blocks on a full pipe
            match = _LISTENING.search(line)
            if match and not found:
                found.append(int(match.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(timeout) or not found:
            raise RuntimeError("Azurite did not report its port")
        yield Azurite(process, found[0])
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
