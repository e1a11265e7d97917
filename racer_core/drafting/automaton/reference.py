"""Pure-Python reference automaton: docs/automaton.md, written for clarity.

The compiled `Automaton` must give identical results; the property tests drive
both with the same random operations. Where the two could implement a step
differently (finding the nodes whose failure link a new node takes over), this
one follows the page literally so that the comparison checks two algorithms.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from racer_core.drafting.automaton import _checks as C
from racer_core.drafting.automaton.draft import DraftTree

ROOT = 0


class ReferenceAutomaton:
    """Aho-Corasick n-gram trie with LRU leaf eviction, plus the copy-logit table."""

    def __init__(
        self,
        max_nodes: int = 10000,
        min_depth: int = 2,
        ngram: int = 10,
        *,
        _variant: tuple[bool, bool] = (False, True),
    ) -> None:
        # _variant: (late_halving, pair_rows), set through racer_core.drafting.automaton.variants only
        late_halving, pair_rows = _variant
        self._max_nodes = C.check_param("max_nodes", max_nodes, 2)
        self._min_depth = C.check_param("min_depth", min_depth, 1)
        self._ngram = C.check_param("ngram", ngram, 1)
        self._late_halving = C.check_flag("late_halving", late_halving)
        self._pair_rows = C.check_flag("pair_rows", pair_rows)
        self._vocab_size: int | None = None
        self._top_k: int | None = None
        self._rows: list[tuple[int, ...] | None] = []
        # (previous token, token) -> row, least recently written first; at most
        # vocab_size of them, like the token rows.
        self._pairs: OrderedDict[tuple[int, int], tuple[int, ...]] = OrderedDict()
        self._history: list[int] = []
        self._clear_trie()

    # ----------------------------------------------------------------- state

    def _clear_trie(self) -> None:
        self._token = [-1]
        self._depth = [0]
        self._parent = [-1]
        self._freq = [0]
        self._fail = [ROOT]
        self._children: list[dict[int, int]] = [{}]
        self._stamp = [0]
        self._alive = [True]
        self._rev: list[set[int]] = [set()]  # nodes failing to a non-root node
        self._root_rev: dict[int, set[int]] = {}  # nodes failing to the root, by token
        self._free: list[int] = []
        self._count = 1
        self._clock = 0
        self._leaf_heap: list[tuple[int, int]] = []  # (stamp, id), stale entries skipped
        self._state = ROOT

    @property
    def max_nodes(self) -> int:
        return self._max_nodes

    @property
    def min_depth(self) -> int:
        return self._min_depth

    @property
    def ngram(self) -> int:
        return self._ngram

    @property
    def late_halving(self) -> bool:
        return self._late_halving

    @property
    def pair_rows(self) -> bool:
        return self._pair_rows

    @property
    def pair_count(self) -> int:
        """How many (previous token, token) rows the table holds."""
        return len(self._pairs)

    @property
    def vocab_size(self) -> int | None:
        return self._vocab_size

    @property
    def top_k(self) -> int | None:
        return self._top_k

    @property
    def node_count(self) -> int:
        return self._count

    def _bound(self) -> int:
        return C.TOKEN_LIMIT if self._vocab_size is None else self._vocab_size

    # ------------------------------------------------------ failure-link lists

    def _link(self, q: int, target: int) -> None:
        self._fail[q] = target
        if target == ROOT:
            self._root_rev.setdefault(self._token[q], set()).add(q)
        else:
            self._rev[target].add(q)

    def _unlink(self, q: int) -> None:
        target = self._fail[q]
        if target == ROOT:
            group = self._root_rev[self._token[q]]
            group.discard(q)
            if not group:
                del self._root_rev[self._token[q]]
        else:
            self._rev[target].discard(q)

    def _ends_with(self, q: int, p: int) -> bool:
        while p != ROOT:
            if self._token[q] != self._token[p]:
                return False
            q, p = self._parent[q], self._parent[p]
        return True

    # ------------------------------------------------------------- mutation

    def _touch(self, n: int) -> None:
        self._clock += 1
        self._stamp[n] = self._clock
        if not self._children[n]:
            heapq.heappush(self._leaf_heap, (self._clock, n))

    def _is_leaf_entry(self, stamp: int, n: int) -> bool:
        return n != ROOT and self._alive[n] and not self._children[n] and self._stamp[n] == stamp

    def _lru_leaf(self, cur: int) -> int | None:
        """The leaf with the smallest stamp other than cur and the matcher state."""
        kept: list[tuple[int, int]] = []
        found = None
        while self._leaf_heap:
            stamp, n = heapq.heappop(self._leaf_heap)
            if not self._is_leaf_entry(stamp, n):
                continue
            if n == cur or n == self._state:
                kept.append((stamp, n))
                continue
            found = n
            break
        for entry in kept:
            heapq.heappush(self._leaf_heap, entry)
        return found

    def _evict(self, x: int) -> None:
        target = self._fail[x]
        for q in list(self._rev[x]):
            self._link(q, target)
        self._rev[x] = set()
        self._unlink(x)
        parent = self._parent[x]
        del self._children[parent][self._token[x]]
        if parent != ROOT and not self._children[parent]:
            heapq.heappush(self._leaf_heap, (self._stamp[parent], parent))
        self._alive[x] = False
        self._children[x] = {}
        self._token[x] = -1
        self._parent[x] = -1
        self._free.append(x)
        self._count -= 1

    def _failure_target(self, u: int, a: int) -> int:
        """The failure target of a node with token a under u: the first node
        on u's failure chain with a child a (that child), else the root."""
        if u == ROOT:
            return ROOT
        f = self._fail[u]
        while True:
            c = self._children[f].get(a)
            if c is not None:
                return c
            if f == ROOT:
                return ROOT
            f = self._fail[f]

    def _create(self, u: int, a: int) -> int:
        if self._free:
            p = self._free.pop()
        else:
            p = len(self._token)
            self._token.append(-1)
            self._depth.append(0)
            self._parent.append(-1)
            self._freq.append(0)
            self._fail.append(ROOT)
            self._children.append({})
            self._stamp.append(0)
            self._alive.append(False)
            self._rev.append(set())
        self._token[p] = a
        self._depth[p] = self._depth[u] + 1
        self._parent[p] = u
        self._freq[p] = 0
        self._stamp[p] = 0
        self._alive[p] = True
        self._children[p] = {}
        self._rev[p] = set()
        self._count += 1
        # Failure link: longest proper suffix of the new path that is a trie path.
        target = self._failure_target(u, a)
        self._children[u][a] = p
        self._link(p, target)
        # Redirect deeper nodes ending with the new path whose link is shallower:
        # they fail to a node of p's failure chain (all shallower than p).
        g = target
        while True:
            group = self._rev[g] if g != ROOT else self._root_rev.get(a, set())
            for q in list(group):
                if self._depth[q] > self._depth[p] and self._ends_with(q, p):
                    self._unlink(q)
                    self._link(q, p)
            if g == ROOT:
                break
            g = self._fail[g]
        return p

    def _insert(self, pattern: list[int], freq: int) -> None:
        cur = ROOT
        for a in pattern:
            c = self._children[cur].get(a)
            if c is None:
                if self._count >= self._max_nodes:
                    victim = self._lru_leaf(cur)
                    if victim is None:
                        return
                    self._evict(victim)
                c = self._create(cur, a)
            self._freq[c] = min(self._freq[c] + freq, C.FREQ_MAX)
            self._touch(c)
            cur = c

    def _add(self, tokens: list[int]) -> None:
        keep = self._ngram - 1
        for t in tokens:
            window = (self._history + [t])[-self._ngram :]
            self._insert(window, 1)
            self._history = window[-keep:] if keep else []

    def _trans(self, tokens: list[int]) -> None:
        s = self._state
        for a in tokens:
            while s != ROOT and a not in self._children[s]:
                s = self._fail[s]
            s = self._children[s].get(a, ROOT)
        self._state = s

    # ----------------------------------------------------------- public API

    def insert(self, pattern: Any, freq: int = 1) -> None:
        """Insert one token path, adding freq to every node on it."""
        tokens = C.check_tokens("pattern", pattern, self._bound())
        f = C.check_freq(freq)
        self._insert(tokens, f)

    def add_tokens(self, tokens: Any) -> None:
        """Append tokens to the history; insert the n-gram ending at each."""
        self._add(C.check_tokens("tokens", tokens, self._bound()))

    def trans_tokens(self, tokens: Any) -> None:
        """Advance the matcher state over tokens."""
        self._trans(C.check_tokens("tokens", tokens, self._bound()))

    def feed(self, tokens: Any) -> None:
        """add_tokens then trans_tokens with the same tokens."""
        values = C.check_tokens("tokens", tokens, self._bound())
        self._add(values)
        self._trans(values)

    def reset(self) -> None:
        """Matcher state back to the root; trie, history and table stay."""
        self._state = ROOT

    def build(self) -> None:
        """Recompute every failure link breadth-first (already maintained incrementally)."""
        self._rev = [set() for _ in self._token]
        self._root_rev = {}
        order = deque(self._children[ROOT].values())
        while order:
            n = order.popleft()
            self._link(n, self._failure_target(self._parent[n], self._token[n]))
            order.extend(self._children[n].values())

    def init_logits(self, vocab_size: int, top_k: int) -> None:
        """Create the logits table; every row empty."""
        v, k = C.check_table(vocab_size, top_k)
        self._vocab_size, self._top_k = v, k
        self._rows = [None] * v
        self._pairs = OrderedDict()

    def update(self, token_ids: Any, topk_ids: Any, prev_ids: Any = None) -> None:
        """Row token_ids[i] becomes topk_ids[i]; so does the row of the pair
        (prev_ids[i], token_ids[i]) where prev_ids[i] >= 0 (and pair_rows)."""
        if self._vocab_size is None or self._top_k is None:
            raise RuntimeError("update called before init_logits")
        ids = C.check_tokens("token_ids", token_ids, self._vocab_size)
        # Row entries may reach past the vocabulary: such tokens have no row.
        rows = C.check_rows("topk_ids", topk_ids, len(ids), self._top_k, C.TOKEN_LIMIT)
        prev = [-1] * len(ids) if prev_ids is None else C.check_prev("prev_ids", prev_ids, len(ids), self._vocab_size)
        for t, row, p in zip(ids, rows, prev, strict=True):
            self._rows[t] = tuple(row)
            if p >= 0 and self._pair_rows:
                key = (p, t)
                self._pairs.pop(key, None)
                if len(self._pairs) >= self._vocab_size:
                    self._pairs.popitem(last=False)  # the least recently written pair
                self._pairs[key] = tuple(row)

    def _row(self, prev: int, token: int) -> tuple[int, ...] | None:
        """The pair's row if there is one, else the token's."""
        row = self._pairs.get((prev, token)) if prev >= 0 else None
        if row is None and token < len(self._rows):
            row = self._rows[token]
        return row

    def retrieve(
        self, next_token: int, max_num_draft: int = 64, is_chain: bool = False, prev_token: int = -1
    ) -> DraftTree:
        """Draft tree below next_token (whose previous token is prev_token, -1
        if unknown): retrieval paths first, then the logits tree."""
        root_token = C.check_token("next_token", next_token, C.TOKEN_LIMIT)
        budget = C.check_budget(max_num_draft)
        chain = C.check_flag("is_chain", is_chain)
        root_prev = C.check_token("prev_token", prev_token, C.TOKEN_LIMIT, lowest=-1)
        tok = [root_token]
        par = [-1]
        dep = [0]
        kids: list[list[int]] = [[]]
        src = [0]
        ctxs = [0]
        ranks = [-1]
        shares = [-1.0]

        def add(parent: int, token: int, source: int, ctx: int = 0, rank: int = -1, share: float = -1.0) -> int:
            ctxs.append(ctx)
            ranks.append(rank)
            shares.append(share)
            tok.append(token)
            par.append(parent)
            dep.append(dep[parent] + 1)
            kids.append([])
            src.append(source)
            kids[parent].append(len(tok) - 1)
            return len(tok) - 1

        # Retrieval: borders along the failure chain of the state.
        borders = []
        u = self._state
        while True:
            c = self._children[u].get(root_token)
            if c is not None and self._depth[c] >= self._min_depth:
                borders.append((c, self._depth[c]))
            if u == ROOT:
                break
            u = self._fail[u]
        heap: list[tuple[int, int, int, int, int, list[tuple[int, int]]]] = []

        def expand(n: int, contributors: list[tuple[int, int]]) -> None:
            groups: dict[int, list[Any]] = {}
            for x, ctx in contributors:
                siblings = 0
                for ch in self._children[x].values():
                    siblings = min(siblings + self._freq[ch], C.FREQ_MAX)
                for a, ch in self._children[x].items():
                    g = groups.setdefault(a, [0, 0, [], -1.0])
                    # the share in the deepest context offering a (the larger breaks a tie)
                    share = float(self._freq[ch]) / float(siblings) if siblings > 0 else 0.0
                    if ctx > g[0] or (ctx == g[0] and share > g[3]):
                        g[3] = share
                    g[0] = max(g[0], ctx)
                    g[1] = min(g[1] + self._freq[ch], C.FREQ_MAX)
                    g[2].append((ch, ctx))
            for a, (ctx, freq, contribs, share) in groups.items():
                heapq.heappush(heap, (-ctx, -freq, dep[n] + 1, n, a, contribs, share))

        expand(0, borders)
        while heap and len(tok) < budget:
            neg_ctx, _, _, parent, a, contribs, share = heapq.heappop(heap)
            if chain and kids[parent]:
                continue
            expand(add(parent, a, 1, -neg_ctx, share=share), contribs)

        # Logits tree (Eq. 3, Figure 9): the root's child of rank i gets breadth
        # k >> i; below it a node of breadth b gives its rank-i child (b >> 1) >> i.
        # late_halving keeps the older rule: the root's b is halved, depth 1's is not.
        if self._top_k is not None:
            k = self._top_k
            keep_depth = 1 if self._late_halving else 0
            fifo = deque([(0, 1 if chain else k, 0)])
            while fifo and len(tok) < budget:
                n, b, d = fifo.popleft()
                row = self._row(tok[par[n]] if n else root_prev, tok[n])
                if row is None:
                    continue
                b2 = b if d == keep_depth else b >> 1
                for i in range(min(b, k)):
                    if len(tok) >= budget:
                        break
                    t = row[i]
                    if t in row[:i]:
                        continue  # a repeated token: every node is queued at most once
                    child = next((c for c in kids[n] if tok[c] == t), None)
                    if child is not None:
                        src[child] |= 2
                        if ranks[child] < 0:
                            ranks[child] = i
                    elif chain and kids[n]:
                        continue  # keep a chain a chain
                    else:
                        child = add(n, t, 2, 0, i)
                    fifo.append((child, max(1, b2 >> i), d + 1))

        return _flatten(tok, par, dep, kids, src, ctxs, ranks, shares)

    # ---------------------------------------------------------- test helpers

    def _path(self, n: int) -> tuple[int, ...]:
        out = []
        while n != ROOT:
            out.append(self._token[n])
            n = self._parent[n]
        return tuple(reversed(out))

    def snapshot(self) -> dict[tuple[int, ...], tuple[int, tuple[int, ...]]]:
        """{path: (freq, failure-link path)} for every non-root node."""
        out = {}
        order = deque(self._children[ROOT].values())
        while order:
            n = order.popleft()
            out[self._path(n)] = (self._freq[n], self._path(self._fail[n]))
            order.extend(self._children[n].values())
        return out

    def pair_snapshot(self) -> list[tuple[tuple[int, int], tuple[int, ...]]]:
        """[((prev, token), row)] for every pair row, least recently written first."""
        return list(self._pairs.items())

    def state_path(self) -> tuple[int, ...]:
        """Tokens of the matcher state's path."""
        return self._path(self._state)


