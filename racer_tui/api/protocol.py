"""The OpenAI request bodies the server reads, checked before anything is queued.

Field names, types and defaults are OpenAI's (a missing temperature is 1, as
there). Types are checked strictly by pydantic (a "5" is no max_tokens, true is
no n); values by `GenerationConfig`, the rule every other entry point uses, so
temperature 7 or NaN is refused here in the same words as on the command line.
Every field of OpenAI's chat and completions requests is known: those not
implemented are accepted at their neutral values only (neutral_fields.py), any
other value refused in words that name it. Unknown fields are refused, as
OpenAI does, rather than silently ignored.

Beside OpenAI's fields, `top_k`, `min_p` and `repetition_penalty` (as
llama.cpp's and vLLM's servers take them), `grammar` (llama.cpp's GBNF), and
the racer-tui extension, one object `racer`: the decoding method and its
drafting settings (any GenerationConfig field OpenAI has no name for), and
`racer.grammar`, a regex or grammar the reply must match (structured.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from racer_core.common.capabilities import CapabilityError
from racer_core.common.config import FIELDS, ConfigError, GenerationConfig
from racer_core.common.errors import InputError
from racer_core.common.grammar import Grammar
from racer_tui.api import neutral_fields, structured, tools
from racer_tui.api.tools import ToolPlan

MAX_CHOICES = 16
"""Most choices (`n`) one request may ask for: each is a whole reply on the one engine."""
MAX_STOPS = 4  # as OpenAI
OPENAI_NAMED = ("max_new_tokens", "temperature", "top_p", "seed", "sample_top_k", "min_p", "logprobs",
                "frequency_penalty", "presence_penalty", "repetition_penalty")
"""GenerationConfig fields that come from the request's own fields (OpenAI's, and top_k, min_p)."""
RACER_FIELDS = tuple(name for name in FIELDS if name not in OPENAI_NAMED)
"""What the `racer` extension object may set: the method and its drafting settings."""
PARAM_NAMES = {"max_new_tokens": "max_tokens", "sample_top_k": "top_k"}  # a GenerationConfig field -> the request's name


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
    prompt_cache_breakpoint: Any = None  # accepted and unused: each request is its own conversation


class ImageUrl(_Strict):
    url: str
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: ImageUrl
    prompt_cache_breakpoint: Any = None


class OtherPart(BaseModel):
    """A content part OpenAI has and this server does not read (refused by name in chat_input)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_audio", "file", "refusal"]


Part = Annotated[TextPart | ImagePart | OtherPart, Field(discriminator="type")]


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[Part] | None = None
    name: str | None = None
    # an assistant turn's tool calls, refusal and audio, a tool turn's call id: accepted when empty
    tool_calls: Any = None
    function_call: Any = None
    tool_call_id: Any = None
    refusal: Any = None
    audio: Any = None


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None


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
    top_k: int | None = None  # not OpenAI's: llama.cpp's and vLLM's
    min_p: float | None = None
    racer: dict[str, Any] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None  # not OpenAI's: vLLM's and transformers'
    logit_bias: Any = None  # OpenAI's, taken at its neutral value only (neutral_fields), as those below
    grammar: Any = None  # not OpenAI's: llama.cpp's server's GBNF grammar (structured.gbnf_alias)


class ChatRequest(_Sampling):
    messages: list[Message]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: Any = None
    response_format: Any = None
    store: Any = None
    metadata: Any = None
    service_tier: Any = None
    modalities: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    prompt_cache_key: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None
    safety_identifier: Any = None
    moderation: Any = None


class CompletionRequest(_Sampling):
    prompt: str | list[str]
    echo: Any = None
    suffix: Any = None
    logprobs: int | None = None  # the completions API's: how many alternatives (0 to 5 at OpenAI)
    best_of: int | None = None


@dataclass(frozen=True)
class Sampling:
    """A checked request's decoding: the config of choice 0, the choice count, the stops."""

    config: GenerationConfig
    n: int
    stops: tuple[str, ...]
    stream: bool
    include_usage: bool
    max_tokens_given: bool  # False: the reply may run to the end of the context
    tools: ToolPlan | None = None  # the reply is read back as tool calls (tools.py)


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
    return part in ("str", "list[str]", "text", "image_url", "int", "float", "bool",
                    "list[tagged-union[TextPart,ImagePart,OtherPart]]")


