"""How every xidpipe Kafka client authenticates: one settings shape for the agent (kafka-python), the
stream worker (Faust on aiokafka) and the responder (aiokafka).

Each deployable's settings class inherits `KafkaClientSecurity`, so the fields read the same under
each principal's prefix: `XIDPIPE_AGENT_SASL_PASSWORD`, `XIDPIPE_WORKER_SASL_PASSWORD`,
`XIDPIPE_RESPOND_SASL_PASSWORD`.
The password is a `SecretStr`: it is never in a repr, a log line or an error; it leaves the object
only in the options handed to the Kafka client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


class KafkaClientSecurity(BaseModel):
    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT",
        description="SASL_SSL in production (SCRAM over TLS); PLAINTEXT only for a broker on loopback",
    )
    sasl_mechanism: SaslMechanism | None = Field(
        default=None, description="SCRAM-SHA-512 when a SASL protocol is chosen and this is unset"
    )
    sasl_username: str | None = Field(default=None, description="the Kafka principal (User:<name> in ACLs)")
    sasl_password: SecretStr | None = Field(default=None, description="from a Secret; never logged")
    ssl_cafile: Path | None = Field(default=None, description="CA bundle that signed the broker's certificate")
    ssl_certfile: Path | None = Field(default=None, description="client certificate for mutual TLS (SSL protocol)")
    ssl_keyfile: Path | None = Field(default=None, description="its private key")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientSecurity:
        if self.security_protocol.startswith("SASL_"):
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError(f"security_protocol {self.security_protocol} needs sasl_username and sasl_password")
        elif self.sasl_mechanism or self.sasl_username:
            raise ValueError(
                f"sasl_mechanism/sasl_username are set but security_protocol is {self.security_protocol}: "
                "use SASL_SSL (or SASL_PLAINTEXT on a trusted network)"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together (mutual TLS)")
        return self

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def _sasl(self) -> dict[str, Any]:
        if not self.security_protocol.startswith("SASL_"):
            return {}
        assert self.sasl_password is not None
        return {
            "sasl_mechanism": self.sasl_mechanism or "SCRAM-SHA-512",
            "sasl_plain_username": self.sasl_username,
            "sasl_plain_password": self.sasl_password.get_secret_value(),
        }

    def kafka_python_options(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python clients (the agent, the local tools)."""
        out: dict[str, Any] = {"security_protocol": self.security_protocol, **self._sasl()}
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(self, key)
            if value is not None and self.uses_tls:
                out[key] = str(value)
        return out

    def aiokafka_options(self, ssl_context: Any = None) -> dict[str, Any]:
        """Keyword arguments for aiokafka clients; `ssl_context` is built by the caller's adapter from
        `ssl_cafile`/`ssl_certfile`/`ssl_keyfile` (reading files is I/O, not this module's)."""
        out: dict[str, Any] = {"security_protocol": self.security_protocol, **self._sasl()}
        if self.uses_tls:
            out["ssl_context"] = ssl_context
        return out

    def describe(self) -> str:
        """For logs: the protocol, mechanism and principal, never the password."""
        who = f" as {self.sasl_username} ({self.sasl_mechanism or 'SCRAM-SHA-512'})" if self.sasl_username else ""
        return f"{self.security_protocol}{who}"
