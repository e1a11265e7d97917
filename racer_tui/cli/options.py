"""The options several commands share, each declared once: flags, type,
default and help.

Defaults and help come from where the value is defined: a generation
parameter's from GenerationConfig (its FIELDS and DEFAULTS), a load option's
from LoadOptions. A command adds an option with `Option.add`, and gives its
own default only where its meaning differs: the chat's options default to
"unset" (the saved setting then holds), and a benchmark leaves the thinking
switch to the chat template, as the original's benchmarks do.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from racer_core.bench.suites import BENCH_NAMES, DEFAULT_DATA_ROOT
from racer_core.common.capabilities import CapabilityError, check_method
from racer_core.common.config import (
    DEFAULTS,
    FIELDS,
    MAX_BREADTH,
    MAX_DRAFT,
    MAX_TEMPERATURE,
    METHODS,
    GenerationConfig,
)
from racer_core.models.load_options import FORWARDS, HALF, LoadOptions
from racer_tui.cli.params import TOP_P_HELP, param, str2bool

_GIVEN = object()  # "the option's own default" in Option.add


@dataclasses.dataclass(frozen=True, eq=False)
class Option:
    """One command-line option; `flags[0]` is the spelling written back
    (`words`), the others are older spellings (the original RACER's)."""

    flags: tuple[str, ...]
    dest: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    shown: str | None = None  # the default in words, where its value does not say it
    more: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # action, const, choices, nargs

    @property
    def switch(self) -> bool:
        return self.more.get("action") in ("store_true", "store_const")

    def add(self, parser: Any, default: Any = _GIVEN, shown: str | None = None) -> argparse.Action:
        """Add to a parser or argument group, with this command's `default` where it differs;
        `shown` is the default in words ("" says nothing, as where a group's title says it)."""
        if default is _GIVEN:
            default, shown = self.default, self.shown if shown is None else shown
        text = self.help
        said = _said(default) if shown is None else shown
        if said and not self.switch:
            text += f" (default: {said})"
        kwargs: dict[str, Any] = {"dest": self.dest, "default": default, "help": text, **self.more}
        if self.type is not None:
            kwargs["type"] = self.type
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        return parser.add_argument(*self.flags, **kwargs)

    def words(self, value: Any) -> list[str]:
        """`value` as command-line words that parse back to it."""
        if self.switch:
            on = self.more.get("const", True)
            return [self.flags[0]] if value == on else []
        return [self.flags[0], str(value)]


def _said(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str) and not value.isidentifier():
        return repr(value)  # quotes show where a sentence or '' begins and ends
    return str(value)


def generation(name: str, *, flag: str | None = None, metavar: str | None = None, note: str = "",
               **more: Any) -> Option:
    """A GenerationConfig field as an option: read and checked by its rule, its default, its help."""
    return Option(
        (flag or "--" + name.replace("_", "-"),), name, FIELDS[name].help + note,
        default=getattr(DEFAULTS, name), type=more.pop("type", param(name)), metavar=metavar,
        more=more,
    )


def _load_default(name: str) -> Any:
    return next(f.default for f in dataclasses.fields(LoadOptions) if f.name == name)


# Which model, and how it loads.
MODEL = Option(
    ("--model", "--model-path"), "model_path",  # --model-path: the original RACER's spelling
    "a checkpoint folder, a .gguf file or a Hugging Face hub id org/name",
    metavar="PATH", shown="the embedded model",
)
DEVICE = Option(("--device",), "device", "auto, cpu, cuda or cuda:N; auto spreads a model over the visible GPUs",
                default=_load_default("device"))
DTYPE = Option(
    ("--dtype",), "dtype",
    "auto, float32, bfloat16 or float16; auto is bfloat16 on CUDA and on CPUs with native bf16, else float32 "
    "(only float32 keeps greedy racer equal to ar token for token); a GGUF on a CPU runs in its own 4-bit "
    "blocks under auto (racer equal to ar), float32 dequantizes it",
    default=_load_default("dtype"),
)
TRUST_REMOTE_CODE = Option(
    ("--trust-remote-code",), "trust_remote_code",
    "run the code shipped in the model's folder; it must accept a transformers cache and a 4D attention mask, "
    "else the model is refused",
    default=_load_default("trust_remote_code"), more={"action": "store_true"},
)
QUANTIZE = tuple(
    Option((f"--load-in-{bits}",), "quantize", f"{bits[:-3]}-bit weights through bitsandbytes (CUDA only)",
           default=_load_default("quantize"), more={"action": "store_const", "const": bits})
    for bits in ("8bit", "4bit")
) + (Option(("--fp16-weights",), "quantize",
            "CPU: linear weights stored in float16 (fbgemm), arithmetic in float32; half the memory and "
            "about 2-3x faster per token on a small model; output as float32's up to rounding "
            "(greedy racer still equals ar)",
            default=_load_default("quantize"), more={"action": "store_const", "const": HALF}),)
FORWARD = Option(
    ("--forward",), "forward",
    "the verification forward: lean (fused projections, the same math, for dense Llama, Mistral, Qwen2 and "
    "Qwen3 decoders), stock (transformers' own), or auto: lean where the model has one",
    default=FORWARDS[0], more={"choices": FORWARDS},
)
DRAFT_MODEL = Option(
    ("--draft-model", "--eagle-model-path"), "draft_model",  # --eagle-model-path: the original's inference_eagle3
    "an EAGLE-3 draft head for method eagle3: a folder (the EAGLE authors' or vLLM's speculators format) "
    "or a Hugging Face hub id, for this model",
    default=_load_default("draft_model"), metavar="PATH", shown="none",
)
LOADING = (TRUST_REMOTE_CODE, *QUANTIZE, FORWARD, DRAFT_MODEL)
"""The load_engine keywords besides the model, device and dtype."""

# How replies are generated.
METHOD = generation("method", note=f": {', '.join(METHODS)}")
MAX_NEW_TOKENS = generation("max_new_tokens", metavar="N")
TEMPERATURE = generation("temperature", metavar="T", note=f", at most {MAX_TEMPERATURE:g}")
TOP_P = Option(("--top-p",), "top_p", TOP_P_HELP, default=DEFAULTS.top_p, type=param("top_p"), metavar="P")
MAX_NUM_DRAFT = generation("max_num_draft", metavar="N|auto", note=f" (a number from 1 to {MAX_DRAFT})")
NGRAM = generation("ngram", metavar="N")
MAX_NODES = generation("max_nodes", metavar="N")
MAX_BREADTH = generation("max_breadth", metavar="K", note=f", 0 to {MAX_BREADTH}")
TOTAL_TOKEN = generation("total_token", metavar="N")
DEPTH = generation("depth", metavar="N")
TOP_K = generation("top_k", metavar="K")
ENABLE_THINKING = generation(
    "enable_thinking", type=str2bool, nargs="?", const=True, metavar="true|false",
    note="; the flag alone means true",
)
TUNING = (MAX_NEW_TOKENS, TEMPERATURE, TOP_P, MAX_NUM_DRAFT, NGRAM, MAX_NODES, MAX_BREADTH, TOTAL_TOKEN, DEPTH, TOP_K,
          ENABLE_THINKING)
"""The generation parameters both the chat and a benchmark set (the chat adds --method, a benchmark --methods)."""
SYSTEM_PROMPT = Option(("--system-prompt",), "system_prompt", "the system message ('' for none)",
                       default="", metavar="TEXT")

# The original RACER's benchmark folders.
BENCH_NAME = Option(("--bench-name",), "bench_name",
                    f"one of the original's benchmarks ({', '.join(BENCH_NAMES)}): DATA_ROOT/NAME/question.jsonl",
                    metavar="NAME", shown="", more={"choices": BENCH_NAMES})
DATA_ROOT = Option(("--data-root",), "data_root", "with --bench-name: the folder holding NAME/question.jsonl",
                   default=DEFAULT_DATA_ROOT, type=Path, metavar="DIR", shown="./data, the original's layout")


def add_all(parser: Any, options: Iterable[Option], default: Any = _GIVEN, shown: str | None = None) -> None:
    for option in options:
        option.add(parser, default, shown)


def add_loading(parser: Any) -> None:
    """--trust-remote-code, --load-in-8bit | --load-in-4bit | --fp16-weights, --forward, --draft-model."""
    TRUST_REMOTE_CODE.add(parser)
    bits = parser.add_mutually_exclusive_group()
    for option in QUANTIZE:
        option.add(bits)
    FORWARD.add(parser)
    DRAFT_MODEL.add(parser)


def method_refusal(methods: Iterable[str], args: argparse.Namespace,
                   config: GenerationConfig | None = None) -> str | None:
    """Why a chosen method cannot run here with the load options given (its
    library missing, no draft head) or with `config` (penalties it does not
    apply, ...), or None: racer_core/common/capabilities.py, before any load."""
    try:
        for method in methods:
            check_method(method, config, head=bool(args.draft_model))
    except CapabilityError as refused:
        return str(refused)
    return None


def load_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """load_engine keywords for the load options given (none for a default)."""
    return {o.dest: getattr(args, o.dest) for o in LOADING if getattr(args, o.dest, o.default) != o.default}


def words_of(args: argparse.Namespace, options: Iterable[Option], unset: Any = _GIVEN) -> list[str]:
    """The options given, as command-line words again (for the served app processes);
    an option at `unset` (its own default unless said) is left out."""
    out: list[str] = []
    for option in options:
        value = getattr(args, option.dest)
        if value != (option.default if unset is _GIVEN else unset):
            out += option.words(value)
    return out
