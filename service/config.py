"""The one configuration model of every xidpipe service: names, sources and their order.

Every setting has one name. In the environment it is `XIDPIPE_<KEY>`; in the optional YAML file
(`XIDPIPE_CONFIG=<path>` or `xidpipe --config <path>`) it is `<key>`, lower case, at the top level.
A setting of one service carries the service's prefix (`agent_`, `worker_`, `respond_`, `actions_`,
`sinks_`, `web_`); a setting several services share has none (`database_url`, `bootstrap_servers`,
`topic_prefix`, `partitions`, `replication_factor`, `cluster`, `kube_config`, `kube_context`,
`log_level`, `log_format`, `startup_deadline_s`). The Kafka credentials stay per service, since
the agent, the worker and the responder are different Kafka principals (`agent_sasl_username`,
`worker_sasl_username`, `respond_sasl_username`).

Precedence: command-line flags, then the environment, then the file, then the defaults. A key in
the file that no service knows is an error naming the key; so is a setting under a name that was
removed (`XIDPIPE_RESPOND_DATABASE_URL`): the error names the one that replaced it.

Each deployable has one settings object. Where a deployable's settings come in parts that other
commands use alone (the responder's cordon executor and sinks), the parts are *sections*: fields of
the deployable's class whose type is a settings class of its own (`RespondSettings.actions` is an
`ActionSettings`), read under that class's prefix (`XIDPIPE_ACTIONS_*`), never under the
deployable's. `settings_fields` and `sections` tell them apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, Field
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

ENV_PREFIX = "XIDPIPE_"
CONFIG_ENV = "XIDPIPE_CONFIG"
SERVICE_PREFIXES = ("agent", "worker", "respond", "actions", "sinks", "web", "kafka_admin")
DEFAULT_STARTUP_DEADLINE_S = 300.0
Source = Literal["default", "file", "env", "flag"]

# The settings several services share, by key: their meaning is the same wherever they are read.
SHARED_KEYS = (
    "database_url", "bootstrap_servers", "topic_prefix", "partitions", "replication_factor", "cluster",
    "kube_config", "kube_context", "log_level", "log_format", "startup_deadline_s",
)

_SECURITY = ("security_protocol", "sasl_mechanism", "sasl_username", "sasl_password", "ssl_cafile",
             "ssl_certfile", "ssl_keyfile")


def _renamed() -> dict[str, str]:
    """Every removed environment name and the one that replaced it."""
    old: dict[str, str] = {}
    for key in ("database_url", "bootstrap_servers", "topic_prefix", "cluster", "partitions", "replication_factor"):
        old[f"XIDPIPE_RESPOND_{key.upper()}"] = f"XIDPIPE_{key.upper()}"
    old["XIDPIPE_ACTIONS_DATABASE_URL"] = old["XIDPIPE_SINKS_DATABASE_URL"] = "XIDPIPE_DATABASE_URL"
    old["XIDPIPE_AGENT_BOOTSTRAP_SERVERS"] = "XIDPIPE_BOOTSTRAP_SERVERS"
    old["XIDPIPE_AGENT_LOG_LEVEL"] = "XIDPIPE_LOG_LEVEL"
    old["XIDPIPE_ACTIONS_CLUSTER"] = "XIDPIPE_KUBE_CONFIG (in-cluster, a kubeconfig path, or none)"
    old["XIDPIPE_ACTIONS_KUBECONFIG"] = "XIDPIPE_KUBE_CONFIG (a kubeconfig path)"
    old["XIDPIPE_ACTIONS_CONTEXT"] = "XIDPIPE_KUBE_CONTEXT"
    old["XIDPIPE_API_TOKENS_FILE"] = "XIDPIPE_WEB_TOKENS_FILE"
    for key in _SECURITY:  # the stream worker's Kafka principal, once unprefixed
        old[f"XIDPIPE_{key.upper()}"] = f"XIDPIPE_WORKER_{key.upper()}"
    # (`XIDPIPE_WEB_PORT`, the worker's once, is `xidpipe serve`'s port now: `XIDPIPE_WEB_<NAME>`.)
    for key in ("app_id", "datadir", "batch_max", "batch_within_s", "store_process", "parser_idle_flush_s",
                "sweep_interval_s", "outbox_resend_after_s", "db_retry_max_s", "session_timeout_s",
                "heartbeat_interval_s", "commit_interval_s", "fetch_max_wait_ms", "web_enabled",
                "verify_node_identity", "node_identity_audience", "node_identity_account",
                "node_identity_kubeconfig", "node_identity_cache_size", "node_identity_refused_ttl_s"):
        old[f"XIDPIPE_{key.upper()}"] = f"XIDPIPE_WORKER_{key.upper()}"
    return old


RENAMED: dict[str, str] = _renamed()
RENAMED_NESTED: dict[str, str] = {"XIDPIPE_POLICY__": "XIDPIPE_WORKER_POLICY__"}


class ConfigError(ValueError):
    """A configuration that cannot be used: the message is one line and names the setting."""


_config_file: Path | None = None


def use_config_file(path: Path | None) -> None:
    """The config file given on the command line (`--config`), over `$XIDPIPE_CONFIG`; None: the variable's."""
    global _config_file
    _config_file = path


