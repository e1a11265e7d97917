"""The HTTP side: OpenAI's routes on Starlette, streaming by server-sent events.

Every request is checked here (size, key, JSON, fields, values) before it is
queued; what only the engine can tell (the prompt's length, an image for a
text-only model) comes back from the engine thread before the first byte of
the answer, so that too is an HTTP error, not a broken stream. Errors carry
OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from racer_core.common.capabilities import check_for
from racer_core.common.errors import InputError
from racer_core.common.events import Engine
from racer_tui.api import responses as responses_api
from racer_tui.api import tools
from racer_tui.api.chat_input import chat_prompt
from racer_tui.api.generate import ChoiceEnd, Delta, Started, chat_work, completion_work
from racer_tui.api.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    Sampling,
    bad_request,
    input_error,
    parse,
    read_json,
    sampling,
)
from racer_tui.api.reply import Tally, chat_logprobs, completion_logprobs, pieces_json
from racer_tui.api.worker import FINISHED, EngineWorker, Job, QueueFull

DEFAULT_MAX_BODY = 8 * 2**20  # room for a few images as data: URLs


@dataclass(frozen=True)
class ServerSettings:
    api_key: str | None = None  # None: no key asked (loopback only; the command enforces it)
    max_body: int = DEFAULT_MAX_BODY
    default_method: str = "racer"
    max_tokens: int | None = None  # for a request that names none (None: up to the context)
    allow_remote: bool = False  # any Host is answered (else only loopback names: request_guard.py)
    allowed_origins: tuple[str, ...] = ()  # web pages that may call the API (request_guard.normal_origin)


Refused = Callable[[str, str, ApiError], None]
"""Told of each request answered with an error: (route, client, the error)."""


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def as_api_error(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, QueueFull):
        return ApiError(429, f"the server is busy: {exc}", kind="rate_limit_error", code="queue_full",
                        headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, InputError):
        return input_error(exc)
    return ApiError(500, f"the server failed on this request ({type(exc).__name__}: {exc})", kind="server_error")


def model_id(name: str) -> str:
    """A display name as a plain model id: 'SmolLM2-135M-Instruct (Q4_1, embedded)' ->
    'smollm2-135m-instruct-q4_1' (lower case, words joined by '-', the provenance note dropped)."""
    words = [w for w in re.split(r"[^a-z0-9._]+", name.lower()) if w and w != "embedded"]
    return "-".join(words) or "model"


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class ApiServer:
    """The routes over one engine and its worker."""

    def __init__(self, engine: Engine, worker: EngineWorker, settings: ServerSettings,
                 refused: Refused | None = None) -> None:
        self.engine = engine
        self.worker = worker
        self.settings = settings
        self.refused = refused
        self.name = engine.info.model  # the display name: an alias of the id
        self.model = model_id(self.name)
        self.created = int(time.time())

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self._guarded(self.models), methods=["GET"]),
            Route("/v1/models/{model:path}", self._guarded(self.model_info), methods=["GET"]),
            Route("/v1/chat/completions", self._guarded(self.chat), methods=["POST"]),
            Route("/v1/completions", self._guarded(self.completions), methods=["POST"]),
            Route("/v1/responses", self._guarded(self.responses), methods=["POST"]),
        ]

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
            return error_response(ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}",
                                           kind=kind))

        return Starlette(routes=routes, exception_handlers={HTTPException: http_error})

    def _guarded(self, handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """The key check, and every failure as OpenAI's error object."""

        async def route(request: Request) -> Response:
            try:
                self._authorize(request)
                return await handler(request)
            except ClientGone:
                return Response(status_code=499)  # nobody reads it
            except Exception as exc:  # noqa: BLE001 - the server keeps serving
                error = as_api_error(exc)
                if self.refused is not None:
                    self.refused(f"{request.method} {request.url.path}", _client(request), error)
                return error_response(error)

        return route

    def _authorize(self, request: Request) -> None:
        key = self.settings.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if not given:
            raise ApiError(401, "no API key given: send the header 'Authorization: Bearer KEY'",
                           kind="invalid_request_error", code="invalid_api_key")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(401, "the API key is not valid", kind="invalid_request_error", code="invalid_api_key")

    # -- routes --------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "queued": self.worker.waiting, "busy": self.worker.running is not None})

    def _model_json(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "racer-tui",
                "name": self.name}

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_json()]})

    async def model_info(self, request: Request) -> Response:
        wanted = request.path_params["model"]
        if wanted not in (self.model, self.name):
            raise ApiError(404, f"the model {wanted!r} does not exist: this server serves {self.model!r}",
                           "model", kind="invalid_request_error", code="model_not_found")
        return JSONResponse(self._model_json())

    async def chat(self, request: Request) -> Response:
        req = parse(ChatRequest, read_json(await self._body(request)))
        syntax = self.engine.tool_syntax  # the template's own tool format, or None: the generic form
        plan = sampling(req, self.settings.default_method, self.settings.max_tokens, syntax)
        prompt = await run_in_threadpool(chat_prompt, req.messages, plan.tools, syntax is not None)  # decodes images
        check_for(self.engine, plan.config, images=prompt.has_images)
        return await self._answer(request, "chat", plan, chat_work(self.engine, prompt, plan, self.worker.step))

    async def completions(self, request: Request) -> Response:
        req = parse(CompletionRequest, read_json(await self._body(request)))
        plan = sampling(req, self.settings.default_method, self.settings.max_tokens)
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if len(prompts) != 1:
            raise bad_request("send one prompt per request", "prompt")
        if not prompts[0]:
            raise bad_request("the prompt is empty", "prompt")
        check_for(self.engine, plan.config)
        work = completion_work(self.engine, prompts[0], plan, self.worker.step)
        return await self._answer(request, "completion", plan, work)

    async def responses(self, request: Request) -> Response:
        """The Responses API's basic text and structured cases, as the chat request they amount to."""
        body = read_json(await self._body(request))
        try:
            req = parse(ChatRequest, responses_api.chat_body(body))
            plan = sampling(req, self.settings.default_method, self.settings.max_tokens)
        except ApiError as exc:
            raise responses_api.refused_param(exc) from None
        prompt = await run_in_threadpool(chat_prompt, req.messages)
        check_for(self.engine, plan.config)
        work = chat_work(self.engine, prompt, plan, self.worker.step)
        return await self._answer(request, "chat", plan, work, lambda chat: responses_api.response(chat, body))

    # -- one request through the engine ------------------------------------------

    async def _body(self, request: Request) -> bytes:
        limit = self.settings.max_body
        too_big = ApiError(413, f"the request body is larger than the server's limit of {limit} bytes (its --max-body)",
                           code="request_too_large")
        given = request.headers.get("content-type", "")
        if given.partition(";")[0].strip().lower() != "application/json":  # a browser's form or text/plain
            what = f"'{given}'" if given else "none"
            raise ApiError(415, "the request body must be JSON sent with 'Content-Type: application/json' "
                                f"(this request's Content-Type: {what})", code="unsupported_media_type")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_big
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_big
        return bytes(body)

    async def _answer(self, request: Request, endpoint: str, plan: Sampling, work: Callable[[Job], None],
                      reshape: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Response:
        """The job's answer, streamed or whole (`reshape`: the whole answer in another API's shape)."""
        prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
        job = Job(f"{prefix}-{uuid.uuid4().hex[:24]}", endpoint, plan.config.method, _client(request), work,
                  asyncio.get_running_loop())
        self.worker.submit(job)
        watch = asyncio.ensure_future(_disconnected(request))
        try:
            first = await _next(job, watch)
            if isinstance(first, BaseException):
                raise first
            assert isinstance(first, Started)
            shape = _Shape(job.id, self.model, endpoint, plan)
            if plan.stream:
                # the reply's start (its first step, or what the engine refused there: a grammar it
                # cannot compile) comes before the headers, so a refusal is a 400, not a broken stream
                opening = await _next(job, watch)
                if isinstance(opening, BaseException):
                    raise opening
                watch.cancel()
                return EventSourceResponse(_stream(job, shape, opening), ping=15,
                                           headers={"Cache-Control": "no-cache"})
            whole = await _collect(job, watch, shape)
            return JSONResponse(whole if reshape is None else reshape(whole))
        finally:
            watch.cancel()


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "?"


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _next(job: Job, watch: asyncio.Future[None]) -> Any:
    """The job's next item; a departed client cancels the job (ClientGone)."""
    get = asyncio.ensure_future(job.items.get())
    await asyncio.wait({get, watch}, return_when=asyncio.FIRST_COMPLETED)
    if get.done():
        return get.result()
    get.cancel()
    job.cancel()
    raise ClientGone


@dataclass
class _Shape:
    """How one answer's JSON looks: chat or text completion."""

    id: str
    model: str
    endpoint: str
    plan: Sampling
    created: int = 0

    def __post_init__(self) -> None:
        self.created = int(time.time())

    def envelope(self, chunk: bool, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chat = self.endpoint == "chat"
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def usage(self, job: Job, tallies: list[Tally]) -> dict[str, Any]:
        total = Tally()
        for tally in tallies:
            total = total.plus(tally)
        return {"prompt_tokens": job.prompt_tokens, "completion_tokens": total.tokens,
                "total_tokens": job.prompt_tokens + total.tokens, "racer": total.to_json(self.plan.config.method)}

    def logprobs(self, pieces: list[Any], offset: int) -> dict[str, Any] | None:
        """The tokens' log-probabilities in this endpoint's shape; `offset`: their text's start in the reply."""
        return chat_logprobs(pieces) if self.endpoint == "chat" else completion_logprobs(pieces, offset)

    def piece(self, index: int, pieces: list[Any], first: bool, offset: int, extra: dict[str, Any]) -> dict[str, Any]:
        """One streamed choice fragment."""
        text = "".join(p.text for p in pieces)
        logprobs = self.logprobs(pieces, offset)
        if self.endpoint == "chat":
            delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
            return {"index": index, "delta": delta, "logprobs": logprobs, **extra}
        return {"index": index, "text": text, "logprobs": logprobs, **extra}


async def _collect(job: Job, watch: asyncio.Future[None], shape: _Shape) -> dict[str, Any]:
    n = shape.plan.n
    pieces: list[list[Any]] = [[] for _ in range(n)]
    ends: dict[int, ChoiceEnd] = {}
    while (item := await _next(job, watch)) is not FINISHED:
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, Delta):
            pieces[item.index].extend(item.pieces)
        elif isinstance(item, ChoiceEnd):
            ends[item.index] = item
    if len(ends) != n:
        raise ApiError(500, "the reply ended early", kind="server_error")
    choices = []
    for i in range(n):
        text = "".join(p.text for p in pieces[i])
        body = {"message": {"role": "assistant", "content": text}} if shape.endpoint == "chat" else {"text": text}
        reason = ends[i].finish_reason
        if shape.plan.tools is not None:
            content, calls = shape.plan.tools.read_reply(text)
            body, reason = {"message": tools.message(content, calls)}, "tool_calls" if calls else reason
        choices.append({"index": i, **body, "logprobs": shape.logprobs(pieces[i], 0), "finish_reason": reason,
                        "racer": {**ends[i].tally.to_json(shape.plan.config.method), "tokens": pieces_json(pieces[i])}})
    return {**shape.envelope(False, choices), "usage": shape.usage(job, [ends[i].tally for i in range(n)])}


async def _items(job: Job, opening: Any) -> AsyncIterator[Any]:
    """The job's items from `opening` (taken already) to FINISHED."""
    item = opening
    while item is not FINISHED:
        yield item
        item = await job.items.get()


async def _stream(job: Job, shape: _Shape, opening: Any) -> AsyncIterator[ServerSentEvent]:
    """OpenAI's chunks, one per engine step and choice, then [DONE]."""
    tallies: list[Tally] = []
    opened: set[int] = set()
    offsets: dict[int, int] = {}  # each choice's text so far, in characters (the completions' text_offset)
    held: dict[int, list[Any]] = {}  # a tool-call reply's tokens per choice, until it ends
    usage = {"usage": None} if shape.plan.include_usage else {}

    def event(choices: list[dict[str, Any]], **extra: Any) -> ServerSentEvent:
        return ServerSentEvent(data=json.dumps({**shape.envelope(True, choices), **extra}))

    try:
        async for item in _items(job, opening):
            if isinstance(item, BaseException):
                yield ServerSentEvent(data=json.dumps(as_api_error(item).body()))
                return
            if isinstance(item, Delta) and shape.plan.tools is not None:
                held.setdefault(item.index, []).extend(item.pieces)  # read back once the reply is whole
            elif isinstance(item, Delta):
                offset = offsets.get(item.index, 0)
                fragment = shape.piece(item.index, item.pieces, item.index not in opened, offset,
                                       {"finish_reason": None, "racer": {"tokens": pieces_json(item.pieces)}})
                offsets[item.index] = offset + sum(len(p.text) for p in item.pieces)
                opened.add(item.index)
                yield event([fragment], **usage)
            elif isinstance(item, ChoiceEnd):
                tallies.append(item.tally)
                reason = item.finish_reason
                if shape.plan.tools is not None:
                    pieces = held.pop(item.index, [])
                    content, calls = shape.plan.tools.read_reply("".join(p.text for p in pieces))
                    reason = "tool_calls" if calls else reason
                    for k, delta in enumerate(tools.deltas(content, calls)):
                        extra = {"logprobs": shape.logprobs(pieces, 0), "racer": {"tokens": pieces_json(pieces)}} if k == 0 else {}
                        yield event([{"index": item.index, "delta": delta, "logprobs": None, "finish_reason": None,
                                      **extra}], **usage)
                    opened.add(item.index)
                fragment = shape.piece(item.index, [], item.index not in opened, 0, {
                    "finish_reason": reason, "racer": item.tally.to_json(shape.plan.config.method)})
                opened.add(item.index)
                yield event([fragment], **usage)
        if shape.plan.include_usage:
            yield event([], usage=shape.usage(job, tallies))
        yield ServerSentEvent(data="[DONE]")
    finally:
        job.cancel()  # the client left (or the answer is complete: then this changes nothing)
