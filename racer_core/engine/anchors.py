"""External anchors: transformers' own `generate` (`hf`) and its prompt lookup
decoding (`pld`), streamed through the same Step shape as RACER.

`generate` owns its loop, so it runs in a helper thread that hands tokens
back through a queue; a stopping criterion carries cancellation in.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.decoder import Step

PLD_TOKENS = 10  # the pld anchor: prompt lookup with 10 draft tokens (README, Methods)
_DONE = object()


class _QueueStreamer(BaseStreamer):
    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()
        self._skipped_prompt = False

    def put(self, value: torch.Tensor) -> None:
        if not self._skipped_prompt:  # generate first sends the prompt
            self._skipped_prompt = True
            return
        self.queue.put((time.perf_counter(), value.reshape(-1).tolist()))

    def end(self) -> None:
        self.queue.put(_DONE)


class _StopWhen(StoppingCriteria):
    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        self.stopped = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.stopped = self.stopped or self.should_stop()
        return torch.full((input_ids.shape[0],), self.stopped, dtype=torch.bool, device=input_ids.device)


def generate_with_transformers(
    engine: Any, prompt: list[int], config: GenerationConfig, should_stop: Callable[[], bool] | None,
    pixels: dict[str, torch.Tensor] | None = None,
) -> Iterator[Step]:
    """One Step per chunk `generate` streams (one token for `hf`, an accepted
    run for `pld`); the drafts' origin is not reported, so all count as MODEL.
    `pixels`: a VL prompt's image inputs, handed to `generate` as they are.
    The anchors declare no penalties and no log-probabilities: a request for
    them is refused before this runs (racer_core/common/capabilities.py)."""
    rt = engine.runtime
    streamer = _QueueStreamer()
    stop = _StopWhen(should_stop or (lambda: False))
    kwargs: dict[str, Any] = {
        "max_new_tokens": config.max_new_tokens,
        "eos_token_id": sorted(rt.eos_ids),
        "pad_token_id": min(rt.eos_ids) if rt.eos_ids else 0,
        "streamer": streamer,
        "stopping_criteria": StoppingCriteriaList([stop]),
    }
    if config.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=config.temperature, top_p=config.top_p,
                      top_k=config.sample_top_k or None, min_p=config.min_p or None)
    if config.method == "pld":
        kwargs["prompt_lookup_num_tokens"] = PLD_TOKENS
    if config.seed is not None:
        torch.manual_seed(config.seed)
    ids = torch.tensor([prompt], dtype=torch.long, device=rt.device)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with torch.inference_mode():
                engine.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs, **(pixels or {}))
        except BaseException as error:  # handed to the consuming thread
            failure.append(error)
        finally:
            streamer.end()

    worker = threading.Thread(target=run, name=f"racer-{config.method}", daemon=True)
    started = last = time.perf_counter()
    worker.start()
    emitted = 0
    pending: Step | None = None
    while True:
        item = streamer.queue.get()
        if item is _DONE:
            break
        stamp, tokens = item
        if pending is not None:
            yield pending
        emitted += len(tokens)
        pending = Step(tokens, [Source.MODEL] * len(tokens), 0, 0, 0.0, stamp - last, 0.0)
        last = stamp
    worker.join()
    if failure:
        raise failure[0]
    if pending is None:
        pending = Step([], [], 0, 0, 0.0, time.perf_counter() - started, 0.0)
    ended_eos = bool(pending.tokens) and pending.tokens[-1] in rt.eos_ids
    pending.finish_reason = "cancelled" if stop.stopped else ("eos" if ended_eos else "length")
    yield pending