def config_file() -> Path | None:
    if _config_file is not None:
        return _config_file
    value = os.environ.get(CONFIG_ENV, "").strip()
    return Path(value) if value else None


def check_renamed(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a removed setting that is still set (to a value), naming its replacement."""
    env = os.environ if environ is None else environ
    for name in sorted(n for n, v in env.items() if v.strip()):
        upper = name.upper()
        if upper in RENAMED:
            raise ConfigError(f"{name} was removed: set {RENAMED[upper]} instead")
        for old, new in RENAMED_NESTED.items():
            if upper.startswith(old):
                raise ConfigError(f"{name} was removed: set {new}{upper[len(old):]} instead")


def shared(key: str, default: Any = ..., **kw: Any) -> Any:
    """A field read under its shared name `XIDPIPE_<KEY>`, whatever the class's prefix."""
    assert key in SHARED_KEYS, key
    return Field(default, validation_alias=f"{ENV_PREFIX}{key.upper()}", **kw)


def _alias_key(info: FieldInfo) -> str | None:
    alias = info.validation_alias
    first = alias.choices[0] if isinstance(alias, AliasChoices) else alias
    if isinstance(first, str) and first.upper().startswith(ENV_PREFIX):
        return first[len(ENV_PREFIX):].lower()
    return None


def sections(cls: type[BaseSettings]) -> dict[str, type[XidpipeSettings]]:
    """The fields of `cls` that are settings classes of their own, each read under its own prefix."""
    out: dict[str, type[XidpipeSettings]] = {}
    for name, info in cls.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, XidpipeSettings):
            out[name] = kind
    return out


def settings_fields(cls: type[BaseSettings]) -> list[str]:
    """The fields of `cls` that are settings of its own (its sections left out)."""
    own = sections(cls)
    return [name for name in cls.model_fields if name not in own]


def setting_key(cls: type[BaseSettings], name: str) -> str:
    """The key of field `name` of `cls` in the file (its environment name is `XIDPIPE_` + KEY)."""
    key = _alias_key(cls.model_fields[name])
    if key is not None:
        return key
    prefix = str(cls.model_config.get("env_prefix", ""))
    return (prefix[len(ENV_PREFIX):] + name).lower()


def env_name(cls: type[BaseSettings], name: str) -> str:
    return ENV_PREFIX + setting_key(cls, name).upper()


def keys_of(cls: type[BaseSettings]) -> dict[str, str]:
    """Key in the file → field name, for every setting of `cls` (its sections have their own keys)."""
    return {setting_key(cls, name): name for name in settings_fields(cls)}


