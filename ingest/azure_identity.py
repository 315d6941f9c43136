"""The identity the central workers ask ARM tokens of (reconcile reads Resource Graph, coordinate acknowledges
scheduled events): one way to build it and one token scope per cloud."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse


def credential_scope(arm_endpoint: str) -> str:
    """The token scope of an ARM endpoint: its origin + ``/.default`` (``https://management.azure.com/.default``)."""
    parsed = urlparse(arm_endpoint)
    return f"{parsed.scheme}://{parsed.netloc}/.default"


def make_credential(kind: str, client_id: str = "") -> Any:
    """``default`` (DefaultAzureCredential: workload identity, managed identity, then developer sign-ins) or
    ``managed_identity`` (ManagedIdentityCredential alone); ``client_id`` picks a user-assigned identity."""
    from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

    if kind == "managed_identity":
        return ManagedIdentityCredential(client_id=client_id or None)
    return DefaultAzureCredential(
        managed_identity_client_id=client_id or None,
        workload_identity_client_id=client_id or None,
        exclude_interactive_browser_credential=True,
    )
