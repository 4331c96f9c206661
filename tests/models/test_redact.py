"""Secrets never survive redaction; ordinary diagnostic text does."""

from __future__ import annotations

import pytest

from models.redact import REDACTED, redact, redact_argv, redact_environment

SECRETS = [
    ("password=hunter2hunter2", "hunter2hunter2"),
    ("DB_PASSWORD: s3cr3t-value", "s3cr3t-value"),
    ('{"api_key": "abcd1234efgh5678"}', "abcd1234efgh5678"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVl", "eyJhbGciOiJIUzI1NiJ9"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA=='", "dXNlcjpwYXNzd29yZA=="),
    ("postgresql://xid:pgpass-123@db:5432/xid", "pgpass-123"),
    ("aws_access_key_id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("HF token hf_abcdefghijklmnopqrstuvwxyz0123456789", "hf_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
    ("WANDB_API_KEY=0123456789abcdef", "0123456789abcdef"),
    ("session_id=9f8e7d6c5b4a", "9f8e7d6c5b4a"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS, ids=[s for s, _ in SECRETS])
def test_secret_values_are_removed(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        "GPU 00000000:3B:00.0  Serial Number : 1650922001234  VBIOS Version : 96.00.74.00.01",
        "nvidia-smi -q -i 0000:3b:00.0",
        "Events: Warning  BackOff  kubelet  Back-off restarting failed container",
    ],
)
def test_diagnostic_text_is_kept(text: str) -> None:
    assert redact(text) == text


def test_environment_dump_keeps_names_only() -> None:
    env = "PATH=/usr/bin\nNCCL_DEBUG=INFO\nS3_BUCKET_CREDS=abc123\n"
    out = redact_environment(env)
    assert out == f"PATH={REDACTED}\nNCCL_DEBUG={REDACTED}\nS3_BUCKET_CREDS={REDACTED}\n"


def test_argv_flags() -> None:
    argv = ["python3", "train.py", "--token", "tok-123456", "--lr=0.1", "--api-key=k-987654", "--epochs", "3"]
    assert redact_argv(argv) == ["python3", "train.py", "--token", REDACTED, "--lr=0.1", f"--api-key={REDACTED}",
                                 "--epochs", "3"]
