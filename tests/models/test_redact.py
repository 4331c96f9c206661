"""Secrets never survive redaction; ordinary diagnostic text does."""

from __future__ import annotations

import json
import string
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.dossier import EvidenceItem, evidence_files, render_json, render_markdown
from models.redact import REDACTED, redact, redact_argv, redact_environment
from tests.models.test_dossier import sample

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


FORMS = [
    ('password="two words"', "two words", 'password="[REDACTED]"'),
    ("db_password: 'two words here'", "words here", "db_password: '[REDACTED]'"),
    ("redis://:pw-1234@cache:6379/0", "pw-1234", "redis://:[REDACTED]@cache:6379/0"),
    ("curl -u admin:pw-1234 https://bmc.local", "pw-1234", "curl -u admin:[REDACTED] https://bmc.local"),
    ("curl --user=admin:pw-1234 x", "pw-1234", "curl --user=admin:[REDACTED] x"),
    ("DB_PASS=pw-1234 ./run", "pw-1234", "DB_PASS=[REDACTED] ./run"),
    ("PASS: pw-1234", "pw-1234", "PASS: [REDACTED]"),
    ("serve --pass pw-1234 --port 80", "pw-1234", "serve --pass [REDACTED] --port 80"),
    ("serve --token 'tok 1234'", "tok 1234", "serve --token '[REDACTED]'"),
    ("mysql -h db -ppw-1234 app", "pw-1234", "mysql -h db -p[REDACTED] app"),
    ("/usr/bin/mysqldump -uroot -ppw-1234 app", "pw-1234", "/usr/bin/mysqldump -uroot -p[REDACTED] app"),
]


@pytest.mark.parametrize(("text", "secret", "expected"), FORMS, ids=[f for f, _, _ in FORMS])
def test_every_secret_form_is_removed_and_its_key_kept(text: str, secret: str, expected: str) -> None:
    out = redact(text)
    assert secret not in out
    assert out == expected


@pytest.mark.parametrize(
    "text",
    ["bypass=1 passes=3 compass: north", "mkdir -p /var/log/x", "python -u train.py", "ssh -p 22 host",
     "mysql -p app", "https://example.com:8443/path@v1"],
)
def test_lookalikes_are_kept(text: str) -> None:
    assert redact(text) == text


ARGV = [
    (["curl", "-u", "admin:pw-1234", "https://bmc"], ["curl", "-u", f"admin:{REDACTED}", "https://bmc"]),
    (["/usr/bin/mysql", "-ppw-1234", "app"], ["/usr/bin/mysql", f"-p{REDACTED}", "app"]),
    (["serve", "--pass", "pw-1234", "--port", "80"], ["serve", "--pass", REDACTED, "--port", "80"]),
    (["env", "DB_PASS=pw-1234", "run"], ["env", f"DB_PASS={REDACTED}", "run"]),
    (["redis-cli", "-u", "redis://:pw-1234@cache"], ["redis-cli", "-u", f"redis://:{REDACTED}@cache"]),
]


@pytest.mark.parametrize(("argv", "expected"), ARGV, ids=[" ".join(a) for a, _ in ARGV])
def test_argv_secret_forms(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


SECRET_VALUE = st.text(alphabet=string.ascii_letters + string.digits + "!#$%()*+-./<>?@[]^_{|}~", min_size=6,
                       max_size=40).filter(lambda s: not s.startswith("-"))
PHRASE = st.lists(SECRET_VALUE, min_size=1, max_size=4).map(" ".join)
KEY = st.sampled_from(["password", "DB_PASS", "PASS", "api_key", "GITHUB_TOKEN", "client-secret", "passphrase",
                       "x-auth-token", "pwd"])


@given(key=KEY, sep=st.sampled_from(["=", ": ", " = ", ":"]), quote=st.sampled_from(['"', "'"]), value=PHRASE,
       before=st.sampled_from(["", "cmd ", "{", "env: "]), after=st.sampled_from(["", " next", ",", "}"]))
def test_property_quoted_values_vanish_whole(key: str, sep: str, quote: str, value: str, before: str,
                                             after: str) -> None:
    out = redact(f"{before}{key}{sep}{quote}{value.replace(quote, '')}{quote}{after}")
    for word in value.replace(quote, "").split():
        assert word not in out.replace(REDACTED, "") or word in f"{before}{key}{after}"


@given(key=KEY, value=SECRET_VALUE)
def test_property_pairs_and_flags_vanish(key: str, value: str) -> None:
    for text in (f"{key}={value}", f"--{key} {value}", f"--{key}={value}"):
        out = redact(text)
        assert value not in out.replace(REDACTED, "").replace(key, ""), text


@given(scheme=st.sampled_from(["redis", "postgresql", "https", "amqp", "mongodb+srv"]),
       user=st.sampled_from(["", "admin", "u.s-er"]),
       value=SECRET_VALUE.filter(lambda s: "@" not in s and "/" not in s))
def test_property_url_credentials_vanish(scheme: str, user: str, value: str) -> None:
    out = redact(f"connect {scheme}://{user}:{value}@host.example:1234/db")
    assert value not in out
    assert f"{scheme}://{user}:{REDACTED}@host.example:1234/db" in out


@given(user=st.from_regex(r"[a-z]{1,8}", fullmatch=True), value=SECRET_VALUE.filter(lambda s: ":" not in s),
       command=st.sampled_from(["curl -u", "curl --user", "mysql -u{user} -p", "mariadb -p"]))
def test_property_command_line_passwords_vanish(user: str, value: str, command: str) -> None:
    if command.endswith("-p"):
        text = f"{command.format(user=user)}{value} app"
        argv = text.split(" ")
    else:
        text = f"{command} {user}:{value} https://bmc"
        argv = text.split(" ")
    assert value not in redact(text).replace(REDACTED, "")
    assert value not in " ".join(redact_argv(argv)).replace(REDACTED, "")


@given(st.text(max_size=200))
def test_property_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize("unit", ["a-", "x.", "a:", "--pass ", "-u ", "token=\"", "mysql ", "bearer "])
def test_time_is_linear_in_hostile_text(unit: str) -> None:
    text = unit * (200_000 // len(unit))
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 2.0


def test_captured_command_line_reaches_the_ticket_redacted() -> None:
    argv = ["curl", "-u", "admin:bmc-pw-77", "https://bmc", "--pass", "pw-88", "DB_PASS=pw-99"]
    captured = "\n".join(redact_argv(argv))
    raw = " ".join(argv)
    dossier = sample().model_copy(update={"evidence": [
        EvidenceItem(name="process-cmdline", source="node", content=captured),
        EvidenceItem(name="pod description", source="cluster", content=f"Command: {raw}\nmysql -ppw-00 app"),
    ]})
    files = [v.decode() for v in evidence_files(dossier).values()]
    rendered = [render_markdown(dossier), json.dumps(render_json(dossier)), *files]
    for out in rendered:
        for secret in ("bmc-pw-77", "pw-88", "pw-99", "pw-00"):
            assert secret not in out
