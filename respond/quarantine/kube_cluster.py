"""The node adapter with GPU quarantine: `KubeNodes` (nodes, pods, Events) and `KubeDevices` (the DRA
devices and xidpipe's DeviceTaintRules) behind one object, which implements every port of the
executor and its steps, so the cordon and the quarantine are decided and written by one executor."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from models.cordon import CordonDecision, CordonRequest, FleetView
from models.cordon_policy import CordonPolicy
from models.quarantine import GpuView, NodeQuarantine, RuleView
from respond.cordon.kube_nodes import KubeNodes
from respond.quarantine.kube_devices import KubeDevices


class KubeCluster(KubeNodes):
    def __init__(self, api_client: Any, *, devices: KubeDevices | None = None, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        # The rules' writes go through the node adapter's one write path: the fence, the request timeout.
        self.devices = devices or KubeDevices(api_client, backoff=self.backoff, cache_wait_s=self.cache_wait_s,
                                              write=self._write)

    def close(self) -> None:
        super().close()
        self.devices.close()

    # --- DeviceReader, and the breaker's counts in GPUs -------------------------------------------

    def gpu_view(self, node: str, uuid: str, policy: CordonPolicy) -> GpuView:
        return self.devices.gpu_view(node, uuid, policy.quarantine)

    def pool_gpus(self, fleet: FleetView, members: dict[str, bool], node: str, policy: CordonPolicy,
                  quarantines_as_of: int) -> FleetView:
        gpus, held, nodes = self.devices.pool_gpus(members, policy.quarantine, quarantines_as_of)
        return fleet.model_copy(update={
            "pool_gpus": gpus, "pool_gpus_quarantined": held,
            "pool_nodes_quarantined": sum(1 for n in nodes if not members[n]),
            "node_held": node in nodes or members.get(node, False),
        })

    # --- the quarantine's steps -------------------------------------------------------------------

    def apply_quarantine(self, req: CordonRequest, decision: CordonDecision,
                         at: datetime) -> tuple[list[str], RuleView]:
        return self.devices.apply_quarantine(req, decision, at)

    def node_quarantine(self, node: str, policy: CordonPolicy) -> NodeQuarantine:
        return self.devices.node_quarantine(node, policy.quarantine)

    # --- release and reconciliation ---------------------------------------------------------------

    def read_rule(self, name: str) -> RuleView | None:
        return self.devices.read_rule(name)

    def list_rules(self) -> list[RuleView]:
        return self.devices.list_rules()

    def delete_rule(self, rule: RuleView) -> bool:
        return self.devices.delete_rule(rule)
