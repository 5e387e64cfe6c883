"""Configuration from the environment: the standard TEMPORAL_* variables plus Stratagem's own."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "stratagem"


@dataclass(frozen=True)
class Settings:
    address: str = DEFAULT_ADDRESS
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    workspace: Path = Path("workspace")
    # Encryption at rest (stratagem/codec.py): base64 keys, kept out of repr so they never reach
    # a log line. None: payloads are stored as they are.
    encryption_key: str | None = field(default=None, repr=False)
    encryption_old_keys: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        return cls(
            address=env.get("TEMPORAL_ADDRESS") or DEFAULT_ADDRESS,
            namespace=env.get("TEMPORAL_NAMESPACE") or DEFAULT_NAMESPACE,
            task_queue=env.get("TEMPORAL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
            workspace=Path(env.get("STRATAGEM_WORKSPACE") or "workspace"),
            encryption_key=env.get("STRATAGEM_ENCRYPTION_KEY") or None,
            encryption_old_keys=env.get("STRATAGEM_ENCRYPTION_OLD_KEYS") or None,
        )
