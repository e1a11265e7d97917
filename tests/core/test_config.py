"""GenerationConfig checks itself: one rule and one sentence per parameter."""

from __future__ import annotations

import dataclasses
import math

import pytest

from racer_core.common.config import DEFAULTS, FIELDS, MAX_DRAFT, PER_REPLY, ConfigError, GenerationConfig
from racer_core.common.errors import InputError

# (field, value): each refused by construction, by replace and by parse_field.
BAD = [
    ("method", "nope"),
    ("method", None),
    ("max_new_tokens", 0),
    ("max_new_tokens", -5),
    ("max_new_tokens", None),
    ("max_new_tokens", True),
    ("max_new_tokens", 2.0),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", -0.1),
    ("temperature", 7),
    ("temperature", "hot"),
    ("temperature", True),
    ("temperature", 10**400),
    ("top_p", -0.1),
    ("top_p", 1.5),
    ("top_p", math.nan),
    ("max_num_draft", 0),
    ("max_num_draft", MAX_DRAFT + 1),
    ("max_num_draft", True),
    ("max_num_draft", "many"),
    ("max_num_draft", 2.5j),
    ("max_num_draft", 8.0),
    ("ngram", -1),
    ("max_nodes", 0),
    ("max_nodes", 2**31),
    ("max_breadth", -1),
    ("max_breadth", 5000),
    ("min_depth", 0),
    ("enable_thinking", 1),
    ("enable_thinking", "yes please"),
    ("seed", -1),
    ("seed", False),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_values_are_refused_everywhere_in_one_sentence(name, value) -> None:
    with pytest.raises(ConfigError) as built:
        GenerationConfig(**{name: value})
    with pytest.raises(ConfigError) as replaced:
        DEFAULTS.replace(**{name: value})
    with pytest.raises(ConfigError) as parsed:
        GenerationConfig.parse_field(name, value)
    assert str(built.value) == str(replaced.value) == str(parsed.value)
    message = str(built.value)
    assert built.value.field == name and message.startswith(f"{name} must be ") and "\n" not in message
    # One error class: the front ends catch it as a user error and as a ValueError.
    assert isinstance(built.value, InputError) and isinstance(built.value, ValueError)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("max_num_draft", " Auto ", "auto"),
        ("max_num_draft", "32", 32),
        ("max_num_draft", str(MAX_DRAFT), MAX_DRAFT),
        ("temperature", "0.7", 0.7),
        ("temperature", "5", 5.0),
        ("top_p", "1", 1.0),
        ("top_p", "0", 1.0),  # the original's default: no nucleus filter, like 1
        ("max_new_tokens", "1", 1),
        ("method", "Retrieval", "retrieval"),
        ("enable_thinking", "true", True),
        ("seed", "", None),
        ("seed", "7", 7),
    ],
)
def test_text_is_read_by_the_field_kind(name, text, value) -> None:
    assert GenerationConfig.parse_field(name, text) == value
    assert type(GenerationConfig.parse_field(name, text)) is type(value)


@pytest.mark.parametrize(
    ("name", "text"),
    [("temperature", "nan"), ("temperature", "inf"), ("temperature", "1e999"), ("max_num_draft", "0"),
     ("max_num_draft", "4097"), ("max_new_tokens", "0"), ("ngram", "x"), ("enable_thinking", "maybe")],
)
def test_bad_text_is_refused_by_the_same_rule(name, text) -> None:
    with pytest.raises(ConfigError, match=f"^{name} must be "):
        GenerationConfig.parse_field(name, text)


def test_defaults_are_valid_and_numbers_normalized() -> None:
    assert GenerationConfig() == DEFAULTS
    # grammar and tie_margins: per reply, no setting
    assert set(FIELDS) | set(PER_REPLY) == {f.name for f in dataclasses.fields(GenerationConfig)}
    cfg = GenerationConfig(temperature=1, top_p=1)
    assert type(cfg.temperature) is float and type(cfg.top_p) is float
    assert dataclasses.asdict(cfg) == dataclasses.asdict(GenerationConfig(temperature=1.0))
    assert dataclasses.replace(cfg, method="ar").method == "ar"  # the runner's replace checks too
    with pytest.raises(ConfigError):
        dataclasses.replace(cfg, max_num_draft=0)
    with pytest.raises(ConfigError, match="not a generation parameter"):
        DEFAULTS.replace(colour="red")
    with pytest.raises(ConfigError, match="not a generation parameter"):
        GenerationConfig.parse_field("colour", "red")


def test_a_grammar_rides_on_the_config_but_is_no_setting() -> None:
    from racer_core.common.errors import InputError
    from racer_core.common.grammar import Grammar

    config = GenerationConfig(grammar=Grammar("json_schema", '{"type": "object"}'))
    assert config.replace(temperature=0.5).grammar == config.grammar
    assert config.replace(grammar=None).grammar is None
    with pytest.raises(ConfigError, match="grammar must be"):
        GenerationConfig(grammar="json")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unknown grammar kind"):
        Grammar("yaml", "x")
    with pytest.raises(InputError, match="needs its text"):
        Grammar("regex", " ")


def test_tie_margins_ride_on_the_config_but_are_no_setting() -> None:
    assert not DEFAULTS.tie_margins  # chat and the API do not pay for them
    assert DEFAULTS.replace(tie_margins=True).replace(temperature=0.5).tie_margins
    with pytest.raises(ConfigError, match="tie_margins must be true or false"):
        GenerationConfig(tie_margins=1)  # type: ignore[arg-type]
    assert "tie_margins" not in FIELDS  # no flag, settings entry or `racer` request field
    with pytest.raises(ConfigError, match="not a generation parameter"):
        GenerationConfig.parse_field("tie_margins", "true")
