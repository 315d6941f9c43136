"""What the coordinator asks of Azure: the Maintenance API's acknowledge, and a blob lease per event.

``Acknowledger`` POSTs ``{arm}{resource}/providers/Microsoft.Maintenance/scheduledevents/{eventId}/acknowledge
?api-version=...`` through azure-core's pipeline (request id, user agent, retries, a bearer token from
azure-identity for ``{arm}/.default``, HTTP logging without secrets); Azure answers 200 ``{"value":
"Successfully Approved"}`` and treats it as an approval from the VM through IMDS (shared/DESIGN.md). The
resource is the VM's (``/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/
{vm}``), or a Uniform scale set's for its instances.

``BlobLeases`` keeps one block blob per event in a container (Azure Storage, or Azurite in tests), holding the
event's stage as JSON; whoever holds the blob's lease (15 to 60 s, renewed while it works) decides about the
event, and every write of the stage is conditioned on that lease, so a coordinator that lost it (killed, or
stalled past its lease) can no longer write: it never POSTs after another took over.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Final
from urllib.parse import quote, urlparse

from azure.core import PipelineClient
from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError
from azure.core.pipeline.policies import (
    BearerTokenCredentialPolicy,
    HeadersPolicy,
    HttpLoggingPolicy,
    RequestIdPolicy,
    RetryPolicy,
    UserAgentPolicy,
)
from azure.core.rest import HttpRequest

from ingest.azure_identity import credential_scope
from ingest.errors import LeaseLost
from sevents.version import version

log = logging.getLogger("ingest.coordinator")

ACK_PATH: Final = "/providers/Microsoft.Maintenance/scheduledevents/{event_id}/acknowledge"
_SCALE_SET_INSTANCE: Final = re.compile(
    r"^(/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/virtualMachineScaleSets/[^/]+)"
    r"/virtualMachines/[^/]+$",
    re.IGNORECASE,
)
_VM: Final = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Compute/virtualMachines/[^/]+$", re.IGNORECASE
)


def ack_resource(resource_id: str, subscription_id: str, resource_group: str, vm_name: str) -> str:
    """The resource an event is acknowledged on: the VM's id as the collector reported it, a Uniform scale
    set's for its instances, or one built from subscription, resource group and VM name."""
    scale_set = _SCALE_SET_INSTANCE.match(resource_id)
    if scale_set:
        return scale_set.group(1)
    if _VM.match(resource_id):
        return resource_id
    if subscription_id and resource_group and vm_name:
        return (
            f"/subscriptions/{subscription_id}/resourceGroups/{resource_group}"
            f"/providers/Microsoft.Compute/virtualMachines/{vm_name}"
        )
    return ""


class Acknowledger:
    """The Maintenance API's acknowledge, one event at a time."""

    def __init__(
        self, credential: Any, arm_endpoint: str, api_version: str, *, name: str, timeout_s: float = 10.0
    ) -> None:
        self.arm = arm_endpoint.rstrip("/")
        self.api_version = api_version
        self.timeout_s = timeout_s
        self.enforce_https = urlparse(self.arm).scheme == "https"
        policies = [
            RequestIdPolicy(),
            HeadersPolicy(),
            UserAgentPolicy(user_agent=f"sevents-coordinator/{version()} ({name})"),
            RetryPolicy(retry_total=2, timeout=timeout_s),
            BearerTokenCredentialPolicy(credential, credential_scope(self.arm)),
            HttpLoggingPolicy(),
        ]
        self.client: PipelineClient[Any, Any] = PipelineClient(base_url=self.arm, policies=policies)

    def acknowledge(self, resource: str, event_id: str) -> tuple[int | None, str]:
        """POST the acknowledge of ``event_id`` on ``resource``: (HTTP status, answer or error); status None
        when no answer came (network, timeout: Azure may or may not have it)."""
        path = resource + ACK_PATH.format(event_id=quote(event_id, safe=""))
        request = HttpRequest("POST", self.arm + path, params={"api-version": self.api_version})  # no body
        try:
            response = self.client.send_request(
                request,
                enforce_https=self.enforce_https,
                connection_timeout=min(5.0, self.timeout_s),
                read_timeout=self.timeout_s,
            )
        except AzureError as error:
            return None, str(error).splitlines()[0] if str(error) else type(error).__name__
        return response.status_code, response.text()[:500]

    def close(self) -> None:
        self.client.close()


def _blob_sdk() -> Any:
    """azure-storage-blob (the central extra's dependency), imported when a coordinator starts."""
    from azure.storage import blob

    return blob


class Held:
    """One event's blob while its lease is ours: ``read`` and ``write`` its stage, ``renew`` the lease."""

    def __init__(self, blob: Any, lease: Any) -> None:
        self.blob, self.lease = blob, lease

    def read(self) -> dict[str, Any]:
        data = self.blob.download_blob(lease=self.lease).readall()
        try:
            state = json.loads(data or b"{}")
        except ValueError:
            return {}
        return state if isinstance(state, dict) else {}

    def write(self, state: dict[str, Any]) -> None:
        try:
            self.blob.upload_blob(json.dumps(state).encode(), overwrite=True, lease=self.lease)
        except HttpResponseError as error:
            if error.status_code in (409, 412):
                raise LeaseLost(str(error).splitlines()[0]) from error
            raise

    def renew(self) -> None:
        try:
            self.lease.renew()
        except HttpResponseError as error:
            if error.status_code in (409, 412):
                raise LeaseLost(str(error).splitlines()[0]) from error
            raise


class BlobLeases:
    """One blob per event in ``container``; ``hold(event_id)`` yields it while its lease is ours, or None."""

    def __init__(self, container_client: Any, lease_s: int) -> None:
        self.container, self.lease_s = container_client, lease_s

    @classmethod
    def from_settings(
        cls, connection_string: str, blob_url: str, container: str, credential: Any, lease_s: int
    ) -> BlobLeases:
        blob = _blob_sdk()
        if connection_string:
            client = blob.ContainerClient.from_connection_string(connection_string, container)
        else:
            client = blob.ContainerClient(blob_url, container, credential=credential)
        leases = cls(client, lease_s)
        with suppress(ResourceExistsError):
            client.create_container()
        return leases

    @contextmanager
    def hold(self, event_id: str) -> Iterator[Held | None]:
        blob = self.container.get_blob_client("events/" + event_id)
        with suppress(ResourceExistsError):
            blob.upload_blob(b"{}", overwrite=False)
        try:
            lease = blob.acquire_lease(lease_duration=self.lease_s)
        except HttpResponseError as error:
            if error.status_code == 409:  # leased: another coordinator is deciding about this event
                yield None
                return
            raise
        try:
            yield Held(blob, lease)
        finally:
            with suppress(AzureError):  # lost meanwhile: it expires by itself
                lease.release()

    def close(self) -> None:
        self.container.close()
