"""Kubernetes adapter of GPU quarantine: the GPU's DRA device, xidpipe's DeviceTaintRules
(resource.k8s.io/v1), and the counts the breaker takes of them; on the synchronous `kubernetes` client
(the executor runs it in a thread).

- The device of a GPU comes from the driver's ResourceSlices (`slice_cache.SliceCache`, a list+watch
  started at the first lookup); its rule is read by name just before the decision.
- One rule per GPU (`models.quarantine.rule_name`): a create that finds the rule (409) reads it; a
  rule of this incident with another effect (a dry run's `None`, or a policy changed) is patched in
  one JSON patch guarded by a `test` of its resourceVersion, never a rule someone else changed.
- A delete carries the rule's resourceVersion as a precondition, so a rule changed since it was read
  is never deleted (409: `Conflict`).
- The breaker's counts (the pool's GPUs and those quarantined) come from the slice cache and xidpipe's
  rules (`rule_cache.RuleCache`), fresh as of the newest quarantine in the action record; when the
  rule cache does not get there within `cache_wait_s` the rules are listed instead.

Failures are translated into `respond.errors` as the node adapter does (`kube_nodes.call_api`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from kubernetes import client

from models.cordon import CordonDecision, CordonRequest
from models.cordon_policy import Quarantine
from models.quarantine import (
    TAINT_KEY,
    GpuView,
    NodeQuarantine,
    RuleView,
    rule_annotations,
    rule_labels,
    rule_name,
    unresolved_reason,
)
from respond.cordon.kube_nodes import call_api
from respond.cordon.port import Conflict
from respond.cordon.retry import Backoff
from respond.errors import PermanentError
from respond.quarantine.rule_cache import SELECTOR, RuleCache, rule_view
from respond.quarantine.slice_cache import SliceCache
from respond.watch_cache import version_of

log = logging.getLogger(__name__)


class KubeDevices:
    def __init__(self, api_client: client.ApiClient, *, backoff: Backoff | None = None, cache_wait_s: float = 5.0,
                 watch: bool = True, write: Callable[..., Any] | None = None) -> None:
        """`write(what, fn, *args, **kwargs)` sends each write (a rule created, patched or deleted): the node
        adapter's `KubeNodes._write` in the responder, so the leader's fence is checked right before each
        one as before every node write; by default the same retries without a fence."""
        self.resource = client.ResourceV1Api(api_client)
        self.backoff = backoff or Backoff()
        self._write = write or self._call
        self.cache_wait_s = cache_wait_s
        self.watch = watch
        self._lock = threading.Lock()
        self._slices: dict[tuple[str, str], SliceCache] = {}
        self._rules: RuleCache | None = None

    def close(self) -> None:
        with self._lock:
            caches: list[Any] = [*self._slices.values(), self._rules]
            self._slices, self._rules = {}, None
        for cache in caches:
            if cache is not None:
                cache.stop()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return call_api(lambda: fn(*args, **kwargs), what, self.backoff)

    def slices(self, q: Quarantine) -> SliceCache:
        with self._lock:
            key = (q.driver, q.uuid_attribute)
            if key not in self._slices:
                self._slices[key] = SliceCache(self.resource, q.driver, q.uuid_attribute).start()
            return self._slices[key]

    def rules(self) -> RuleCache:
        with self._lock:
            if self._rules is None:
                self._rules = RuleCache(self.resource).start()
            return self._rules

    # --- reads ------------------------------------------------------------------------------------

    def gpu_view(self, node: str, uuid: str, q: Quarantine) -> GpuView:
        """The GPU as a DRA device of its node, with its rule when it has one."""
        if not uuid.upper().startswith("GPU-"):
            return GpuView(uuid=uuid, unresolved=unresolved_reason(node, uuid, q.driver, node_has_slices=False))
        slices = self.slices(q)
        if not slices.synced(self.cache_wait_s):
            return GpuView(uuid=uuid, unresolved=f"the ResourceSlices of driver {q.driver} could not be read "
                           f"within {self.cache_wait_s:.0f} s ({slices.failure or 'no answer'})")
        found, node_gpus = slices.device_of(uuid), slices.node_gpus(node)
        if found is None or found[0] != node:
            why = unresolved_reason(node, uuid, q.driver, node_has_slices=node_gpus > 0)
            if found is not None:
                why = f"GPU {uuid} is a device of node {found[0]}'s ResourceSlice, not of node {node}'s"
            return GpuView(uuid=uuid, unresolved=why, node_gpus=node_gpus)
        rules = self.rules()
        held = sum(1 for r in rules.on_node(node) if r.effective) if rules.synced(self.cache_wait_s) else 0
        return GpuView(uuid=uuid, device=found[1], unresolved="", rule=self.read_rule(rule_name(uuid)),
                       node_gpus=node_gpus, node_quarantined=held)

    def read_rule(self, name: str) -> RuleView | None:
        """The rule, read now; one with xidpipe's name that xidpipe did not make reads as changed."""
        try:
            raw = json.loads(self._call(f"read devicetaintrule {name}", self.resource.read_device_taint_rule, name,
                                        _preload_content=False).data)
        except PermanentError as exc:
            if exc.status == 404:
                return None
            raise
        return _view(raw)

    def list_rules(self) -> list[RuleView]:
        """xidpipe's rules, listed now (reconciliation)."""
        raw = json.loads(self._call("list devicetaintrules", self.resource.list_device_taint_rule,
                                    label_selector=SELECTOR, _preload_content=False).data)
        return [v for item in raw.get("items") or [] if (v := rule_view(item)) is not None]

    def pool_gpus(self, members: dict[str, bool], q: Quarantine, fresh_as_of: int) -> tuple[int, int, set[str]]:
        """Of the pool's nodes (name: cordoned by xidpipe): their GPU devices, those xidpipe holds
        quarantined, and the nodes with a GPU quarantined; counting every rule write up to `fresh_as_of`."""
        slices, rules = self.slices(q), self.rules()
        if rules.fresh(fresh_as_of, self.cache_wait_s):
            held = rules.effective_by_node()
        else:
            log.warning("rule cache not fresh as of resourceVersion %s within %.1f s: listing the rules",
                        fresh_as_of, self.cache_wait_s)
            held = self._listed_counts()
        slices.synced(self.cache_wait_s)
        gpus = slices.gpus_by_node()
        nodes = {n for n in members if held.get(n)}
        return sum(gpus.get(n, 0) for n in members), sum(held.get(n, 0) for n in members), nodes

    def _listed_counts(self) -> dict[str, int]:
        """Per node, xidpipe's effective rules, listed now. A cluster that does not serve the rules, or
        does not let xidpipe read them (403, 404), holds none of xidpipe's: zero, with a warning (the
        cordon's counts go on); a transient failure is raised (the decision is retried)."""
        try:
            rules = self.list_rules()
        except PermanentError as exc:
            if exc.status not in (403, 404):
                raise
            log.warning("DeviceTaintRules cannot be read (%s): counting no GPU quarantined", exc)
            return {}
        held: dict[str, int] = {}
        for r in rules:
            if r.effective:
                held[r.node] = held.get(r.node, 0) + 1
        return held

    def node_quarantine(self, node: str, q: Quarantine) -> NodeQuarantine:
        slices, rules = self.slices(q), self.rules()
        slices.synced(self.cache_wait_s)
        rules.synced(self.cache_wait_s)
        return NodeQuarantine(node=node, gpus=slices.node_gpus(node), rules=tuple(rules.on_node(node)))

    # --- writes -----------------------------------------------------------------------------------

    def apply_quarantine(self, req: CordonRequest, decision: CordonDecision,
                         at: datetime) -> tuple[list[str], RuleView]:
        """The GPU's rule as the decision wants it: created, or (a rule of this incident with another
        effect) its effect patched; what changed and the rule."""
        assert decision.device is not None and decision.rule_name and decision.effect
        effect, name = decision.effect, decision.rule_name
        body = {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": rule_labels(req.incident_id),
                         "annotations": rule_annotations(incident_id=req.incident_id, gpu_uuid=decision.gpu,
                                                         node=req.node, device=decision.device, effect=effect,
                                                         reason=decision.reason, at=at)},
            "spec": {"deviceSelector": decision.device.model_dump(),
                     "taint": {"key": TAINT_KEY, "value": str(req.family), "effect": effect}},
        }
        try:
            raw = json.loads(self._write(f"create devicetaintrule {name}", self.resource.create_device_taint_rule,
                                        body, _preload_content=False).data)
            return ["device_taint_rule"], self._observe(raw, own_write=True)
        except PermanentError as exc:
            if exc.status != 409:
                raise
        existing = self.read_rule(name)
        if existing is None:
            raise Conflict(f"rule {name} was deleted while it was written")
        if existing.changed is None and existing.incident_id == req.incident_id and existing.effect != effect:
            return ["device_taint_rule_effect"], self._patch_effect(existing, effect)
        return [], existing

    def _patch_effect(self, rule: RuleView, effect: str) -> RuleView:
        ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": rule.resource_version},
               {"op": "replace", "path": "/spec/taint/effect", "value": effect},
               {"op": "replace", "path": "/metadata/annotations/xidpipe.io~1effect", "value": effect}]
        try:
            raw = json.loads(self._write(f"patch devicetaintrule {rule.name}", self.resource.patch_device_taint_rule,
                                        rule.name, ops, _content_type="application/json-patch+json",
                                        _preload_content=False).data)
        except PermanentError as exc:
            if exc.status in (409, 422):
                raise Conflict(str(exc)) from exc
            raise
        return self._observe(raw, own_write=True)

    def delete_rule(self, rule: RuleView) -> bool:
        """Delete the rule as it was read (its resourceVersion a precondition); False when it was gone.
        `Conflict` when it changed since."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version=rule.resource_version))
        try:
            self._write(f"delete devicetaintrule {rule.name}", self.resource.delete_device_taint_rule, rule.name,
                       body=options)
        except PermanentError as exc:
            if exc.status == 404:
                return False
            if exc.status == 409:
                raise Conflict(str(exc)) from exc
            raise
        if self._rules is not None:
            self._rules.observe(rule.name, version_of(rule.resource_version) + 1, None)
        return True

    def _observe(self, raw: dict[str, Any], *, own_write: bool) -> RuleView:
        view = _view(raw)
        if self._rules is not None:
            self._rules.observe(view.name, version_of(view.resource_version), view, own_write=own_write)
        return view


def _view(raw: dict[str, Any]) -> RuleView:
    """A rule as xidpipe reads it; one xidpipe did not make (no label) reads as changed by someone else."""
    view = rule_view(raw)
    if view is not None:
        return view
    labelled = {**raw, "metadata": {**(raw.get("metadata") or {}), "labels": {"app.kubernetes.io/managed-by":
                                                                               "xidpipe"}, "annotations": {}}}
    foreign = rule_view(labelled)
    assert foreign is not None
    return foreign
