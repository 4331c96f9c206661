"""Poll the kubelet PodResources API and publish GPU assignments when they change.

The watcher is the PodResources sensor (`agents.signals.podresources`), built from its
`SensorContext`: it publishes, reads the time from `ctx.clock`, and uses no capability."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.signals.base import SensorContext
from agents.signals.podresources.mapping import allocatable, assignments
from models.node_records import PodAssignments

log = logging.getLogger(__name__)


class PodResourcesClient:
    def __init__(self, socket_path: Path, timeout_s: float = 10.0) -> None:
        import grpc

        from agents.signals.podresources import api_pb2, api_pb2_grpc

        self._pb: Any = api_pb2  # generated code, untyped
        stub: Any = api_pb2_grpc.PodResourcesListerStub
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._stub = stub(self._channel)
        self._timeout = timeout_s

    def list(self) -> Any:
        return self._stub.List(self._pb.ListPodResourcesRequest(), timeout=self._timeout)

    def allocatable(self) -> Any:
        return self._stub.GetAllocatableResources(self._pb.AllocatableResourcesRequest(), timeout=self._timeout)

    def close(self) -> None:
        self._channel.close()


@dataclass(frozen=True, slots=True)
class PodResourcesSettings:
    """The PodResources sensor's own settings (`AgentSettings`: `podresources_socket`,
    `podresources_interval_s`, `podresources_timeout_s`, `gpu_resource_prefixes`)."""

    socket_path: Path
    interval_s: float = 10.0
    timeout_s: float = 10.0
    resource_prefixes: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/mig-")


class PodResourcesWatcher:
    def __init__(self, ctx: SensorContext[PodResourcesSettings]) -> None:
        settings = ctx.settings
        self.node = ctx.node
        self._socket = settings.socket_path
        self._publish = ctx.publish
        self._metrics = ctx.metrics
        self._clock = ctx.clock
        self._interval = settings.interval_s
        self._timeout = settings.timeout_s
        self._prefixes = tuple(settings.resource_prefixes)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[Any, ...] | None = None
        self._client: PodResourcesClient | None = None
        self._warned = False

    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="podresources", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout + 1)
        if self._client is not None:
            self._client.close()

    def poll_once(self) -> PodAssignments | None:
        """Read List and GetAllocatableResources; the record to publish when something changed."""
        if self._client is None:
            self._client = PodResourcesClient(self._socket, self._timeout)
        listed = self._client.list()
        try:
            alloc = allocatable(self._client.allocatable().devices, self._prefixes)
        except Exception as exc:  # older kubelets may not serve it
            log.debug("GetAllocatableResources failed", extra={"error": str(exc)})
            alloc = []
        found = assignments(listed.pod_resources, self._prefixes)
        key = (tuple(a.model_dump_json() for a in found), tuple(alloc))
        if key == self._last:
            return None
        self._last = key
        return PodAssignments(
            node=self.node,
            record_id=f"pod-assignments:{self._clock.time_ns()}",
            changed_at=self._clock.now(),
            assignments=tuple(found),
            allocatable=tuple(alloc),
        )

    def _run(self) -> None:
        import grpc

        while not self._stop.is_set():
            try:
                record = self.poll_once()
                if self._warned:
                    log.info("kubelet PodResources reachable again", extra={"socket": str(self._socket)})
                    self._warned = False
                if record is not None:
                    log.info("GPU pod assignments changed", extra={"assignments": len(record.assignments)})
                    self._publish(record)
            except grpc.RpcError as exc:
                self._metrics.inc("xidpipe_agent_podresources_errors_total")
                if not self._warned:
                    log.warning("kubelet PodResources unavailable",
                                extra={"socket": str(self._socket), "code": str(exc.code())})
                    self._warned = True
            except Exception:
                self._metrics.inc("xidpipe_agent_podresources_errors_total")
                log.exception("PodResources poll failed")
            self._stop.wait(self._interval)
