"""Configuration from the environment: Temporal's standard connection configuration plus Stratagem's own.

The connection (address, namespace, API key, TLS, gRPC metadata) comes from Temporal's
environment configuration (`temporalio.envconfig`), as for the `temporal` CLI and every SDK: a
TOML profile file (`TEMPORAL_CONFIG_FILE`, default `~/.config/temporalio/temporal.toml`; profile
`TEMPORAL_PROFILE`, default `default`) overridden by `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`,
`TEMPORAL_API_KEY`, `TEMPORAL_TLS`, `TEMPORAL_TLS_CLIENT_CERT_PATH`, `TEMPORAL_TLS_CLIENT_KEY_PATH`,
`TEMPORAL_TLS_SERVER_CA_CERT_PATH`, `TEMPORAL_TLS_SERVER_NAME`, `TEMPORAL_GRPC_META_*` and the
rest. So Temporal Cloud and mTLS clusters need configuration, not code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratagem.common.errors import ConfigError
from stratagem.common.paths import stratagem_home as stratagem_home  # where it always was, for callers

DEFAULT_ADDRESS = "localhost:7233"
# On a worker: folders under which a run may name its own workspace (RunOptions.workspace).
WORKSPACE_ROOTS_ENV = "STRATAGEM_WORKSPACE_ROOTS"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "stratagem"


@dataclass(frozen=True)
class Settings:
    address: str = DEFAULT_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    workspace: Path = Path("workspace")
    # Encryption at rest (stratagem/io/codec.py): base64 keys, kept out of repr so they never reach
    # a log line. None: payloads are stored as they are.
    encryption_key: str | None = field(default=None, repr=False)
    encryption_old_keys: str | None = field(default=None, repr=False)
    # The connection's credentials, also kept out of repr.
    api_key: str | None = field(default=None, repr=False)
    tls: Any = field(default=False, repr=False)  # bool, or a temporalio.service.TLSConfig holding key material
    rpc_metadata: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def secured(self) -> bool:
        """True when the connection uses TLS or an API key: a remote, real cluster."""
        return bool(self.tls) or bool(self.api_key)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for `Client.connect` beyond the address and namespace."""
        options: dict[str, Any] = {"tls": self.tls}
        if self.api_key:
            options["api_key"] = self.api_key
        if self.rpc_metadata:
            options["rpc_metadata"] = dict(self.rpc_metadata)
        return options

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        connection = temporal_connection(env)
        return cls(
            address=connection.get("target_host") or DEFAULT_ADDRESS,
            namespace=connection.get("namespace") or DEFAULT_NAMESPACE,
            api_key=connection.get("api_key") or None,
            tls=connection.get("tls", False),
            rpc_metadata=dict(connection.get("rpc_metadata") or {}),
            task_queue=env.get("TEMPORAL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
            workspace=Path(env.get("STRATAGEM_WORKSPACE") or "workspace"),
            encryption_key=env.get("STRATAGEM_ENCRYPTION_KEY") or None,
            encryption_old_keys=env.get("STRATAGEM_ENCRYPTION_OLD_KEYS") or None,
        )


def temporal_connection(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Temporal's connection settings from its profile file and TEMPORAL_* variables, as
    `Client.connect` keyword arguments. A missing profile, an unreadable file or certificate is a
    ConfigError of one line; no secret is ever part of the message."""
    from temporalio.envconfig import ClientConfigProfile

    env = os.environ if env is None else env
    try:
        profile = ClientConfigProfile.load(override_env_vars=dict(env))
        return dict(profile.to_client_connect_config())
    except FileNotFoundError as exc:
        raise ConfigError(f"Temporal connection: cannot read {exc.filename or exc}: no such file") from None
    except OSError as exc:
        raise ConfigError(
            f"Temporal connection: cannot read {exc.filename or 'a file'}: {exc.strerror or exc}"
        ) from None
    except Exception as exc:  # the SDK's own config errors: a missing profile, malformed TOML
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"Temporal connection configuration: {first}") from None