def sampling(request: _Sampling, default_method: str, max_tokens: int | None = None,
             tool_syntax: str | None = None) -> Sampling:
    """The request's GenerationConfig (checked by its rules), choices and stops.

    `max_tokens`: what a request that names no limit gets (None: the room
    left in the context, which the engine then enforces). `tool_syntax`: the
    chat template's own (Engine.tool_syntax; None: the generic form)."""
    chat = isinstance(request, ChatRequest)
    refused = neutral_fields.first_not_neutral(dict(request), neutral_fields.CHAT if chat else neutral_fields.COMPLETION)
    if refused is not None:
        raise bad_request(refused[1], refused[0])
    if not 1 <= request.n <= MAX_CHOICES:
        raise bad_request(f"n must be a whole number from 1 to {MAX_CHOICES}, not {request.n}", "n")
    if isinstance(request, CompletionRequest) and request.best_of not in (None, request.n):
        raise bad_request(f"best_of {request.best_of} is not supported: every choice generated is returned "
                          "(only best_of equal to n)", "best_of")
    if request.stream_options is not None and request.stream_options.include_obfuscation:
        raise bad_request("stream_options.include_obfuscation true is not supported: chunks are not padded "
                          "(only false)", "stream_options.include_obfuscation")
    stops = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    if len(stops) > MAX_STOPS or any(not s for s in stops):
        raise bad_request(f"stop takes at most {MAX_STOPS} sequences, none of them empty", "stop")
    constraint, tool_plan = _constraint(request, tool_syntax)
    fields: dict[str, Any] = {"method": default_method}
    for name, value in (request.racer or {}).items():
        if name == "grammar":
            continue
        if name not in RACER_FIELDS:
            raise bad_request(f"racer.{name} is not a racer-tui setting; the extension takes "
                              f"{', '.join((*RACER_FIELDS, 'grammar'))}",
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
    fields["sample_top_k"] = 0 if request.top_k in (None, -1) else request.top_k  # -1: off, as vLLM
    fields["min_p"] = request.min_p or 0.0
    fields["logprobs"] = _logprobs(request)
    fields["frequency_penalty"] = request.frequency_penalty or 0.0
    fields["presence_penalty"] = request.presence_penalty or 0.0
    fields["repetition_penalty"] = 1.0 if request.repetition_penalty is None else request.repetition_penalty
    try:
        for name, value in fields.items():  # each by its own rule, named as the request names it
            FIELDS[name].check(_param_name(name), value)
        config = GenerationConfig(**fields, grammar=constraint)
    except ConfigError as exc:
        raise bad_request(str(exc), exc.field) from None
    if request.stream_options is not None and not request.stream:
        raise bad_request("stream_options is only allowed with stream true", "stream_options")
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return Sampling(config, request.n, stops, request.stream, include_usage, given, tool_plan)


def _constraint(request: _Sampling, tool_syntax: str | None) -> tuple[Grammar | None, ToolPlan | None]:
    """The reply's one constraint (structured.py) and its tools (tools.py), or a
    400 naming the field in a wrong shape. With tools the constraint is the
    tool-call form's, a response_format the form of a plain answer."""
    try:
        given = {"grammar": structured.gbnf_alias(request.grammar)}
        if request.racer and request.racer.get("grammar") is not None:
            given["racer.grammar"] = structured.racer_grammar(request.racer["grammar"])
        if not isinstance(request, ChatRequest):
            return structured.one_constraint(given), None
        answer = structured.response_format(request.response_format)
        given["response_format"] = answer
        constraint = structured.one_constraint(given)
        schema = None if answer is None else json.loads(answer.text) if answer.text else {"type": "object"}
        plan = tools.plan(request.tools, request.tool_choice, request.parallel_tool_calls, schema, tool_syntax)
        if plan is None:
            return constraint, None
        if constraint is not None and constraint is not answer:
            field = next(name for name, g in given.items() if g is constraint)
            raise structured.FieldError(f"tools and {field} both constrain the reply; give one of them", field)
        return plan.grammar(), plan
    except structured.FieldError as exc:
        raise bad_request(exc.message, exc.param) from None
    except InputError as exc:  # the Grammar's own shape check
        raise bad_request(str(exc)) from None


def _logprobs(request: _Sampling) -> int | None:
    """The alternatives each token's log-probabilities list (None: no log-probabilities)."""
    if isinstance(request, CompletionRequest):
        return request.logprobs
    assert isinstance(request, ChatRequest)
    if request.top_logprobs is not None and not request.logprobs:
        raise bad_request("top_logprobs needs logprobs true", "top_logprobs")
    if not request.logprobs:
        return None
    if request.top_logprobs is None:
        return 0
    try:
        return FIELDS["logprobs"].check("top_logprobs", request.top_logprobs)
    except ConfigError as exc:
        raise bad_request(str(exc), "top_logprobs") from None


def _param_name(field: str) -> str:
    if field in RACER_FIELDS:
        return f"racer.{field}"
    return PARAM_NAMES.get(field, field)


def input_error(exc: InputError) -> ApiError:
    """A refusal of this request (a method that gives no log-probabilities, a text-only
    model given an image, a prompt too long), naming the request's field where known."""
    param = _param_name(exc.param) if isinstance(exc, CapabilityError) else None
    return bad_request(str(exc), param)
