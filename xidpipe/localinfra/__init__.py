"""Real local services for tests and the demo: Apache Kafka (KRaft, from Maven Central jars) and
PostgreSQL (a throwaway cluster from the Debian server binaries). No Docker.

`LocalKafka` and `LocalPostgres` are context managers that start a service on free loopback ports
and remove every trace of it when they stop. `xidpipe dev kafka|postgres start|stop|status` runs
them in the background; `tests/services.py` turns them into pytest fixtures. See docs/testing.md.
"""

from xidpipe.localinfra.process import LocalInfraError

__all__ = ["LocalInfraError"]
