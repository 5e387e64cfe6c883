"""Model providers. Model strings look like `provider:name`, e.g. `scripted:script.yaml`,
`openai:gpt-4.1`, `anthropic:claude-sonnet-4-5` or `openai:llama3.1:8b@http://127.0.0.1:11434/v1`."""

from stratagem.models.anthropic_provider import AnthropicModel
from stratagem.models.base import (
    Message,
    Model,
    ModelAuthError,
    ModelCallError,
    ModelRequest,
    ModelRequestError,
    ModelResponse,
    Purpose,
    ToolCall,
    Usage,
    register_provider,
    split_model_string,
)
from stratagem.models.failover import FailoverModel, load_model
from stratagem.models.openai_provider import OpenAIModel
from stratagem.models.scripted import ScriptedModel

register_provider("scripted", ScriptedModel)
register_provider("openai", OpenAIModel)
register_provider("anthropic", AnthropicModel)

__all__ = [
    "AnthropicModel",
    "FailoverModel",
    "Message",
    "Model",
    "ModelAuthError",
    "ModelCallError",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "OpenAIModel",
    "Purpose",
    "ScriptedModel",
    "ToolCall",
    "Usage",
    "load_model",
    "register_provider",
    "split_model_string",
]
