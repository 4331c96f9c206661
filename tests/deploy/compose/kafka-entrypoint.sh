#!/bin/bash
# As apache/kafka renders server.properties: each KAFKA_<NAME> becomes <name> (lower case, _ -> .);
# the storage is formatted once with CLUSTER_ID.
set -euo pipefail
conf=/opt/kafka/config/server.properties
: > "$conf"
while IFS='=' read -r name value; do
    key=$(echo "${name#KAFKA_}" | tr '[:upper:]' '[:lower:]' | tr '_' '.')
    echo "$key=$value" >> "$conf"
done < <(env | grep '^KAFKA_' | sort)
cp=(-cp '/opt/kafka/libs/*')
logs="${KAFKA_LOG_DIRS:-/var/lib/kafka/data}"
if [ ! -e "$logs/meta.properties" ]; then
    java -Xmx256m -XX:+UseSerialGC "${cp[@]}" kafka.tools.StorageTool format --ignore-formatted \
        -t "$CLUSTER_ID" -c "$conf"
fi
exec java -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true "${cp[@]}" kafka.Kafka "$conf"
