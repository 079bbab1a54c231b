"""OpenAI's wire format, as plain dicts: request checks, responses, stream chunks, errors.

Errors have OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the HTTP
status in `code` (400 bad request, 404 unknown model or path, 405, 500); the official client
raises BadRequestError / NotFoundError / InternalServerError from them. A streamed reply is
Server-Sent Events: one `data: {chunk}\\n\\n` per event and `data: [DONE]\\n\\n` at the end.
"""
from __future__ import annotations

import json
import time
import uuid
from json.encoder import encode_basestring_ascii as _json_str
from typing import Any

_TYPES = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
          413: "invalid_request_error", 500: "internal_server_error", 503: "service_unavailable_error"}
DONE = "data: [DONE]\n\n"


class OpenAIError(Exception):
    """An error answered in OpenAI's shape with an HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": status}}


def is_error(obj: Any) -> bool:
    return isinstance(obj, dict) and "error" in obj and isinstance(obj["error"], dict)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except ValueError as e:
        raise OpenAIError(400, f"malformed JSON in the request body: {e}") from None
    if not isinstance(obj, dict):
        raise OpenAIError(400, f"the request body must be a JSON object, got {type(obj).__name__}")
    return obj


def check_completion(body: dict[str, Any]) -> str:
    """The prompt of a /v1/completions request (one string)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise OpenAIError(400, "prompt must be a string (or a list holding one string)", "prompt")
    _check_common(body)
    return prompt


def check_chat(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of a /v1/chat/completions request, with string contents."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise OpenAIError(400, "messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise OpenAIError(400, f"messages[{i}] must be an object with a role", "messages")
        if m["role"] not in ROLES:
            raise OpenAIError(400, f"messages[{i}].role {m['role']!r} is not one of {sorted(ROLES)}", "messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise OpenAIError(400, f"messages[{i}]: only text content parts are supported", "messages")
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise OpenAIError(400, f"messages[{i}].content must be a string", "messages")
        out.append({"role": m["role"], "content": content})
    _check_common(body)
    return out


# Roles a chat message may have (OpenAI's; "tool" for a tool's answer in a conversation).
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

# Parameters the engines do not implement, each with the values that ask for nothing (the
# defaults clients send); any other value is refused with 400 naming the parameter, as vLLM's
# server refuses what it cannot do, rather than answered as if it had been honoured.
_INERT: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False), "suffix": (None, ""),
    "best_of": (None, 1), "logit_bias": (None, {}), "tools": (None, []), "functions": (None, []),
    "tool_choice": (None, "none"), "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}), "guided_json": (None,), "guided_regex": (None,),
    "guided_choice": (None,), "guided_grammar": (None,), "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0), "repetition_penalty": (None, 1, 1.0), "prompt_logprobs": (None,),
}


def _check_unsupported(body: dict[str, Any]) -> None:
    for name, inert in _INERT.items():
        v = body.get(name)
        # (typed equality: `false` is no 0, `0` no `false`)
        if not any(type(v) is type(x) and v == x for x in inert):
            raise OpenAIError(400, f"{name}={json.dumps(v)[:200]} is not supported by this server "
                                   f"(supported values: {', '.join(json.dumps(x) for x in inert)})", name)


def _check_common(body: dict[str, Any]) -> None:
    _check_unsupported(body)
    if not isinstance(body.get("model"), str):
        raise OpenAIError(400, "model must be a string naming a served model", "model")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise OpenAIError(400, "stream must be true or false", "stream")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise OpenAIError(400, "stream_options must be an object", "stream_options")


def include_usage(body: dict[str, Any]) -> bool:
    so = body.get("stream_options") or {}
    return bool(so.get("include_usage"))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def model_card(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "ember"}


def models_list(cards: list[dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "data": cards}


def completion(rid: str, model: str, created: int, texts: list[str], reasons: list[str | None],
               use: dict[str, int], chat: bool) -> dict[str, Any]:
    """A whole (non-streamed) response."""
    if chat:
        choices = [{"index": i, "message": {"role": "assistant", "content": t}, "logprobs": None,
                    "finish_reason": r} for i, (t, r) in enumerate(zip(texts, reasons, strict=False))]
        return {"id": rid, "object": "chat.completion", "created": created, "model": model,
                "choices": choices, "usage": use}
    choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": r}
               for i, (t, r) in enumerate(zip(texts, reasons, strict=False))]
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": choices, "usage": use}


class ChunkWriter:
    """Formats one streamed response's SSE events (cheaply: the fixed part of every chunk is
    encoded once)."""

    def __init__(self, rid: str, model: str, chat: bool) -> None:
        self.chat = chat
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = ('data: {"id":%s,"object":"%s","created":%d,"model":%s,"choices":['
                      % (json.dumps(rid), obj, int(time.time()), json.dumps(model)))
        self._role_sent: set[int] = set()

    def delta(self, index: int, text: str, finish_reason: str | None) -> str:
        # _json_str(s) is json.dumps(s) for a str (what dumps calls), without its two layers
        fr = "null" if finish_reason is None else _json_str(finish_reason)
        if self.chat:
            role = ""
            if index not in self._role_sent:
                self._role_sent.add(index)
                role = '"role":"assistant",'
            choice = '{"index":%d,"delta":{%s"content":%s},"logprobs":null,"finish_reason":%s}' % (
                index, role, _json_str(text), fr)
        else:
            choice = '{"index":%d,"text":%s,"logprobs":null,"finish_reason":%s}' % (index, _json_str(text), fr)
        return self._head + choice + "]}\n\n"

    def usage(self, use: dict[str, int]) -> str:
        return self._head + '],"usage":' + json.dumps(use) + "}\n\n"
