"""Creating the pipeline's topics on the broker (the Kafka admin side of `models.topics`)."""

from __future__ import annotations

from models.topics import Topology


async def ensure_topics(bootstrap: str, topo: Topology, replication_factor: int = 1) -> list[str]:
    """Create the topics (and dead-letter twins) that do not exist yet; returns the names created.

    Existing topics are left as they are; an input topic with another partition count than
    declared is reported, since it breaks co-partitioning.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [(n, t.partitions) for t in topo.all for n in t.names]
        missing = [NewTopic(n, num_partitions=p, replication_factor=replication_factor)
                   for n, p in wanted if n not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except Exception as exc:  # another worker created them concurrently
                if "TopicAlreadyExists" not in type(exc).__name__ and "already exists" not in str(exc):
                    raise
        return [t.name for t in missing]
    finally:
        await admin.close()