def _flatten(
    tok: list[int], par: list[int], dep: list[int], kids: list[list[int]], src: list[int], ctxs: list[int],
    ranks: list[int], shares: list[float],
) -> DraftTree:
    order = [0]
    for n in order:  # grows while iterating: breadth-first
        order.extend(kids[n])
    index = {n: i for i, n in enumerate(order)}
    t = len(order)
    tokens = np.array([tok[n] for n in order], dtype=np.int64)
    depth = np.array([dep[n] for n in order], dtype=np.int64)
    parents = np.array([index[par[n]] if par[n] >= 0 else -1 for n in order], dtype=np.int64)
    sources = np.array([src[n] for n in order], dtype=np.uint8)
    context = np.array([ctxs[n] for n in order], dtype=np.int64)
    rank = np.array([ranks[n] for n in order], dtype=np.int64)
    share = np.array([shares[n] for n in order], dtype=np.float64)
    mask = np.zeros((t, t), dtype=bool)
    for i in range(t):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = int(parents[j])
    leaves = [i for i, n in enumerate(order) if not kids[n]]
    width = int(depth.max()) + 1
    ri = np.full((len(leaves), width), -1, dtype=np.int64)
    cand = np.full((len(leaves), width), -1, dtype=np.int64)
    for r, leaf in enumerate(leaves):
        path = []
        j = leaf
        while j >= 0:
            path.append(j)
            j = int(parents[j])
        path.reverse()
        ri[r, : len(path)] = path
        cand[r, : len(path)] = tokens[path]
    return DraftTree(tokens, depth, parents, sources, mask, ri, cand, context, rank, share)
