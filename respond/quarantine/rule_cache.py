"""xidpipe's DeviceTaintRules as a list+watch keeps them (label `app.kubernetes.io/managed-by=xidpipe`),
each as a `models.quarantine.RuleView`, indexed by node: the breaker's GPU counts, the node's
condition, and reconciliation read them here."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from models.quarantine import (
    ANN_DEVICE,
    ANN_EFFECT,
    ANN_GPU,
    ANN_INCIDENT,
    ANN_NODE,
    ANN_QUARANTINED_AT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    DeviceRef,
    RuleView,
)
from respond.watch_cache import WatchCache

SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


def rule_view(raw: dict[str, Any]) -> RuleView | None:
    """A DeviceTaintRule (raw JSON) as xidpipe reads it; None when it is not xidpipe's."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
        return None
    ann = meta.get("annotations") or {}
    selector, taint = spec.get("deviceSelector") or {}, spec.get("taint") or {}
    device = None
    if all(selector.get(k) for k in ("driver", "pool", "device")):
        device = DeviceRef(driver=selector["driver"], pool=selector["pool"], device=selector["device"])
    eviction = next((f"{c.get('status')}: {c.get('reason', '')} {c.get('message', '')}".strip()
                     for c in (raw.get("status") or {}).get("conditions") or []
                     if c.get("type") == "EvictionInProgress"), None)
    return RuleView(
        name=str(meta.get("name")), device=device, effect=str(taint.get("effect") or ""),
        value=str(taint.get("value") or ""), incident_id=ann.get(ANN_INCIDENT, ""), gpu_uuid=ann.get(ANN_GPU, ""),
        node=ann.get(ANN_NODE, "") or (device.pool if device else ""), written_effect=ann.get(ANN_EFFECT, ""),
        written_device=ann.get(ANN_DEVICE, ""), quarantined_at=ann.get(ANN_QUARANTINED_AT, ""),
        resource_version=meta.get("resourceVersion"), eviction=eviction,
        generation=meta.get("generation") if isinstance(meta.get("generation"), int) else None,
    )


class RuleCache(WatchCache[RuleView]):
    """`resource`: the client's `ResourceV1Api`."""

    def __init__(self, resource: Any, **kwargs: Any) -> None:
        def lister(**kw: Any) -> Any:
            return resource.list_device_taint_rule(label_selector=SELECTOR, **kw)

        super().__init__("devicetaintrules[xidpipe]", lister, rule_view, **kwargs)
        self._by_node: dict[str, dict[str, RuleView]] = defaultdict(dict)

    def _changed(self, name: str, old: RuleView | None, new: RuleView | None) -> None:
        if old is not None:
            self._by_node[old.node].pop(name, None)
            if not self._by_node[old.node]:
                del self._by_node[old.node]
        if new is not None:
            self._by_node[new.node][name] = new

    def on_node(self, node: str) -> list[RuleView]:
        with self.lock:
            return list(self._by_node.get(node, {}).values())

    def effective_by_node(self) -> dict[str, int]:
        """Per node, the GPUs xidpipe holds quarantined (rules that keep work off them)."""
        with self.lock:
            return {n: k for n, rules in self._by_node.items() if (k := sum(1 for r in rules.values() if r.effective))}
