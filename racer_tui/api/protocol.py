"""The OpenAI request bodies the server reads, checked before anything is queued.

Field names, types and defaults are OpenAI's (a missing temperature is 1, as
there). Types are checked strictly by pydantic (a "5" is no max_tokens, true is
no n); values by `GenerationConfig`, the rule every other entry point uses, so
temperature 7 or NaN is refused here in the same words as on the command line.
Unknown fields are refused, as OpenAI does, rather than silently ignored.

The racer-tui extension is one object, `racer`: the decoding method and its
drafting settings (any GenerationConfig field OpenAI has no name for).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from racer_core.common.config import FIELDS, ConfigError, GenerationConfig
from racer_core.common.errors import InputError

MAX_CHOICES = 16
"""Most choices (`n`) one request may ask for: each is a whole reply on the one engine."""
MAX_STOPS = 4  # as OpenAI
OPENAI_NAMED = ("max_new_tokens", "temperature", "top_p", "seed")
"""GenerationConfig fields that come from OpenAI's own request fields."""
RACER_FIELDS = tuple(name for name in FIELDS if name not in OPENAI_NAMED)
"""What the `racer` extension object may set: the method and its drafting settings."""
PARAM_NAMES = {"max_new_tokens": "max_tokens"}  # a GenerationConfig field -> the request's name for it


class ApiError(Exception):
    """A request refused or failed: the HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ImageUrl(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: ImageUrl


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[Part]
    name: str | None = None


class StreamOptions(_Strict):
    include_usage: bool = False


class _Sampling(_Strict):
    """What chat and text completions share."""

    model: str | None = None  # one model is served: any name is answered by it
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    user: str | None = None
    racer: dict[str, Any] | None = None


class ChatRequest(_Sampling):
    messages: list[Message]
    max_completion_tokens: int | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    echo: bool = False


@dataclass(frozen=True)
class Sampling:
    """A checked request's decoding: the config of choice 0, the choice count, the stops."""

    config: GenerationConfig
    n: int
    stops: tuple[str, ...]
    stream: bool
    include_usage: bool
    max_tokens_given: bool  # False: the reply may run to the end of the context


def read_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or one clear 400."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise bad_request("the request body is nested too deeply") from None
    if not isinstance(value, dict):
        raise bad_request("the request body must be a JSON object")
    return value


def parse(model: type[_Sampling], data: dict[str, Any]) -> Any:
    """`data` as a request of `model`, or a 400 naming the first wrong field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = [str(part) for part in error["loc"] if not _is_type_tag(part)]
        where = ".".join(loc) or "body"
        if error["type"] == "extra_forbidden":
            raise bad_request(f"unknown field {where!r}", where) from None
        if error["type"] == "missing":
            raise bad_request(f"{where} is required", where) from None
        raise bad_request(f"{where}: {error['msg']}", where) from None


def _is_type_tag(part: Any) -> bool:
    # pydantic names a union's member in the location ('stop', 'str'); the user wrote only 'stop'
    return part in ("str", "list[str]", "text", "image_url", "list[tagged-union[TextPart,ImagePart]]")


def sampling(request: _Sampling, default_method: str, max_tokens: int | None = None) -> Sampling:
    """The request's GenerationConfig (checked by its rules), choices and stops.

    `max_tokens`: what a request that names no limit gets (None: the room
    left in the context, which the engine then enforces)."""
    if not 1 <= request.n <= MAX_CHOICES:
        raise bad_request(f"n must be a whole number from 1 to {MAX_CHOICES}, not {request.n}", "n")
    stops = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    if len(stops) > MAX_STOPS or any(not s for s in stops):
        raise bad_request(f"stop takes at most {MAX_STOPS} sequences, none of them empty", "stop")
    fields: dict[str, Any] = {"method": default_method}
    for name, value in (request.racer or {}).items():
        if name not in RACER_FIELDS:
            raise bad_request(f"racer.{name} is not a racer-tui setting; the extension takes {', '.join(RACER_FIELDS)}",
                              f"racer.{name}")
        fields[name] = value
    limit = request.max_tokens
    if isinstance(request, ChatRequest) and request.max_completion_tokens is not None:
        if limit is not None and limit != request.max_completion_tokens:
            raise bad_request("max_tokens and max_completion_tokens differ; give one of them", "max_tokens")
        limit = request.max_completion_tokens
    given = limit is not None
    if limit is None:
        limit = max_tokens
    if limit is not None:
        fields["max_new_tokens"] = limit
    else:  # the room left in the context decides; the engine caps the reply at it
        fields["max_new_tokens"] = FIELDS["max_new_tokens"].check("max_new_tokens", 2**31 - 1)
    fields["temperature"] = 1.0 if request.temperature is None else request.temperature
    fields["top_p"] = 1.0 if request.top_p is None else request.top_p
    fields["seed"] = request.seed
    try:
        for name, value in fields.items():  # each by its own rule, named as the request names it
            FIELDS[name].check(_param_name(name), value)
        config = GenerationConfig(**fields)
    except ConfigError as exc:
        raise bad_request(str(exc), exc.field) from None
    if request.stream_options is not None and not request.stream:
        raise bad_request("stream_options is only allowed with stream true", "stream_options")
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return Sampling(config, request.n, stops, request.stream, include_usage, given)


def _param_name(field: str) -> str:
    if field in RACER_FIELDS:
        return f"racer.{field}"
    return PARAM_NAMES.get(field, field)


def input_error(exc: InputError) -> ApiError:
    """An engine's refusal of this request (a text-only model given an image, a prompt too long)."""
    return bad_request(str(exc))
