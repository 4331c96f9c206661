"""Authentication and authorisation for the local broker: SASL/SCRAM-SHA-512 users created at format
time, Kafka's StandardAuthorizer, and the ACLs each xidpipe principal gets.

The broker listener speaks SASL_PLAINTEXT with SCRAM-SHA-512 (or SASL_SSL with a throwaway CA when
`tls` is on); the controller listener, which only the broker itself uses, speaks SASL_PLAINTEXT with
PLAIN and a password only the broker's own configuration holds. The `admin` user is a super user:
the readiness probe and the ACL set-up use it. Everyone else gets exactly the grants of
`pipeline_grants`; a principal with no ACL on a resource is refused (`allow.everyone.if.no.acl.found`
stays false).
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.topics import topology
from xidpipe.localinfra.process import LocalInfraError

MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN_USER = "admin"
CONTROLLER_USER = "controller"


@dataclass(frozen=True, slots=True)
class Grant:
    """One ALLOW ACL: `principal` (a SCRAM user name) may do `operation` on the resource."""

    principal: str
    operation: str  # READ, WRITE, CREATE, DESCRIBE, ...
    resource: str  # TOPIC, GROUP, CLUSTER
    name: str
    pattern: str = "LITERAL"  # or PREFIXED


def pipeline_grants(
    *,
    topic_prefix: str = "",
    agent: str = "agent",
    worker: str = "worker",
    worker_group: str = "xidpipe-worker",
    responder: str = "responder",
    responder_group: str = "xidpipe-responder",
) -> list[Grant]:
    """The least each xidpipe client needs.

    agent: write the four node topics (nothing else: not read them, not the actions topic, not the kube topic).
    worker: read the node topics, write their dead-letter twins, the incidents and actions topics (and
    theirs), create the pipeline's topics, use its consumer group and Faust's own `<app id>-` topics.
    responder: read the actions topic in its group, write the completed topic and the actions dead letters,
    and write the kube topic (the cluster's view of each node: only it may speak for the cluster).
    """
    topo = topology(topic_prefix, 1)
    grants = [Grant(agent, "WRITE", "TOPIC", t.name) for t in topo.agent_inputs]
    grants += [Grant(worker, "READ", "TOPIC", t.name) for t in topo.inputs]
    grants += [Grant(worker, "WRITE", "TOPIC", t.dead_letter) for t in topo.inputs]
    grants += [Grant(worker, "WRITE", "TOPIC", n) for t in topo.outputs for n in t.names]
    grants += [Grant(worker, op, "TOPIC", f"{topic_prefix}xidpipe.", "PREFIXED") for op in ("CREATE", "DESCRIBE")]
    grants += [Grant(worker, op, "TOPIC", f"{worker_group}-", "PREFIXED")
               for op in ("READ", "WRITE", "CREATE", "DESCRIBE")]
    grants += [Grant(worker, "READ", "GROUP", worker_group)]
    grants += [Grant(responder, "READ", "TOPIC", topo.actions.name),
               Grant(responder, "WRITE", "TOPIC", topo.actions.dead_letter),
               Grant(responder, "WRITE", "TOPIC", topo.completed.name),
               Grant(responder, "WRITE", "TOPIC", topo.kube.name),
               Grant(responder, "READ", "GROUP", responder_group)]
    return grants


def scram_arguments(users: Mapping[str, str]) -> list[str]:
    """`kafka-storage format` arguments that create the SCRAM users in the metadata log."""
    out: list[str] = []
    for name, password in users.items():
        if not name.isidentifier() or '"' in password or "]" in password or "," in password:
            raise LocalInfraError(f"SCRAM user {name!r}: use a plain name and a password without quotes, ']' or ','")
        out += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
    return out


def jaas(module: str, username: str, password: str, **users: str) -> str:
    extra = "".join(f' user_{name}="{pw}"' for name, pw in users.items())
    return f'org.apache.kafka.common.security.{module} required username="{username}" password="{password}"{extra};'


def secured_properties(*, port: int, controller_port: int, host: str, admin_password: str,
                       controller_password: str, tls: TlsFiles | None) -> dict[str, str]:
    """server.properties entries of a SASL broker with the StandardAuthorizer."""
    protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    props = {
        "listeners": f"BROKER://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"BROKER://{host}:{port}",
        "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,BROKER:{protocol}",
        "inter.broker.listener.name": "BROKER",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.broker.scram-sha-512.sasl.jaas.config": jaas(
            "scram.ScramLoginModule", ADMIN_USER, admin_password),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": jaas(
            "plain.PlainLoginModule", CONTROLLER_USER, controller_password, **{CONTROLLER_USER: controller_password}),
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{ADMIN_USER};User:{CONTROLLER_USER}",
        "allow.everyone.if.no.acl.found": "false",
    }
    if tls:
        props |= {
            "listener.name.broker.ssl.keystore.type": "PEM",
            "listener.name.broker.ssl.keystore.location": str(tls.broker_pem),
            "listener.name.broker.ssl.truststore.type": "PEM",
            "listener.name.broker.ssl.truststore.location": str(tls.ca_file),
        }
    return props


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca_file: Path  # the throwaway CA, what clients trust (ssl_cafile)
    broker_pem: Path  # the broker's key and certificate chain, one PEM file


def make_tls(directory: Path, host: str) -> TlsFiles:
    """A throwaway CA and a broker certificate for `host` (openssl), for SASL_SSL."""
    directory.mkdir(parents=True, exist_ok=True)
    san = f"subjectAltName=IP:{host},DNS:localhost" if host.replace(".", "").isdigit() else f"subjectAltName=DNS:{host}"

    def openssl(*args: str) -> None:
        done = subprocess.run(["openssl", *args], cwd=directory, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LocalInfraError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=xidpipe-local-kafka-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", f"/CN={host}", "-addext", san)
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-copy_extensions", "copy")
    # The broker reads an unencrypted PKCS#8 key followed by its certificate.
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8")
    pem = directory / "broker.pem"
    pem.write_text((directory / "broker.pk8").read_text() + (directory / "broker.crt").read_text())
    pem.chmod(0o600)
    return TlsFiles(ca_file=directory / "ca.crt", broker_pem=pem)


def new_password() -> str:
    return secrets.token_urlsafe(24)


def client_options(username: str, password: str, ca_file: Path | None) -> dict[str, Any]:
    """kafka-python options for a SCRAM user of the local broker."""
    options: dict[str, Any] = {
        "security_protocol": "SASL_SSL" if ca_file else "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": username,
        "sasl_plain_password": password,
    }
    if ca_file:
        options["ssl_cafile"] = str(ca_file)
    return options


def create_acls(admin: Any, grants: Iterable[Grant]) -> int:
    """Create the grants' ACLs with a kafka-python admin client of a super user; returns how many."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    acls = [
        ACL(f"User:{g.principal}", "*", ACLOperation[g.operation], ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType[g.resource], g.name, ACLResourcePatternType[g.pattern]))
        for g in grants
    ]
    result = admin.create_acls(acls)
    failed = result.get("failed") or []
    if failed:
        raise LocalInfraError(f"the broker refused {len(failed)} ACLs: {failed[:3]}")
    return len(acls)
