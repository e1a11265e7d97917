"""Whether a decoding method can do what a request asks: the one check.

Each method declares its capabilities in its MethodSpec
(racer_core/common/registry.py: `penalties`, `logprobs`, `needs_head`, its
optional library); the model declares whether it reads images
(`Engine.reads_images`). Every front end and the engine refuse through
`check_method` (before a load, with what is known then) or `check_for` (with a
loaded engine), so a request is refused in the same one line everywhere:
the command line, the app, the HTTP API (a 400 naming `param`) and the engine.

Pure Python on purpose, as the registry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from racer_core.common import grammar_engine, registry
from racer_core.common.config import GenerationConfig
from racer_core.common.errors import InputError

if TYPE_CHECKING:
    from racer_core.common.events import Engine


class CapabilityError(InputError):
    """A method (or the model) cannot do what was asked; `param` names the
    request's field that asked it (the API's 400 names it)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def penalized(config: GenerationConfig) -> bool:
    """Whether `config` asks for any frequency, presence or repetition penalty."""
    return bool(config.frequency_penalty or config.presence_penalty or config.repetition_penalty != 1.0)


def check_method(method: str, config: GenerationConfig | None = None, *, head: bool | None = None,
                 images: bool = False, reads_images: bool = True, model: str = "this model") -> registry.MethodSpec:
    """The spec of `method`, or a CapabilityError in one line when it cannot run
    here or cannot do what `config` asks: unknown; its optional library missing;
    a draft head needed where `head` is False (None: not known yet); penalties or
    log-probabilities it does not give; `images` for a `model` that does not read them."""
    spec = registry.method(method)
    if spec is None:
        raise CapabilityError(f"unknown decoding method {method!r}", "method")
    problem = spec.missing()
    if problem is not None:
        raise CapabilityError(problem, "method")
    if spec.needs_head and head is False:
        raise CapabilityError(f"{method} needs a draft head: give one with --draft-model PATH "
                              "(a folder or hub id of an EAGLE-3 head for this model)", "method")
    if config is not None:
        if penalized(config) and not spec.penalties:
            raise CapabilityError(f"penalties are not supported with method {method} "
                                  "(it applies no frequency, presence or repetition penalty)", "frequency_penalty")
        if config.logprobs is not None and not spec.logprobs:
            raise CapabilityError(f"logprobs is not supported with method {method} (transformers' generate "
                                  "here reports no logits)", "logprobs")
        if config.grammar is not None:
            check_grammar(spec)
    if images and not reads_images:
        raise CapabilityError(f"{model} reads text only: it cannot take an image", "messages")
    return spec


def check_grammar(spec: registry.MethodSpec) -> None:
    """A CapabilityError in one line where a reply's grammar (structured output)
    cannot run: an anchor (transformers' generate, not racer's decoder) or the
    [structured] extra missing."""
    if spec.kind == registry.ANCHOR:
        raise CapabilityError(f"structured output is not supported with method {spec.name} (an anchor runs "
                              "transformers' generate); use ar or a drafting method", "response_format")
    if not grammar_engine.available():
        raise CapabilityError(grammar_engine.EXTRA_HINT, "response_format")


def check_for(engine: Engine, config: GenerationConfig, images: bool = False) -> registry.MethodSpec:
    """check_method for a request to a loaded `engine` (its draft head, whether it reads images)."""
    return check_method(config.method, config, head=engine.info.draft_head is not None, images=images,
                        reads_images=engine.reads_images, model=engine.info.model)


def check_methods_for(engine: Engine, config: GenerationConfig, methods: Iterable[str]) -> None:
    """check_for each of `methods` with `config`'s other settings (a benchmark's run)."""
    for method in methods:
        check_for(engine, config.replace(method=method))
