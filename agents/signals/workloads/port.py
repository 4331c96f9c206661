"""What the workloads sensor needs from the API server (`PodSource`), filled by `kube.KubePods`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from models.workloads import OwnerRef


class Expired(Exception):
    """The watch's resourceVersion is too old (HTTP 410 Gone): list again."""


class PodSource(Protocol):
    def list(self) -> tuple[list[dict[str, Any]], str]:
        """The node's pods (API JSON) and the list's resourceVersion."""
        ...

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) after `resource_version`, until the server ends the watch; `Expired` on 410."""
        ...

    def owners_of(self, ref: OwnerRef, namespace: str, plural: str) -> tuple[OwnerRef, ...] | None:
        """The owner references of the object `ref` names; None when it is gone."""
        ...

    def close(self) -> None:
        """End a watch being read, from another thread."""
        ...
