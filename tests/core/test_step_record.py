"""The step inspector's record is the tree the decoder really verified."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import PROMPT, engine_for

from racer_core.common.events import GenerationConfig, Source
from racer_core.common.step_record import BudgetOption, StepRecord
from racer_core.engine.decoder import SequenceDecoder


def _verified_inputs(monkeypatch) -> list[tuple[list[int], list[int], np.ndarray]]:
    """Spy on the decoder's forward passes: (tokens, positions, mask) of each."""
    seen: list[tuple[list[int], list[int], np.ndarray]] = []
    original = SequenceDecoder._forward

    def spy(self, tokens, positions, mask, *capture, **extra):  # one chat: each pass is its own (engine loop)
        seen.append((tokens.tolist(), positions.tolist(), mask.detach().cpu().float().numpy()))
        return original(self, tokens, positions, mask, *capture, **extra)

    monkeypatch.setattr(SequenceDecoder, "_forward", spy)
    return seen


@pytest.mark.parametrize("budget", ["auto", 12])
def test_recorded_tree_is_the_verified_tree(monkeypatch, budget):
    engine = engine_for("llama", markov=True)
    seen = _verified_inputs(monkeypatch)
    decoder = engine.decoder()
    config = GenerationConfig(method="racer", max_new_tokens=48, max_num_draft=budget)
    steps = list(decoder.generate(PROMPT * 3, config))
    assert steps[0].record is None  # the prefill drafts nothing
    tree_steps = seen[len(seen) - len(steps) + 1 :]  # the prefill's chunk(s) come first
    assert any(s.record.size > 1 for s in steps[1:]), "the automaton should draft on this prompt"
    assert any(len(s.record.accepted) > 1 for s in steps[1:]), "some drafts should be accepted"
    for step, (tokens, positions, mask) in zip(steps[1:], tree_steps, strict=True):
        record = step.record
        size = record.size
        base = positions[0]
        assert record.fed == len(tokens) == step.budget
        assert list(record.tokens) == tokens[:size]
        assert list(record.depths) == [p - base for p in positions[:size]]
        # The mask lets each node see exactly itself and its recorded ancestors.
        tree_mask = mask[0, 0, :size, base : base + size] == 0
        for node in range(size):
            ancestors = {node}
            parent = record.parents[node]
            while parent >= 0:
                ancestors.add(parent)
                parent = record.parents[parent]
            assert set(np.nonzero(tree_mask[node])[0].tolist()) == ancestors
        # The accepted path runs parent to child, and its drafts then the bonus are the step's tokens.
        assert record.accepted[0] == 0
        for parent, child in zip(record.accepted, record.accepted[1:], strict=False):
            assert record.parents[child] == parent
        emitted = list(record.accepted_tokens)
        assert step.tokens == emitted[: len(step.tokens)]
        for node, source in zip(record.accepted[1:], step.sources, strict=False):
            assert source == record.sources[node] and source in (Source.RETRIEVAL, Source.LOGITS)


def test_auto_budget_explains_its_choice():
    engine = engine_for("llama", markov=True)
    steps = list(engine.decoder().generate(PROMPT * 3, GenerationConfig(method="racer", max_new_tokens=48)))
    drafted = [s.record for s in steps[1:] if s.record.drafted > 1]
    assert drafted
    for record in drafted:
        assert record.budget_rule == "auto"
        assert record.estimates is not None and record.estimates[0] == 1.0
        chosen = record.options[record.chosen_option]
        assert chosen.nodes == record.size
        # The policy moves to a larger size only for a gain above 0.01% (ties keep
        # the smaller tree), so the chosen option is the best within that margin.
        assert chosen.tokens_per_s * 1.0001 >= max(o.tokens_per_s for o in record.options)
        assert "expected tokens" in record.why


def test_plain_decoding_records_the_root_alone():
    engine = engine_for("llama")
    steps = list(engine.decoder().generate(PROMPT, GenerationConfig(method="ar", max_new_tokens=6)))
    for step in steps[1:]:
        assert step.record.size == 1 and step.record.accepted == (0,)
        assert step.record.bonus == step.tokens[0]
        assert step.record.why.startswith("plain decoding")


def test_nodes_and_sources_read_from_the_source_ids():
    record = StepRecord.build(
        [7, 8, 9, 10], [-1, 0, 0, 1], [0, 1, 1, 2], [0, 1, 2, 1], [0, 4, 0, 5], [-1, -1, 0, 1],
        accepted=[0, 1], bonus=11, fed=4, drafted=9, budget_rule="auto", estimates=[1.0, 0.5, 0.2, 0.1],
        options=(BudgetOption(1, 1, 1.0, 0.01), BudgetOption(4, 4, 1.8, 0.012)), chosen_option=1,
    )
    nodes = record.nodes
    assert [n.source for n in nodes] == ["root", "automaton ctx 4", "logits rank 0", "automaton ctx 5 + logits rank 1"]
    assert record.children(0) == [1, 2] and record.accepted_tokens == (8, 11)
    assert "4 most likely of 9" in record.why and "root alone" in record.why


def test_budget_options_read_as_the_tuple_they_stand_for() -> None:
    from racer_core.common.step_record import BudgetOptions

    options = BudgetOptions([1, 3], [1, 4], [1.0, 1.8], [0.01, 0.012])
    assert options._options is None  # nothing built until read
    expected = (BudgetOption(1, 1, 1.0, 0.01), BudgetOption(3, 4, 1.8, 0.012))
    assert len(options) == 2 and options
    assert options == expected and expected == options
    assert options[1] == expected[1] and options[-1] == expected[1] and options[:1] == expected[:1]
    assert list(options) == list(expected) and hash(options) == hash(expected)
    assert options == BudgetOptions([1, 3], [1, 4], [1.0, 1.8], [0.01, 0.012])
    assert options != BudgetOptions([1], [1], [1.0], [0.01]) and options != [1, 2]
    assert not BudgetOptions([], [], [], [])


def test_budget_options_from_arrays_read_as_from_lists() -> None:
    from racer_core.common.step_record import BudgetOptions

    lists = BudgetOptions([1, 3], [1, 4], [1.0, 1.8], [0.01, 0.012])
    arrays = BudgetOptions(np.array([1, 3]), np.array([1, 4]), np.array([1.0, 1.8]), np.array([0.01, 0.012]))
    assert len(arrays) == 2 and arrays._lists is None  # no list made until read
    assert arrays == lists and lists == arrays and tuple(arrays) == tuple(lists) and hash(arrays) == hash(lists)
    assert [[type(v) for v in c] for c in arrays._columns] == [[int, int], [int, int], [float, float], [float, float]]
    assert not BudgetOptions(np.array([], dtype=np.int64), [], [], [])
