"""A fake kubelet PodResources v1 server on a unix socket, speaking the real gRPC contract through
the stubs generated from agents/signals/podresources/api.proto."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from agents.signals.podresources import api_pb2, api_pb2_grpc


@dataclass
class FakeContainer:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource name -> device ids


@dataclass
class FakePod:
    name: str
    namespace: str
    containers: list[FakeContainer]


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, owner: FakeKubelet) -> None:
        self.owner = owner

    def List(self, request: Any, context: Any) -> Any:
        self.owner.calls["List"] += 1
        if self.owner.fail_with is not None:
            context.abort(self.owner.fail_with, "injected failure")
        with self.owner.lock:
            return api_pb2.ListPodResourcesResponse(pod_resources=[_pod(p) for p in self.owner.pods])

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        self.owner.calls["GetAllocatableResources"] += 1
        with self.owner.lock:
            return api_pb2.AllocatableResourcesResponse(devices=[
                api_pb2.ContainerDevices(resource_name=name, device_ids=ids)
                for name, ids in self.owner.allocatable.items()
            ])

    def Get(self, request: Any, context: Any) -> Any:
        with self.owner.lock:
            for p in self.owner.pods:
                if p.name == request.pod_name and p.namespace == request.pod_namespace:
                    return api_pb2.GetPodResourcesResponse(pod_resources=_pod(p))
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")


def _pod(p: FakePod) -> Any:
    return api_pb2.PodResources(
        name=p.name,
        namespace=p.namespace,
        containers=[
            api_pb2.ContainerResources(
                name=c.name,
                devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in c.devices.items()],
            )
            for c in p.containers
        ],
    )


class FakeKubelet:
    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.lock = threading.Lock()
        self.pods: list[FakePod] = []
        self.allocatable: dict[str, list[str]] = {}
        self.fail_with: grpc.StatusCode | None = None
        self.calls = {"List": 0, "GetAllocatableResources": 0}
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), self._server)
        self._server.add_insecure_port(f"unix://{socket_path}")

    def set_pods(self, pods: list[FakePod]) -> None:
        with self.lock:
            self.pods = list(pods)

    def __enter__(self) -> FakeKubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
