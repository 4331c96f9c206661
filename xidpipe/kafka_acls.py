"""The ACLs of `models.kafka_grants` on a Kafka cluster, through kafka-python's admin client as a
principal allowed to manage ACLs (a super user, or one with ALTER and DESCRIBE on the cluster).

`plan` reads the ACLs the pipeline's principals hold and says which grants are missing; `apply`
creates only those, so applying twice changes nothing. ACLs the principals hold beyond the grants
are listed, never removed: someone gave them, and someone should decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from models.kafka_grants import AclPlan, Grant


def _admin(bootstrap: str, options: dict[str, Any]) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="xidpipe-kafka-acls",
                            request_timeout_ms=15_000, bootstrap_timeout_ms=15_000, **options)


def _present(admin: Any, principals: Iterable[str]) -> frozenset[tuple[str, str, str, str, str]]:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    keys = set()
    for principal in sorted(set(principals)):
        found, _ = admin.describe_acls(ACLFilter(
            principal=f"User:{principal}", host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)))
        for acl in found:
            pattern = acl.resource_pattern
            keys.add((acl.principal.removeprefix("User:"), acl.operation.name, pattern.resource_type.name,
                      pattern.resource_name, pattern.pattern_type.name))
    return frozenset(keys)


def _acl(grant: Grant) -> Any:
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    return ACL(f"User:{grant.principal}", "*", ACLOperation[grant.operation], ACLPermissionType.ALLOW,
               ResourcePattern(ResourceType[grant.resource], grant.name, ACLResourcePatternType[grant.pattern]))


def plan(bootstrap: str, options: dict[str, Any], grants: Sequence[Grant]) -> AclPlan:
    """The grants and which of them the cluster already holds."""
    admin = _admin(bootstrap, options)
    try:
        return AclPlan(tuple(grants), _present(admin, (g.principal for g in grants)))
    finally:
        admin.close()


def apply(bootstrap: str, options: dict[str, Any], grants: Sequence[Grant]) -> tuple[AclPlan, list[Grant]]:
    """Create the grants the cluster does not hold; (the plan before, the grants created)."""
    admin = _admin(bootstrap, options)
    try:
        before = AclPlan(tuple(grants), _present(admin, (g.principal for g in grants)))
        todo = before.missing
        if todo:
            result = admin.create_acls([_acl(g) for g in todo])
            failed = result.get("failed") or []
            if failed:
                raise AclError(f"the cluster refused {len(failed)} of {len(todo)} ACLs: {failed[0]!r}")
        return before, todo
    finally:
        admin.close()


class AclError(Exception):
    """The cluster refused to describe or create ACLs (the principal may not manage them)."""
