"""Sampling preserves the target distribution (docs/design.md 1.5).

The acceptance rule draws one sample per visited node, shared by every path
through it. The original implementation sampled each path independently and
kept the longest match, which favours drafted tokens; the tests below run the
same statistics on that rule (written here) to show they can tell."""

from __future__ import annotations

import numpy as np
import torch
from engine_helpers import PROMPT, engine_for
from hypothesis import given, settings
from hypothesis import strategies as st

from racer_core.common.events import GenerationConfig
from racer_core.drafting.protocol import DrafterSetup
from racer_core.drafting.racer import RacerDrafter
from racer_core.verify.sampling import TokenSampler, greedy_choices
from racer_core.verify.sampling import accept as _accept


def _chi_square_p(counts_a: np.ndarray, counts_b: np.ndarray) -> float:
    """Two-sample chi-square homogeneity test (cells with data only)."""
    from math import exp, lgamma, log

    keep = (counts_a + counts_b) > 0
    a, b = counts_a[keep].astype(float), counts_b[keep].astype(float)
    n_a, n_b = a.sum(), b.sum()
    total = a + b
    e_a, e_b = total * n_a / (n_a + n_b), total * n_b / (n_a + n_b)
    stat = float((((a - e_a) ** 2) / e_a).sum() + (((b - e_b) ** 2) / e_b).sum())
    dof = int(keep.sum()) - 1
    # Survival function of chi-square via the regularized upper gamma series.
    k, x = dof / 2.0, stat / 2.0
    if x == 0:
        return 1.0
    term = total_sum = 1.0 / k
    n = 1
    while term > 1e-12 * total_sum and n < 10_000:
        term *= x / (k + n)
        total_sum += term
        n += 1
    lower = exp(k * log(x) - x - lgamma(k)) * total_sum
    return max(0.0, 1.0 - lower)


def _biased_accept(
    logits: torch.Tensor, tokens: np.ndarray, parents: np.ndarray, sampler: TokenSampler
) -> tuple[list[int], int]:
    """The original rule: sample along every leaf path independently, keep the
    longest match, then sample the bonus token afresh at its end."""
    n = len(tokens)
    children = {i: [j for j in range(n) if parents[j] == i] for i in range(n)}
    leaves = [i for i in range(n) if not children[i]]
    best: list[int] | None = None
    for leaf in leaves:
        chain = []
        j = leaf
        while j >= 0:
            chain.append(j)
            j = int(parents[j])
        chain.reverse()
        path = [0]
        for depth in range(1, len(chain)):
            if int(tokens[chain[depth]]) != sampler.sample(logits[path[-1]]):
                break
            path.append(chain[depth])
        if best is None or len(path) > len(best):
            best = path
    assert best is not None
    return best, sampler.sample(logits[best[-1]])


def test_toy_case_from_design() -> None:
    """p = (.3, .3, .4), drafts [a] and [b]: the first token is a with p .30."""
    logits = torch.log(torch.tensor([[0.3, 0.3, 0.4], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25]]))
    tokens = np.array([2, 0, 1])
    parents = np.array([-1, 0, 0])
    n = 20_000
    firsts = {"ours": np.zeros(3), "biased": np.zeros(3)}
    for name, rule in (("ours", _accept), ("biased", _biased_accept)):
        sampler = TokenSampler(1.0, 1.0, seed=1234, device="cpu")
        for _ in range(n):
            path, bonus = rule(logits, tokens, parents, sampler)
            first = int(tokens[path[1]]) if len(path) > 1 else bonus
            firsts[name][first] += 1
    ours, biased = firsts["ours"] / n, firsts["biased"] / n
    assert abs(ours[0] - 0.30) < 0.015 and abs(ours[2] - 0.40) < 0.015
    assert abs(biased[0] - 0.45) < 0.015  # what the original's rule gives


