"""Kubernetes adapter of the election's Lease port (`respond.leader.LeasePort`): one named
`coordination.k8s.io/v1` Lease, read, created and replaced with the synchronous `kubernetes`
client (the election calls it from a thread).

Every replace carries the `resourceVersion` that was read, so the API server refuses it (409) when
another candidate wrote in between; a create of a Lease that another candidate created first is a
409 as well. Both are `LeaseConflict`. Other failures are `respond.errors` (429, 5xx, unreachable:
`TemporaryError`; the rest `PermanentError`, e.g. 403 when RBAC grants no lease rights).

Times are written as `MicroTime` (RFC 3339 with microseconds), as the API server expects (`micro_time`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.leader_election import LeaseRecord
from respond.cordon.kube_nodes import action_error
from respond.leader import LeaseConflict, LeaseRead

LABELS = {"app.kubernetes.io/name": "xidpipe", "app.kubernetes.io/component": "respond"}


def micro_time(at: datetime | None) -> datetime | None:
    """`at` as the client will write it: the client converts the body to its models and writes times
    with `isoformat()`, which leaves out a zero fraction that `MicroTime` requires, so a time on a
    whole second is moved by one microsecond."""
    if at is None:
        return None
    at = at.astimezone(UTC)
    return at if at.microsecond else at.replace(microsecond=1)


def _spec(record: LeaseRecord) -> dict[str, Any]:
    return {"holderIdentity": record.holder or None, "leaseDurationSeconds": record.lease_duration_s,
            "acquireTime": micro_time(record.acquire_time), "renewTime": micro_time(record.renew_time),
            "leaseTransitions": record.transitions}


def _read(lease: client.V1Lease) -> LeaseRead:
    spec = lease.spec or client.V1LeaseSpec()
    record = LeaseRecord(holder=spec.holder_identity or "", lease_duration_s=spec.lease_duration_seconds or 0,
                         acquire_time=spec.acquire_time, renew_time=spec.renew_time,
                         transitions=spec.lease_transitions or 0)
    return LeaseRead(record, str(lease.metadata.resource_version if lease.metadata else ""))


class KubeLease:
    """The Lease `name` in `namespace`."""

    def __init__(self, api_client: client.ApiClient, name: str, namespace: str) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.name = name
        self.namespace = namespace

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(f"Lease {self.namespace}/{self.name} was written by another candidate") from exc
            raise action_error(exc) from exc
        except Exception as exc:
            raise action_error(exc) from exc

    def get(self) -> LeaseRead | None:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise action_error(exc) from exc
        except Exception as exc:
            raise action_error(exc) from exc
        return _read(lease)

    def _body(self, record: LeaseRecord, resource_version: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "labels": dict(LABELS)}
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": _spec(record)}

    def create(self, record: LeaseRecord) -> LeaseRead:
        return _read(self._call(self.api.create_namespaced_lease, self.namespace, self._body(record)))

    def update(self, resource_version: str, record: LeaseRecord) -> LeaseRead:
        """Replace the Lease's record, only if it is still at `resource_version` (else `LeaseConflict`)."""
        body = self._body(record, resource_version)
        return _read(self._call(self.api.replace_namespaced_lease, self.name, self.namespace, body))
