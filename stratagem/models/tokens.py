"""How many tokens a request's input may take, counted before it is sent.

A run's budget holds each model call's output cap to what is left once the call's input is paid
for (`stratagem.models.budgeted`), so the input must be counted before the call goes out. The
count must not fall short: what it misses, the call may spend past the budget. No tokenizer is at
hand for every model a run may name, so this is a bound, not an estimate:

- Text takes at most one token per UTF-8 byte. The tokenizers of the models Stratagem calls are
  byte-level BPE (OpenAI's, Anthropic's, Llama 3's, Qwen's, Mistral's) or SentencePiece with
  byte fallback: every token stands for at least one byte. Measured with OpenAI's cl100k on this
  repository: English and Python take 4.1-4.5 bytes a token, JSON 1.9, Chinese 2.6, emoji 1.5,
  rare CJK characters 1.3. Any fixed ratio above 1 falls short on some text, which a step's
  inputs (earlier outputs, tool results) can be made of; the bound is about 4x high for prose.
- Each message adds its role and the chat template's delimiters: 3-4 tokens in OpenAI's
  format, 5 in Llama 3's; `MESSAGE_TOKENS` covers them and a tool result's call id.
- Tools and a response schema count twice, with the text of their preambles: an endpoint that
  takes neither natively gets them written into the prompt and again in a schema for the answer
  (`stratagem.models.negotiation`). A provider's own hidden prompt comes on top: Anthropic adds
  a tool-use system prompt of 346 tokens (`tool_prompt_tokens` on the provider).

A model that can count exactly says so (`count_input_tokens`; the scripted model does), and its
count is used instead. Otherwise only a step's first call is counted this way. The provider reports the input tokens it charged,
and a conversation only grows, so a later call takes at most what the last one took plus the
bound of the messages added since (`after`): after the first call, the bound is high only by
what the new messages (mostly tool results) overstate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from stratagem.models.base import Message, ModelRequest

MESSAGE_TOKENS = 8  # role and delimiters of one message
CALL_TOKENS = 16  # one tool call in an assistant turn, besides its name and arguments: id, framing
REPLY_TOKENS = 8  # the template's start of the reply
TOOLS_TOKENS = 128  # the preamble that introduces tools (negotiation.PROMPTED_TOOLS is ~330 bytes)
SCHEMA_TOKENS = 32  # "Answer with one JSON value ... It must follow this JSON schema:"


def text_tokens(text: str) -> int:
    """The most tokens `text` can take: its UTF-8 bytes."""
    return len(text.encode("utf-8"))


def message_tokens(message: Message) -> int:
    """The most tokens one message of a conversation can take as input."""
    tokens = MESSAGE_TOKENS + text_tokens(message.content) + text_tokens(message.tool_call_id or "")
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments) if call.arguments is not None else call.raw_arguments
        tokens += CALL_TOKENS + text_tokens(call.id) + text_tokens(call.name) + text_tokens(arguments)
    return tokens


def messages_tokens(messages: Iterable[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


def _json_tokens(value: Any) -> int:
    return text_tokens(json.dumps(value, default=str))


def input_tokens(request: ModelRequest, hidden_tool_tokens: int = 0) -> int:
    """The most input tokens `request` can be charged, sent by any means its provider negotiates.
    `hidden_tool_tokens`: what the provider adds to a request that offers tools or a schema."""
    tokens = REPLY_TOKENS + messages_tokens(request.messages)
    if request.tools:
        specs = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in request.tools]
        tokens += TOOLS_TOKENS + 2 * sum(_json_tokens(spec) for spec in specs)
    if request.response_schema is not None:
        tokens += SCHEMA_TOKENS + 2 * _json_tokens(request.response_schema) + text_tokens(request.schema_name)
    if request.tools or request.response_schema is not None:
        tokens += hidden_tool_tokens
    return tokens


def after(measured_input: int, added: Iterable[Message]) -> int:
    """The most input tokens a call can take whose conversation is that of a call the provider
    charged `measured_input` tokens for, plus the messages `added` since (same tools, same schema)."""
    return measured_input + messages_tokens(added)
