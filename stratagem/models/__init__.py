"""Model providers. Model strings look like `provider:name`, e.g. `scripted:script.yaml`."""

from .base import (
    Message,
    Model,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    Purpose,
    Usage,
    load_model,
    register_provider,
    split_model_string,
)
from .scripted import ScriptedModel

register_provider("scripted", ScriptedModel)

__all__ = [
    "Message",
    "Model",
    "ModelCallError",
    "ModelRequest",
    "ModelResponse",
    "Purpose",
    "ScriptedModel",
    "Usage",
    "load_model",
    "register_provider",
    "split_model_string",
]
