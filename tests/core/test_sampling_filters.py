"""top_k, min_p and the repetition penalties stay exact under tree
verification (docs/design.md 1.5).

Each node of a verified tree samples from its own row after the processors,
so the first K tokens of a reply must follow plain sampling's joint with the
same processors. The tree and the chi-square machinery are
test_sampling_joint's; here the sampler cuts the distribution: every draw must
fall inside the cut (a walk that skipped the processors at some node would
land outside it) and the counts must fit the exact joint. Penalties depend on
the text before each token: every node's row is penalized for its own path.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from test_sampling_joint import (
    DRAWS,
    VOCAB,
    K,
    _case,
    _chi2_sf,
    _pooled,
    _statistic,
    tiny_engine,
)

from racer_core.verify.penalties import Penalties
from racer_core.verify.sampling import TokenSampler
from racer_core.verify.sampling import accept as _accept

TEMPERATURE = 1.5
ALPHA = 1e-3
FILTERS = {"top_k": {"top_k": 2}, "min_p": {"min_p": 0.3}, "both": {"top_k": 3, "min_p": 0.2},
           "penalties": {"penalties": Penalties(frequency=1.5, presence=0.5, repetition=1.3)}}
CUTS = ("top_k", "min_p", "both")


def _plain_rows(tree_root: int) -> dict[tuple[int, ...], torch.Tensor]:
    """The plain forward pass's logits after every prefix of < K tokens below the root."""
    engine = tiny_engine()
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, VOCAB, 24)]  # as _case()
    tails = list(itertools.product(range(VOCAB), repeat=K - 1))
    with torch.inference_mode():
        plain = engine.model(input_ids=torch.tensor([[*prompt, tree_root, *tail] for tail in tails])).logits[:, -K:]
    return {tail[:j]: rows[j] for tail, rows in zip(tails, plain, strict=True) for j in range(K)}


def _paths(tokens: np.ndarray, parents: np.ndarray) -> list[tuple[int, ...]]:
    """Each node's tokens below the root."""
    out: list[tuple[int, ...]] = [()]
    for i in range(1, len(tokens)):
        out.append((*out[int(parents[i])], int(tokens[i])))
    return out


@pytest.mark.parametrize("name", list(FILTERS))
def test_filtered_sampling_keeps_plain_samplings_joint(name: str) -> None:
    case = _case()
    root = int(case.tokens[0])
    rows = _plain_rows(root)
    sampler = TokenSampler(TEMPERATURE, 1.0, seed=11, device="cpu", **FILTERS[name])
    unfiltered = TokenSampler(TEMPERATURE, 1.0, seed=0, device="cpu")
    # the reply so far is the root (the prompt is not penalized here, so that every token's penalty depends on the path)
    ar = {prefix: sampler.probabilities(sampler.penalized(row, [root, *prefix])).double().numpy()
          for prefix, row in rows.items()}
    # every node's processed row is plain decoding's at the same prefix, and the filter cut it
    for node, prefix in enumerate(_paths(case.tokens, case.parents)):
        if len(prefix) < K:
            probs = sampler.probabilities(sampler.penalized(case.logits[node], [root, *prefix])).double().numpy()
            assert np.abs(probs - ar[prefix]).max() < 1e-5
            plain = unfiltered.probabilities(case.logits[node]).double().numpy()
            if name in CUTS:
                assert (probs > 0).sum() < (plain > 0).sum()
            else:
                assert np.abs(probs - plain).max() > 0.01
    exact = np.array([np.prod([ar[c[:j]][c[j]] for j in range(K)])
                      for c in itertools.product(range(VOCAB), repeat=K)])
    if name in CUTS:
        assert (exact == 0).sum() > VOCAB**K / 2  # the cut leaves most sequences impossible

    counts = np.zeros(VOCAB**K)
    for _ in range(DRAWS):
        path, bonus = _accept(case.logits, case.tokens, case.parents, sampler, [root])
        out = [int(case.tokens[i]) for i in path[1:]] + [bonus]
        while len(out) < K:  # the steps after this one: plain sampling with the same processors
            p = torch.from_numpy(ar[tuple(out)])
            out.append(int(torch.multinomial(p, 1, generator=sampler.generator)))
        counts[np.ravel_multi_index(out[:K], (VOCAB,) * K)] += 1
    assert counts[exact == 0].sum() == 0  # no draw outside what the processors allow
    pool = _pooled(exact[exact > 0])
    p, seen = pool(exact[exact > 0]), pool(counts[exact > 0])
    if p[-1] == 0:  # no cell was pooled
        p, seen = p[:-1], seen[:-1]
    stat = float(_statistic(seen, p))
    assert _chi2_sf(stat, len(p) - 1) > ALPHA, (name, stat)
