"""Every decoding method, one entry each: what the app, the API and the
engine need to know about it, in one place.

Pure Python on purpose: the Textual app and the API read names, labels,
colours and sources from here without importing torch. The engine imports a
method's drafter only when a reply uses it (`load`), so a method whose
library is missing costs nothing until chosen, and is refused in one line.

A drafting method declares the sources its accepted tokens are shown with
(`SourceSpec`): the chat's colours and legend, the step inspector, the API's
`accepted_by_source` and per-token `source` all read them from here. Source
ids are stored in chat files: a new source takes a new id, never an old one.
To add a method, see docs/drafters.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

DRAFTER = "drafter"  # drafts trees that the shared decoder verifies (racer_core/engine/decoder.py)
PLAIN = "plain"  # the decoder's drafter that never drafts (ar)
ANCHOR = "anchor"  # runs transformers' own generate (racer_core/engine/anchors.py), not the decoder


@dataclass(frozen=True)
class SourceSpec:
    """Where an accepted token came from, as users are shown it."""

    id: int  # stable: chat files store it
    name: str  # the member of racer_core.common.events.Source
    key: str  # the API's name (accepted_by_source, per-token source)
    label: str  # the legend ("draft from the <label>") and the step inspector
    colour: str  # "#rrggbb" of the chat text ("" for the model's own tokens)


BONUS = SourceSpec(0, "MODEL", "bonus", "sampled by the model", "")
"""The token every step's model pass adds itself (and plain decoding's only one)."""


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method."""

    name: str
    label: str  # the settings screen's choice
    colour: tuple[int, int, int]  # the dashboard charts' colour
    help: str  # one line for --help and the docs
    kind: str = DRAFTER  # DRAFTER, PLAIN or ANCHOR
    drafter: str = ""  # "module:Class" of its Drafter (racer_core/drafting/protocol.py), imported on use
    sources: tuple[SourceSpec, ...] = ()  # what its accepted drafts are shown as
    extra: str | None = None  # the optional extra it needs ...
    library: tuple[str, str] | None = None  # ... for this (module, package)
    needs_head: bool = False  # it drafts with a draft head (--draft-model)
    shares: str | None = None  # another method whose drafter (and state) it uses, with its own settings
    cost_sized: bool = False  # its trees are sized by the tree policy on the cost curve (budget auto)
    # What it can do; checked in one place, racer_core/common/capabilities.py (docs/design.md 2.1).
    penalties: bool = True  # applies frequency, presence and repetition penalties
    logprobs: bool = True  # reports each token's log-probability
    stepped: bool = True  # one event per forward pass (an anchor reports its whole reply in one)

    @property
    def drafts(self) -> bool:
        """Whether the shared decoder runs it with a drafter that drafts."""
        return self.kind == DRAFTER

    @property
    def state(self) -> str:
        """The name a conversation keeps this method's drafter under."""
        return self.shares or self.name

    def missing(self) -> str | None:
        """One line saying what this method lacks to run here, or None when it can run."""
        if self.library is None:
            return None
        module, package = self.library
        try:
            importlib.import_module(module)
        except ImportError as error:
            reason = (str(error).splitlines() or ["not importable"])[0]
            return (f"method {self.name!r} needs the optional extra [{self.extra}] ({package}; here: {reason}); "
                    f"install it as docs/evaluation.md says")
        return None

    def load(self) -> Any:
        """The drafter class (imports the method's module, and torch)."""
        module, _, name = self.drafter.partition(":")
        return getattr(importlib.import_module(module), name)


AUTOMATON = SourceSpec(1, "RETRIEVAL", "automaton", "automaton", "#00af00")  # xterm 34
LOGITS = SourceSpec(2, "LOGITS", "logits", "logits table", "#87ff87")  # xterm 120
HEAD = SourceSpec(3, "HEAD", "head", "draft head", "#00d7d7")  # xterm 44
SUFFIX = SourceSpec(4, "SUFFIX", "suffix", "suffix tree", "#d7af00")  # xterm 178
RECYCLED = SourceSpec(5, "RECYCLED", "recycled", "recycled top-k", "#d787d7")  # xterm 176
PROMPT_LOOKUP = SourceSpec(6, "NGRAM", "ngram", "prompt lookup", "#87afff")  # xterm 111
GRAMMAR = SourceSpec(7, "GRAMMAR", "grammar", "grammar (forced)", "#ff8700")  # xterm 208
"""Tokens a reply's grammar forces (racer_core/structured): any method drafts them under a constraint."""

