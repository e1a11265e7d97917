"""Sampling keeps the target distribution over several tokens, not only the
first (docs/design.md 1.5).

A tiny model over a 5-token vocabulary drafts a deep tree (depth >= 4) with
the real automaton and verifies it with the real tree forward pass. The first
K tokens of the reply (the step's accepted drafts and bonus, continued by
plain sampling when the step gave fewer than K) are compared with a
chi-square goodness-of-fit test against the exact joint distribution of the
model's own autoregressive sampling, computed from a plain forward pass over
every prefix.

A rule that retries a miss once below the root is exact for the first token,
so the first-token test in test_sampling.py cannot see it, yet favours drafts
deeper down; so is one that retries only at depth 3 (it biases the 4th token
alone). This test accepts the real rule on every seed and rejects both.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from racer_core.common.events import GenerationConfig
from racer_core.drafting.protocol import DrafterSetup
from racer_core.drafting.racer import RacerDrafter
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model
from racer_core.verify.sampling import TokenSampler
from racer_core.verify.sampling import accept as _accept

VOCAB = 5
K = 4  # tokens in the joint: 5**4 = 625 cells
TEMPERATURE = 1.5
DRAWS = 5000
ALPHA = 1e-3
MIN_EXPECTED = 5.0  # cells expected to hold fewer draws are pooled into one
Rule = Callable[[torch.Tensor, np.ndarray, np.ndarray, TokenSampler], tuple[list[int], int]]


@dataclass(frozen=True)
class _Case:
    tokens: np.ndarray  # the drafted tree, node 0 the root
    parents: np.ndarray
    depths: np.ndarray
    logits: torch.Tensor  # the tree forward pass, one row per node
    node_probs: np.ndarray  # the target distribution at each node (temperature applied)
    ar: dict[tuple[int, ...], np.ndarray]  # the plain-forward distribution after each prefix of < K tokens


def _sampler(seed: int) -> TokenSampler:
    return TokenSampler(TEMPERATURE, 1.0, seed=seed, device="cpu")


def tiny_engine() -> RacerEngine:
    return RacerEngine(tiny_model("llama", 0, vocab_size=VOCAB), None, "tiny-llama", eos_ids=frozenset())


def verified_case(engine: RacerEngine, prompt: list[int], root: int, tokens: np.ndarray, parents: np.ndarray,
                  depths: np.ndarray, ancestors: np.ndarray) -> _Case:
    """A drafted tree under `root` after `prompt`, verified by the real tree
    forward pass of a fresh decoder, with the plain-forward reference of every
    continuation of the root."""
    probs = _sampler(0).probabilities
    with torch.inference_mode():
        dec = engine.decoder()
        dec._prefill(prompt)
        base = len(dec.cached)
        logits = dec._forward(torch.from_numpy(tokens), torch.from_numpy(depths + base),
                              engine.runtime.masks.build(base, ancestors, depths))
        # The reference: no cache, no tree mask, every continuation of the root.
        tails = list(itertools.product(range(VOCAB), repeat=K - 1))
        plain = engine.model(input_ids=torch.tensor([[*prompt, root, *tail] for tail in tails])).logits[:, -K:]
        ar = {tail[:j]: probs(rows[j]).double().numpy() for tail, rows in zip(tails, plain, strict=True) for j in range(K)}
        node_probs = np.stack([probs(row).double().numpy() for row in logits])
    return _Case(tokens, parents, depths, logits, node_probs, ar)


@cache
def _case() -> _Case:
    engine = tiny_engine()
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, VOCAB, 24)]
    with torch.inference_mode():
        dec = engine.decoder()
        racer = RacerDrafter(DrafterSetup(engine.runtime.vocab_size))
        racer.configure(GenerationConfig(method="racer", max_num_draft=32))
        automaton = racer.automaton
        automaton.feed(prompt)
        root = int(dec._prefill(prompt, racer).argmax())
        tree = automaton.retrieve(root, 32)
    return verified_case(engine, prompt, root, tree.tokens, tree.parents, tree.position_ids, tree.attn_mask)


def _retrying(min_depth: int) -> Rule:
    """The real rule, except that a miss at a node of depth >= min_depth is
    sampled once more: a biased variant exact above that depth."""

    def rule(logits: torch.Tensor, tokens: np.ndarray, parents: np.ndarray, sampler: TokenSampler) -> tuple[list[int], int]:
        children = {(int(parents[i]), int(tokens[i])): i for i in range(1, len(tokens))}
        path = [0]
        while True:
            node = path[-1]
            token = sampler.sample(logits[node])
            nxt = children.get((node, token))
            if nxt is None and len(path) - 1 >= min_depth:
                token = sampler.sample(logits[node])
                nxt = children.get((node, token))
            if nxt is None:
                return path, token
            path.append(nxt)

    return rule


def _exact_joint(case: _Case, retry_depth: int | None) -> np.ndarray:
    """P(first K tokens) under the real rule (retry_depth None) or the variant,
    by enumerating the walk: at a node with miss mass m the variant moves to a
    child c with p(c)(1 + m) and ends with a bonus t with m p(t)."""
    out = np.zeros(VOCAB**K)
    kids: dict[int, dict[int, int]] = {}
    for i in range(1, len(case.tokens)):
        kids.setdefault(int(case.parents[i]), {})[int(case.tokens[i])] = i

    def plain(prefix: tuple[int, ...], mass: float) -> None:
        if len(prefix) == K:
            out[np.ravel_multi_index(prefix, (VOCAB,) * K)] += mass
            return
        for t, p in enumerate(case.ar[prefix]):
            plain((*prefix, t), mass * p)

    def walk(node: int, prefix: tuple[int, ...], mass: float) -> None:
        if len(prefix) == K:
            plain(prefix, mass)
            return
        p, children = case.node_probs[node], kids.get(node, {})
        miss = 1.0 - sum(p[t] for t in children)
        retry = retry_depth is not None and case.depths[node] >= retry_depth
        for t in range(VOCAB):
            if t in children:
                walk(children[t], (*prefix, t), mass * p[t] * (1 + miss if retry else 1))
            else:
                plain((*prefix, t), mass * p[t] * (miss if retry else 1))

    walk(0, (), 1.0)
    return out


def _ar_joint(case: _Case) -> np.ndarray:
    return np.array([np.prod([case.ar[c[:j]][c[j]] for j in range(K)])
                     for c in itertools.product(range(VOCAB), repeat=K)])


def _draw(case: _Case, rule: Rule, seed: int) -> np.ndarray:
    """Counts of the first K tokens over DRAWS verifications of the tree."""
    sampler = _sampler(seed)
    counts = np.zeros(VOCAB**K)
    for _ in range(DRAWS):
        path, bonus = rule(case.logits, case.tokens, case.parents, sampler)
        out = [int(case.tokens[i]) for i in path[1:]] + [bonus]
        while len(out) < K:  # the steps after this one: plain sampling is exact
            p = torch.from_numpy(case.ar[tuple(out)])
            out.append(int(torch.multinomial(p, 1, generator=sampler.generator)))
        counts[np.ravel_multi_index(out[:K], (VOCAB,) * K)] += 1
    return counts


def _pooled(expected: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Merge the cells expected to hold fewer than MIN_EXPECTED draws."""
    keep = expected * DRAWS >= MIN_EXPECTED
    return lambda v: np.append(v[..., keep], v[..., ~keep].sum(axis=-1, keepdims=True), axis=-1)