def _foreign(key: str, cls: type[BaseSettings]) -> bool:
    """A key of another service's prefix: that service checks it."""
    own = str(cls.model_config.get("env_prefix", ""))[len(ENV_PREFIX):].rstrip("_").lower()
    return any(key.startswith(f"{p}_") for p in SERVICE_PREFIXES if p != own)


class XidpipeYamlSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML source over the file's flat keys: picks this class's keys (translated
    to field names) and refuses a key no service knows."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        self._cls = settings_cls
        super().__init__(settings_cls, yaml_file=path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            data = super()._read_file(file_path)
        except OSError as exc:
            raise ConfigError(f"cannot read the config file {file_path}: {exc.strerror or exc}") from None
        except Exception as exc:  # yaml.YAMLError: the first line says where
            raise ConfigError(f"{file_path}: not YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{file_path}: a config file is a mapping of setting keys to values")
        known = keys_of(self._cls)
        out: dict[str, Any] = {}
        for key, value in data.items():
            k = str(key).lower()
            if k in known:
                out[known[k]] = value
            elif k not in SHARED_KEYS and not _foreign(k, self._cls):
                raise ConfigError(f"{file_path}: unknown setting {key!r} (docs/configuration.md lists them)")
        return out


class XidpipeSettings(BaseSettings):
    """The base of every service's settings: flags (init arguments), then the environment, then the
    config file, then the defaults."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore",
                                      env_ignore_empty=True, validate_by_name=True, validate_by_alias=True)
    # The service this class configures, for `xidpipe config show` and the documentation.
    service: ClassVar[str] = ""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        check_renamed()
        own = sections(settings_cls)
        if own:  # a section is read by its own class, under its own prefix
            env_settings = _Without(settings_cls, env_settings, set(own))
        path = config_file()
        if path is None:
            return init_settings, env_settings
        if not path.is_file():
            raise ConfigError(f"no config file at {path} (--config or {CONFIG_ENV})")
        return init_settings, env_settings, XidpipeYamlSource(settings_cls, path)


class _Without(PydanticBaseSettingsSource):
    """A source with some fields left out (a deployable's sections: each is read by its own class)."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource, left_out: set[str]):
        super().__init__(settings_cls)
        self._source = source
        self._left_out = left_out

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self._source().items() if k not in self._left_out}


def file_values(path: Path | None) -> dict[str, Any]:
    """The config file's keys (lower case) and values, for telling where a setting came from."""
    if path is None:
        return {}
    import yaml

    try:
        with path.open(encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    return {str(k).lower(): v for k, v in data.items()} if isinstance(data, dict) else {}


def source_of(cls: type[BaseSettings], name: str, flags: Mapping[str, Any], file: Mapping[str, Any],
              environ: Mapping[str, str] | None = None) -> Source:
    """Where the value of field `name` came from, by the precedence of `XidpipeSettings`."""
    if name in flags:
        return "flag"
    env = {k.upper() for k in (os.environ if environ is None else environ)}
    info = cls.model_fields[name]
    names = {env_name(cls, name)}
    if isinstance(info.validation_alias, AliasChoices):
        names |= {c.upper() for c in info.validation_alias.choices if isinstance(c, str) and c.isupper()}
    if any(n in env or any(e.startswith(n + "__") for e in env) for n in names):
        return "env"
    return "file" if setting_key(cls, name) in file else "default"


class ServiceSettings(XidpipeSettings):
    """What every long-running service reads: its logging and how long it waits for its dependencies."""

    log_level: str = shared("log_level", "info", description="debug, info, warning, error or critical")
    log_format: Literal["auto", "json", "text"] = shared(
        "log_format", "auto", description="json: one JSON object per line; text: readable lines; auto: text on a "
        "terminal, JSON otherwise (a container's log)")
    startup_deadline_s: float = shared(
        "startup_deadline_s", DEFAULT_STARTUP_DEADLINE_S, ge=0,
        description="how long a service retries an unreachable Kafka, database or API server at start before it "
        "exits with status 3 (0: retry for ever); long enough for the other pods of a fresh install to start")