_RACER = "racer_core.drafting.racer:RacerDrafter"
PEERS_EXTRA = "peers"
# transformers' generate, as the anchors run it: no penalties, no logits reported, one event per reply
_GENERATE: dict[str, Any] = {"penalties": False, "logprobs": False, "stepped": False}

METHOD_SPECS: tuple[MethodSpec, ...] = (
    MethodSpec("ar", "ar (plain decoding)", (160, 160, 160), "plain decoding: one token per pass",
               kind=PLAIN, drafter="racer_core.drafting.plain:PlainDrafter"),
    MethodSpec("racer", "racer (both sources)", (0, 175, 0), "RACER: the automaton and the logits table",
               drafter=_RACER, sources=(AUTOMATON, LOGITS), cost_sized=True),
    MethodSpec("retrieval", "retrieval (automaton)", (88, 166, 255), "racer with the automaton alone",
               drafter=_RACER, sources=(AUTOMATON,), shares="racer", cost_sized=True),
    MethodSpec("logits", "logits (logits tree)", (210, 153, 34), "racer with the logits table alone",
               drafter=_RACER, sources=(LOGITS,), shares="racer", cost_sized=True),
    MethodSpec("hf", "hf (transformers)", (188, 140, 255), "anchor: transformers' generate", kind=ANCHOR,
               **_GENERATE),
    MethodSpec("pld", "pld (prompt lookup)", (255, 123, 114), "anchor: transformers' prompt lookup",
               kind=ANCHOR, **_GENERATE),
    MethodSpec("eagle3", "eagle3 (draft head, --draft-model)", (121, 192, 255),
               "EAGLE-3's dynamic tree from a trained draft head", drafter="racer_core.drafting.eagle3:Eagle3Drafter",
               sources=(HEAD,), needs_head=True),
    MethodSpec("suffix", "suffix (SuffixDecoding, extra [peers])", (57, 197, 207),
               "SuffixDecoding (arctic-inference)", drafter="racer_core.drafting.suffix:SuffixDrafter",
               sources=(SUFFIX,), extra=PEERS_EXTRA, library=("arctic_inference.suffix_decoding", "arctic-inference")),
    MethodSpec("recycling", "recycling (Token Recycling)", (219, 97, 162), "Token Recycling's adjacency matrix",
               drafter="racer_core.drafting.recycling:RecyclingDrafter", sources=(RECYCLED,)),
    MethodSpec("ngram", "ngram (prompt lookup, our verifier)", (255, 200, 120),
               "vLLM's n-gram prompt lookup, verified like racer", drafter="racer_core.drafting.ngram:NgramDrafter",
               sources=(PROMPT_LOOKUP,)),
)

REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in METHOD_SPECS}


def method(name: str) -> MethodSpec | None:
    return REGISTRY.get(name)


def names(kind: str | None = None) -> tuple[str, ...]:
    """The methods (of one kind), in the registry's order."""
    return tuple(s.name for s in METHOD_SPECS if kind is None or s.kind == kind)


def sources() -> tuple[SourceSpec, ...]:
    """Every source once, the model's own first, by id."""
    found = {BONUS.id: BONUS}
    for source in (*(s for spec in METHOD_SPECS for s in spec.sources), GRAMMAR):  # a grammar constrains any method
        if found.setdefault(source.id, source) != source:
            raise ValueError(f"source id {source.id} is declared twice, differently")
    return tuple(found[i] for i in sorted(found))


def missing_extra(name: str) -> str | None:
    """One line saying what method `name` lacks to run here, or None when it can run (or is unknown)."""
    spec = REGISTRY.get(name)
    return None if spec is None else spec.missing()