def _chi2_sf(stat: float, dof: int) -> float:
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def _critical(dof: int) -> float:
    lo, hi = 0.0, 10.0 * dof + 100.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_sf(mid, dof) > ALPHA else (lo, mid)
    return hi


def _statistic(counts: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Pearson's chi-square of counts (any leading shape) against probabilities."""
    e = expected * DRAWS
    return (((counts - e) ** 2) / e).sum(axis=-1)


def test_the_tree_is_deep_and_the_variants_are_exact_at_the_root() -> None:
    case = _case()
    assert case.depths.max() >= K and len(case.tokens) == 32
    exact = _ar_joint(case)
    # The tree forward pass and the rule, enumerated, give the plain joint.
    assert np.abs(_exact_joint(case, None) - exact).max() < 1e-6
    first = exact.reshape(VOCAB, -1).sum(axis=1)
    for depth, tv_at_least in ((1, 0.1), (3, 0.02)):
        biased = _exact_joint(case, depth)
        assert abs(biased.sum() - 1) < 1e-6  # float32 node probabilities
        assert np.abs(biased.reshape(VOCAB, -1).sum(axis=1) - first).max() < 1e-6
        assert 0.5 * np.abs(biased - exact).sum() > tv_at_least


def test_the_joint_of_the_first_tokens_follows_plain_sampling_and_the_test_has_power() -> None:
    case = _case()
    exact = _ar_joint(case)
    pool = _pooled(exact)
    p = pool(exact)
    dof = len(p) - 1
    critical = _critical(dof)
    # Power, from the variants' exact joints: the share of simulated runs of
    # DRAWS draws the test rejects. Measured: 169 cells after pooling, dof 168,
    # critical value 230; the expected statistic is 2085 for the below-root
    # variant and 389 for the depth-3 one (power 1.0 for both over 2000
    # simulated runs), while the real rule is rejected in 0.05% of them.
    rng = np.random.default_rng(0)
    for depth in (1, 3):
        q = pool(_exact_joint(case, depth))
        simulated = rng.multinomial(DRAWS, q, size=2000)
        assert dof + DRAWS * (((q - p) ** 2) / p).sum() > 1.5 * critical
        assert (_statistic(simulated, p) > critical).mean() > 0.99
    assert (_statistic(rng.multinomial(DRAWS, p, size=2000), p) > critical).mean() < 0.01

    for seed in (1, 2, 3, 4, 5):
        stat = _statistic(pool(_draw(case, _accept, seed)), p)
        assert _chi2_sf(stat, dof) > ALPHA, (seed, stat, critical)
    for rule, seed in ((_retrying(1), 6), (_retrying(3), 7), (_retrying(3), 8)):
        stat = _statistic(pool(_draw(case, rule, seed)), p)
        assert _chi2_sf(stat, dof) < ALPHA, (seed, stat, critical)
