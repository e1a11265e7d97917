"""The peer drafters (suffix, recycling) through the decoder's own verification:
greedy equals plain greedy token for token in fp32 with drafts accepted,
sampling keeps the joint distribution, state kept across questions helps, and
suffix without its library is refused in one line naming the extra."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from engine_helpers import PROMPT, engine_for, run
from test_sampling_joint import (
    ALPHA,
    DRAWS,
    VOCAB,
    K,
    _ar_joint,
    _chi2_sf,
    _draw,
    _exact_joint,
    _pooled,
    _statistic,
    tiny_engine,
    verified_case,
)

from racer_core.common.capabilities import check_method
from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig, Source
from racer_core.common.registry import missing_extra
from racer_core.drafting.recycling import TEMPLATE, AdjacencyMatrix, RecyclingDrafter, TreeTemplate
from racer_core.verify.sampling import accept as _accept

NEW_TOKENS = 96
OWN_SOURCE = {"suffix": Source.SUFFIX, "recycling": Source.RECYCLED}
PEERS = ["recycling", pytest.param("suffix", marks=pytest.mark.skipif(
    missing_extra("suffix") is not None, reason="the [peers] extra (arctic-inference) is not installed"))]


@pytest.mark.parametrize("method", PEERS)
@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("markov", [False, True])
def test_peers_match_plain_greedy_with_drafts_accepted(method: str, family: str, markov: bool) -> None:
    engine = engine_for(family, markov=markov)
    plain, _, _ = run(engine, PROMPT, method="ar", max_new_tokens=NEW_TOKENS)
    for budget in ("auto", 4, 16):
        tokens, accepted, steps = run(engine, PROMPT, method=method, max_new_tokens=NEW_TOKENS, max_num_draft=budget)
        assert tokens == plain, (method, budget)
        # Nothing is proven unless drafts were really accepted.
        drafted = sum(accepted.values())
        assert set(s for s, n in accepted.items() if n) == {OWN_SOURCE[method]}  # shown as its own, not racer's
        assert drafted > 0 and steps < NEW_TOKENS, (method, budget, accepted)


@pytest.mark.parametrize("method", PEERS)
def test_peers_turns_and_trees(method: str) -> None:
    """Several turns on one decoder stay lossless; trees respect the budget,
    and the step record says the method sized its tree."""
    engine = engine_for("llama", markov=True)
    peer, plain = engine.decoder(), engine.decoder()
    prompt = list(PROMPT)
    for turn in range(3):
        config = GenerationConfig(method=method, max_new_tokens=40, max_num_draft=8 if turn == 1 else "auto")
        steps = list(peer.generate(prompt, config))
        reply = [t for s in steps for t in s.tokens]
        assert reply == [t for s in plain.generate(prompt, GenerationConfig(method="ar", max_new_tokens=40))
                         for t in s.tokens], turn
        assert all(s.record.budget_rule == "own" for s in steps[1:])
        if turn == 1:
            assert max(s.tree_size for s in steps[1:]) <= 8
        prompt = prompt + reply + [7, 8, 9, 5, 9, 3]


@pytest.mark.parametrize("method", PEERS)
def test_state_kept_across_questions_drafts_more(method: str) -> None:
    """A second question with the first's drafting state (the benchmark's
    --warm: suffix's cache, recycling's matrix) accepts more than a fresh one."""
    engine = engine_for("llama", markov=True)  # next tokens depend mostly on the current one
    config = GenerationConfig(method=method, max_new_tokens=64)
    first = engine.new_conversation()
    list(first.decoder.generate(PROMPT, config))
    cold, warm = engine.new_conversation(), engine.new_conversation(warm_from=first)
    assert warm.decoder.drafters[method] is first.decoder.drafters[method] and not cold.decoder.drafters
    cold_steps = list(cold.decoder.generate(PROMPT, config))
    warm_steps = list(warm.decoder.generate(PROMPT, config))
    assert [t for s in warm_steps for t in s.tokens] == [t for s in cold_steps for t in s.tokens]
    assert len(warm_steps) < len(cold_steps)


# -- sampling: the joint of the first K tokens, as test_sampling_joint.py tests racer's trees --------


def _recycling_case():
    """A deep recycling tree: the matrix taught by one verified pass over the prompt."""
    engine = tiny_engine()
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, 24)]
    drafter = RecyclingDrafter(VOCAB)
    with torch.inference_mode():
        dec = engine.decoder()
        logits = dec._prefill(prompt)
        rows = engine.model(input_ids=torch.tensor([prompt])).logits[0]
    drafter.matrix.update(np.asarray(prompt), rows)
    root = int(logits.argmax())
    tree = drafter.draft(root, -1, None)
    return verified_case(engine, prompt, root, tree.tokens, tree.parents, tree.depths, tree.ancestors)


def _suffix_case():
    """A suffix chain on a repeating prompt, the root continuing the pattern."""
    from racer_core.drafting.suffix import SuffixDrafter

    engine = tiny_engine()
    prompt = [0, 1, 2, 3, 4, 2] * 4 + [0, 1]
    drafter = SuffixDrafter()
    drafter.start(prompt, 2)
    tree = drafter.draft(2, -1, None)
    return verified_case(engine, prompt, 2, tree.tokens, tree.parents, tree.depths, tree.ancestors)


@pytest.mark.parametrize("method", PEERS)
def test_peer_trees_keep_the_sampling_distribution(method: str) -> None:
    case = _recycling_case() if method == "recycling" else _suffix_case()
    assert case.depths.max() >= K  # deep enough for the joint of K tokens to see every level
    exact = _ar_joint(case)
    assert np.abs(_exact_joint(case, None) - exact).max() < 1e-6  # the tree forward equals the plain one
    pool = _pooled(exact)
    p = pool(exact)
    for seed in (1, 2):
        stat = _statistic(pool(_draw(case, _accept, seed)), p)
        assert _chi2_sf(stat, len(p) - 1) > ALPHA, (method, seed, stat, DRAWS)


# -- recycling's matrix ------------------------------------------------------------------------------


def test_matrix_update_overwrites_rows_with_topk_and_the_last_duplicate_wins() -> None:
    matrix = AdjacencyMatrix(vocab_size=10, k=3)
    matrix.rows[9] = [1, 2, 3]
    logits = torch.tensor([
        [0.0, 5, 4, 3, 0, 0, 0, 0, 0, 0],  # token 4 -> 1 2 3
        [9.0, 0, 0, 0, 0, 0, 0, 8, 7, 0],  # token 6 -> 0 7 8
        [0.0, 0, 0, 0, 0, 1, 2, 3, 0, 0],  # token 4 again -> 7 6 5: the later row wins
    ])
    matrix.update(np.array([4, 6, 4]), logits)
    assert matrix.rows[4].tolist() == [7, 6, 5]
    assert matrix.rows[6].tolist() == [0, 7, 8]
    assert matrix.rows[9].tolist() == [1, 2, 3]  # not verified: kept
    assert not matrix.rows[[0, 1, 2, 3, 5, 7, 8]].any()  # the paper's start: zeros


def test_template_expansion_follows_the_paper() -> None:
    assert len(TEMPLATE) == 80 and max(map(len, TEMPLATE)) == 6
    template = TreeTemplate([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    matrix = AdjacencyMatrix(vocab_size=10, k=2)
    matrix.rows[3] = [5, 6]
    matrix.rows[5] = [7, 8]
    matrix.rows[6] = [9, 1]
    matrix.rows[7] = [2, 4]
    tokens = matrix.expand(3, template, template.size)
    assert tokens.tolist() == [3, 5, 6, 7, 8, 9, 2]
    assert template.parents.tolist() == [-1, 0, 0, 1, 1, 2, 3]
    assert matrix.expand(3, template, 4).tolist() == [3, 5, 6, 7]  # a budget keeps a breadth-first prefix
    drafter = RecyclingDrafter(vocab_size=4)  # a vocabulary under k keeps the paths within it
    assert int(drafter.template.ranks.max()) == 3 and drafter.matrix.k == 4


# -- without the extra ---------------------------------------------------------------------------------


@pytest.fixture
def no_arctic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library as if not installed: importing it fails."""
    for name in ("arctic_inference", "arctic_inference.suffix_decoding"):
        monkeypatch.setitem(sys.modules, name, None)


def test_suffix_without_the_extra_is_refused_in_one_line(no_arctic: None) -> None:
    problem = missing_extra("suffix")
    assert problem is not None and "[peers]" in problem and "\n" not in problem
    assert missing_extra("recycling") is None and missing_extra("racer") is None
    with pytest.raises(InputError, match=r"\[peers\]"):
        check_method("suffix")
    engine = engine_for("llama")
    with pytest.raises(InputError, match=r"\[peers\]"):
        list(engine.decoder().generate(PROMPT, GenerationConfig(method="suffix", max_new_tokens=4)))
    # recycling needs no library
    assert len(run(engine, PROMPT, method="recycling", max_new_tokens=4)[0]) == 4


def test_bench_and_chat_refuse_suffix_before_loading(no_arctic: None, capsys: pytest.CaptureFixture[str]) -> None:
    from racer_tui.cli import main

    def loader(**_: object) -> None:
        raise AssertionError("the model must not load")

    code = main(["bench", "builtin", "--methods", "ar,suffix", "--question-end", "1"], engine_loader=loader)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "[peers]" in err[0]
    assert main(["--method", "suffix"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[peers]" in err[0]