def _first_token_counts(rule, logits: torch.Tensor, tree, n: int, seed: int, temperature: float) -> np.ndarray:
    sampler = TokenSampler(temperature, 1.0, seed=seed, device="cpu")
    counts = np.zeros(logits.shape[-1])
    for _ in range(n):
        path, bonus = rule(logits, tree.tokens, tree.parents, sampler)
        counts[int(tree.tokens[path[1]]) if len(path) > 1 else bonus] += 1
    return counts


def test_racer_sampling_matches_plain_sampling_and_the_test_has_power() -> None:
    """On a real draft tree verified by a tiny model: the first token RACER
    emits follows the model's distribution; the original rule's does not."""
    engine = engine_for("llama", markov=True)
    temperature = 1.5
    with torch.inference_mode():
        dec = engine.decoder()
        config = GenerationConfig(method="racer", max_num_draft=32)
        racer = RacerDrafter(DrafterSetup(engine.runtime.vocab_size))
        racer.configure(config)
        automaton = racer.automaton
        automaton.feed(PROMPT)
        last = dec._prefill(PROMPT, racer)
        tree = automaton.retrieve(int(last.argmax()), 32)
        assert tree.size > 8  # drafts to be biased towards
        base = len(dec.cached)
        logits = dec._forward(torch.from_numpy(tree.tokens), torch.from_numpy(tree.position_ids + base),
                              engine.runtime.masks.build(base, tree.attn_mask, tree.position_ids))
        n = 6000
        plain_sampler = TokenSampler(temperature, 1.0, seed=1, device="cpu")
        plain = np.zeros(logits.shape[-1])
        for _ in range(n):
            plain[plain_sampler.sample(logits[0])] += 1
        ours = _first_token_counts(_accept, logits, tree, n, seed=2, temperature=temperature)
        biased = _first_token_counts(_biased_accept, logits, tree, n, seed=3, temperature=temperature)
    assert _chi_square_p(plain, ours) > 0.01
    assert _chi_square_p(plain, biased) < 0.001


def test_sampled_replies_accept_drafts_and_follow_the_seed() -> None:
    engine = engine_for("llama", markov=True)
    config = GenerationConfig(method="racer", temperature=0.8, top_p=0.9, max_new_tokens=60, max_num_draft=16, seed=7)
    first = list(engine.decoder().generate(PROMPT, config))
    again = list(engine.decoder().generate(PROMPT, config))
    tokens = [t for s in first for t in s.tokens]
    assert tokens == [t for s in again for t in s.tokens]
    assert len(tokens) == 60 and len(first) < 60  # drafts were accepted


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1), st.sampled_from([torch.bfloat16, torch.float16, torch.float32]))
def test_greedy_choices_are_torch_argmax_ties_included(rows: int, seed: int, dtype: torch.dtype) -> None:
    """The fp32 detour of greedy_choices picks what argmax in the logits' own
    dtype picks, the first of tied maxima too (coarse dtypes tie often)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randint(-4, 4, (rows, 300), generator=gen).to(dtype) / 4  # few values: many ties
    assert greedy_choices(logits) == logits.argmax(dim=-1).tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**31 - 1), st.sampled_from([torch.bfloat16, torch.float16, torch.float32]))
def test_greedy_acceptance_walks_the_tree_by_each_rows_argmax(size: int, seed: int, dtype: torch.dtype) -> None:
    """Greedy acceptance on the CPU reads the rows along its path one by one:
    the path and bonus are the walk by all rows' argmax at once (ties: the first)."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    logits = torch.randint(0, 3, (size, 4), generator=gen).to(dtype)  # 4 tokens, 3 values: ties and long paths
    tokens = rng.integers(0, 4, size)
    parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, size)])
    choice = logits.argmax(dim=-1).tolist()
    path, node = [0], 0
    while True:
        nxt = [i for i in range(1, size) if parents[i] == node and tokens[i] == choice[node]]
        if not nxt:
            break
        node = nxt[-1]  # a repeated (parent, token) is the last such node, as acceptance indexes them
        path.append(node)
    assert _accept(logits, tokens, parents, TokenSampler(0.0, 1.0, None, "cpu")) == (path, choice[node])
