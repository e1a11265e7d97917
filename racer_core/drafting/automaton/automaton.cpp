// Implementation of racer::Automaton; see automaton.hpp and docs/automaton.md.
#include "automaton.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace racer {

namespace {
constexpr int64_t kFreqMax = std::numeric_limits<int64_t>::max();

int64_t add_sat(int64_t a, int64_t b) { return a > kFreqMax - b ? kFreqMax : a + b; }
}  // namespace

// ------------------------------------------------------------------- IdMap

IdMap::IdMap() { clear(); }

void IdMap::clear() {
  keys_.assign(64, kEmpty);
  values_.assign(64, -1);
  mask_ = 63;
  shift_ = 64 - 6;
  count_ = 0;
}

size_t IdMap::slot(uint64_t key) const {
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
}

int32_t IdMap::find(uint64_t key) const {
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    const uint64_t k = keys_[i];
    if (k == key) return values_[i];
    if (k == kEmpty) return -1;
  }
}

void IdMap::put(uint64_t key, int32_t value) {
  if ((count_ + 1) * 2 > keys_.size()) grow();
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    if (keys_[i] == key) {
      values_[i] = value;
      return;
    }
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      values_[i] = value;
      ++count_;
      return;
    }
  }
}

void IdMap::erase(uint64_t key) {
  size_t i = slot(key);
  for (;; i = (i + 1) & mask_) {
    if (keys_[i] == kEmpty) return;
    if (keys_[i] == key) break;
  }
  // Backward shift: pull later entries of the probe run into the hole unless
  // their home slot lies cyclically in (hole, j].
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (keys_[j] == kEmpty) break;
    const size_t home = slot(keys_[j]);
    const bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      keys_[i] = keys_[j];
      values_[i] = values_[j];
      i = j;
    }
  }
  keys_[i] = kEmpty;
  values_[i] = -1;
  --count_;
}

void IdMap::grow() {
  std::vector<uint64_t> old_keys;
  std::vector<int32_t> old_values;
  old_keys.swap(keys_);
  old_values.swap(values_);
  const size_t cap = old_keys.size() * 2;
  keys_.assign(cap, kEmpty);
  values_.assign(cap, -1);
  mask_ = cap - 1;
  --shift_;
  count_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i)
    if (old_keys[i] != kEmpty) put(old_keys[i], old_values[i]);
}

// --------------------------------------------------------------- Automaton

Automaton::Automaton(int32_t max_nodes, int32_t min_depth, int32_t ngram, bool late_halving,
                     bool pair_rows)
    : max_nodes_(std::max(max_nodes, 2)),
      min_depth_(std::max(min_depth, 1)),
      ngram_(std::max(ngram, 1)),
      keep_depth_(late_halving ? 1 : 0),
      pair_rows_(pair_rows) {
  Node root{};
  root.token = -1;
  root.depth = 0;
  root.parent = -1;
  root.fail = 0;
  root.first_child = root.next_sib = root.prev_sib = -1;
  root.rev_head = root.rev_next = root.rev_prev = -1;
  root.rev_count = root.group_size = 0;
  root.freq = 0;
  root.stamp = 0;
  nodes_.push_back(root);
}

void Automaton::init_logits(int32_t vocab_size, int32_t top_k) {
  table_.reset(new int32_t[static_cast<size_t>(vocab_size) * top_k]);  // not zeroed: see table_
  std::vector<uint8_t> written(static_cast<size_t>(vocab_size), 0);
  written_.swap(written);
  vocab_size_ = vocab_size;
  top_k_ = top_k;
  pair_index_.clear();
  std::vector<int32_t>().swap(pair_table_);
  std::vector<uint64_t>().swap(pair_key_);
  std::vector<int32_t>().swap(pair_older_);
  std::vector<int32_t>().swap(pair_newer_);
  pair_oldest_ = pair_newest_ = -1;
}

void Automaton::update(const int64_t* token_ids, int64_t n, const int64_t* rows,
                       const int64_t* prev) {
  const size_t k = static_cast<size_t>(top_k_);
  for (int64_t i = 0; i < n; ++i) {
    const size_t t = static_cast<size_t>(token_ids[i]);
    const int64_t* src = &rows[static_cast<size_t>(i) * k];
    int32_t* row = &table_[t * k];
    for (size_t j = 0; j < k; ++j) row[j] = static_cast<int32_t>(src[j]);
    written_[t] = 1;
    if (prev != nullptr && prev[i] >= 0 && pair_rows_)
      write_pair(static_cast<int32_t>(prev[i]), static_cast<int32_t>(t), src);
  }
}

void Automaton::write_pair(int32_t prev, int32_t token, const int64_t* row) {
  const uint64_t key = child_key(prev, token);
  int32_t s = pair_index_.find(key);
  if (s >= 0) {  // unlink: it becomes the newest below
    const int32_t o = pair_older_[s], w = pair_newer_[s];
    (o >= 0 ? pair_newer_[o] : pair_oldest_) = w;
    (w >= 0 ? pair_older_[w] : pair_newest_) = o;
  } else if (static_cast<int32_t>(pair_key_.size()) < vocab_size_) {
    s = static_cast<int32_t>(pair_key_.size());
    pair_key_.push_back(key);
    pair_older_.push_back(-1);
    pair_newer_.push_back(-1);
    pair_table_.resize(pair_table_.size() + static_cast<size_t>(top_k_));
    pair_index_.put(key, s);
  } else {  // full: the least recently written pair gives up its slot
    s = pair_oldest_;
    pair_oldest_ = pair_newer_[s];
    if (pair_oldest_ >= 0)
      pair_older_[pair_oldest_] = -1;
    else
      pair_newest_ = -1;
    pair_index_.erase(pair_key_[s]);
    pair_key_[s] = key;
    pair_index_.put(key, s);
  }
  pair_older_[s] = pair_newest_;
  pair_newer_[s] = -1;
  (pair_newest_ >= 0 ? pair_newer_[pair_newest_] : pair_oldest_) = s;
  pair_newest_ = s;
  int32_t* dst = &pair_table_[static_cast<size_t>(s) * top_k_];
  for (int32_t j = 0; j < top_k_; ++j) dst[j] = static_cast<int32_t>(row[j]);
}

const int32_t* Automaton::row_of(int32_t prev, int32_t token) const {
  if (prev >= 0 && prev < vocab_size_ && token < vocab_size_) {
    const int32_t s = pair_index_.find(child_key(prev, token));
    if (s >= 0) return &pair_table_[static_cast<size_t>(s) * top_k_];
  }
  // A token at or above vocab_size (a row may hold one) has no row.
  if (token >= vocab_size_ || !written_[token]) return nullptr;
  return &table_[static_cast<size_t>(token) * top_k_];
}

// ---- reverse failure lists: every non-root node sits in exactly one list,
// that of its failure target, or for the root target the group of its token.

void Automaton::rev_link(int32_t q, int32_t target) {
  Node& n = nodes_[q];
  n.fail = target;
  n.rev_prev = -1;
  if (target == 0) {
    const uint64_t key = static_cast<uint32_t>(n.token);
    const int32_t head = root_group_.find(key);
    n.rev_next = head;
    n.group_size = 1;
    if (head >= 0) {
      nodes_[head].rev_prev = q;
      n.group_size += nodes_[head].group_size;
    }
    root_group_.put(key, q);
  } else {
    const int32_t head = nodes_[target].rev_head;
    n.rev_next = head;
    if (head >= 0) nodes_[head].rev_prev = q;
    nodes_[target].rev_head = q;
    ++nodes_[target].rev_count;
  }
}

void Automaton::rev_unlink(int32_t q) {
  Node& n = nodes_[q];
  if (n.rev_next >= 0) nodes_[n.rev_next].rev_prev = n.rev_prev;
  if (n.fail == 0) {
    const uint64_t key = static_cast<uint32_t>(n.token);
    if (n.rev_prev >= 0) {
      nodes_[n.rev_prev].rev_next = n.rev_next;
      --nodes_[root_group_.find(key)].group_size;
    } else if (n.rev_next >= 0) {
      nodes_[n.rev_next].group_size = n.group_size - 1;
      root_group_.put(key, n.rev_next);
    } else {
      root_group_.erase(key);
    }
  } else {
    if (n.rev_prev >= 0)
      nodes_[n.rev_prev].rev_next = n.rev_next;
    else
      nodes_[n.fail].rev_head = n.rev_next;
    --nodes_[n.fail].rev_count;
  }
  n.rev_next = n.rev_prev = -1;
}

// ---- leaves ordered by stamp: a min-heap with lazy deletion. An entry is
// live iff its node is a live leaf whose stamp still equals the entry's.

void Automaton::push_leaf(int32_t id) {
  leaf_heap_.push_back({nodes_[id].stamp, id});
  std::push_heap(leaf_heap_.begin(), leaf_heap_.end(),
                 [](const LeafEntry& a, const LeafEntry& b) { return a.stamp > b.stamp; });
  // Stale entries accumulate; rebuild from the live leaves when they dominate.
  if (leaf_heap_.size() > 2 * static_cast<size_t>(count_) + 1024) compact_leaves();
}

void Automaton::compact_leaves() {
  leaf_heap_.clear();
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (alive(id) && is_leaf(id)) leaf_heap_.push_back({nodes_[id].stamp, id});
  }
  std::make_heap(leaf_heap_.begin(), leaf_heap_.end(),
                 [](const LeafEntry& a, const LeafEntry& b) { return a.stamp > b.stamp; });
}

int32_t Automaton::pop_lru_leaf(int32_t cur) {
  auto later = [](const LeafEntry& a, const LeafEntry& b) { return a.stamp > b.stamp; };
  kept_.clear();
  int32_t found = -1;
  while (!leaf_heap_.empty()) {
    std::pop_heap(leaf_heap_.begin(), leaf_heap_.end(), later);
    const LeafEntry e = leaf_heap_.back();
    leaf_heap_.pop_back();
    if (!alive(e.id) || !is_leaf(e.id) || nodes_[e.id].stamp != e.stamp) continue;
    if (e.id == cur || e.id == state_) {
      kept_.push_back(e);
      continue;
    }
    found = e.id;
    break;
  }
  for (const LeafEntry& e : kept_) {
    leaf_heap_.push_back(e);
    std::push_heap(leaf_heap_.begin(), leaf_heap_.end(), later);
  }
  return found;
}

void Automaton::touch(int32_t id) {
  nodes_[id].stamp = ++clock_;
  if (is_leaf(id)) push_leaf(id);
}

// ---- trie mutation

int32_t Automaton::failure_target(int32_t u, int32_t a) const {
  if (u == 0) return 0;
  for (int32_t f = nodes_[u].fail;; f = nodes_[f].fail) {
    const int32_t c = child(f, a);
    if (c >= 0) return c;
    if (f == 0) return 0;
  }
}

void Automaton::evict(int32_t x) {
  const int32_t target = nodes_[x].fail;
  // Nodes failing to x now fail to fail(x): x was their longest trie suffix,
  // so the next longest is x's own.
  rev_unlink(x);
  for (int32_t q = nodes_[x].rev_head; q >= 0;) {
    const int32_t next = nodes_[q].rev_next;
    rev_link(q, target);
    q = next;
  }
  Node& n = nodes_[x];
  n.rev_head = -1;
  n.rev_count = 0;
  const int32_t parent = n.parent;
  children_.erase(child_key(parent, n.token));
  if (n.prev_sib >= 0)
    nodes_[n.prev_sib].next_sib = n.next_sib;
  else
    nodes_[parent].first_child = n.next_sib;
  if (n.next_sib >= 0) nodes_[n.next_sib].prev_sib = n.prev_sib;
  n.parent = -1;
  n.token = -1;
  n.next_sib = n.prev_sib = -1;
  free_.push_back(x);
  --count_;
  if (parent != 0 && nodes_[parent].first_child < 0) push_leaf(parent);
}

bool Automaton::ends_with(int32_t q, int32_t u, int32_t a) const {
  if (nodes_[q].token != a) return false;
  for (q = nodes_[q].parent; u != 0; q = nodes_[q].parent, u = nodes_[u].parent)
    if (q <= 0 || nodes_[q].token != nodes_[u].token) return false;
  return true;
}

int64_t Automaton::chain_cost(int32_t target, int32_t a) const {
  int64_t cost = 0;
  for (int32_t g = target; g != 0; g = nodes_[g].fail) cost += nodes_[g].rev_count;
  const int32_t head = root_group_.find(static_cast<uint32_t>(a));
  return cost + (head >= 0 ? nodes_[head].group_size : 0);
}

// The nodes that new node p (path = path(u) + a) takes over are the children
// `a` of the nodes whose path ends with u's path: u's subtree in the failure
// tree. A node there that already has a child `a` shields its own subtree:
// those children end with that deeper child's path and already fail at least
// that deep. Gives up (returns false) after `limit` visits.
bool Automaton::redirect_by_failure_tree(int32_t u, int32_t a, int32_t p, int32_t depth,
                                         int64_t limit) {
  stack_.clear();
  for (int32_t r = nodes_[u].rev_head; r >= 0; r = nodes_[r].rev_next) stack_.push_back(r);
  int64_t visits = 0;
  while (!stack_.empty()) {
    if (++visits > limit) return false;
    const int32_t r = stack_.back();
    stack_.pop_back();
    const int32_t c = child(r, a);
    if (c >= 0) {
      if (nodes_[nodes_[c].fail].depth < depth) {
        rev_unlink(c);
        rev_link(c, p);
      }
    } else {
      for (int32_t s = nodes_[r].rev_head; s >= 0; s = nodes_[s].rev_next) stack_.push_back(s);
    }
  }
  return true;
}

// The page's formulation: such nodes fail to a node of p's failure chain
// (all shallower than p), so scan those nodes' reverse lists.
void Automaton::redirect_by_chain(int32_t u, int32_t a, int32_t p, int32_t depth,
                                  int32_t target) {
  for (int32_t g = target;; g = nodes_[g].fail) {
    int32_t q = g == 0 ? root_group_.find(static_cast<uint32_t>(a)) : nodes_[g].rev_head;
    while (q >= 0) {
      const int32_t next = nodes_[q].rev_next;
      if (nodes_[q].depth > depth && ends_with(q, u, a)) {
        rev_unlink(q);
        rev_link(q, p);
      }
      q = next;
    }
    if (g == 0) break;
  }
}

int32_t Automaton::create(int32_t u, int32_t a) {
  int32_t p;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {
    p = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  const int32_t target = failure_target(u, a);
  const int32_t depth = nodes_[u].depth + 1;
  nodes_[p].rev_head = -1;
  nodes_[p].rev_count = 0;

  // p is not linked anywhere yet, so neither walk meets it.
  if (u == 0) {
    // p = [a]: every node with token `a` failing to the root takes p.
    int32_t q = root_group_.find(static_cast<uint32_t>(a));
    if (q >= 0) {
      root_group_.erase(static_cast<uint32_t>(a));
      nodes_[p].rev_head = q;
      nodes_[p].rev_count = nodes_[q].group_size;
    }
    for (; q >= 0; q = nodes_[q].rev_next) nodes_[q].fail = p;
  } else if (redirect_mode_ == 2) {
    redirect_by_chain(u, a, p, depth, target);
  } else {
    // Either walk can be long (a common token heads a huge failure subtree or
    // a long reverse list); walk the failure tree up to about the chain's
    // cost, then fall back to the chain. Both only write correct final links.
    const int64_t limit = redirect_mode_ == 1   ? INT64_MAX
                          : redirect_mode_ == 3 ? 2  // tests: give up early, mix both walks
                                                : 2 * chain_cost(target, a) + 16;
    if (!redirect_by_failure_tree(u, a, p, depth, limit)) redirect_by_chain(u, a, p, depth, target);
  }

  Node& n = nodes_[p];
  n.token = a;
  n.depth = depth;
  n.parent = u;
  n.first_child = -1;
  n.prev_sib = -1;
  n.next_sib = nodes_[u].first_child;
  if (n.next_sib >= 0) nodes_[n.next_sib].prev_sib = p;
  nodes_[u].first_child = p;
  n.freq = 0;
  n.stamp = 0;
  children_.put(child_key(u, a), p);
  rev_link(p, target);
  ++count_;
  return p;
}

void Automaton::insert_one(const int64_t* pattern, int64_t n, int64_t freq) {
  int32_t cur = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = static_cast<int32_t>(pattern[i]);
    int32_t c = child(cur, a);
    if (c < 0) {
      if (count_ >= max_nodes_) {
        const int32_t victim = pop_lru_leaf(cur);
        if (victim < 0) return;
        evict(victim);
      }
      c = create(cur, a);
    }
    nodes_[c].freq = add_sat(nodes_[c].freq, freq);
    touch(c);
    cur = c;
  }
}

void Automaton::insert(const int64_t* pattern, int64_t n, int64_t freq) {
  insert_one(pattern, n, freq);
}

void Automaton::add_tokens(const int64_t* tokens, int64_t n) {
  const size_t keep = static_cast<size_t>(ngram_ - 1);
  for (int64_t i = 0; i < n; ++i) {
    window_.clear();
    for (int32_t h : history_) window_.push_back(h);
    window_.push_back(tokens[i]);
    insert_one(window_.data(), static_cast<int64_t>(window_.size()), 1);
    if (keep == 0) continue;
    if (history_.size() == keep) history_.erase(history_.begin());
    history_.push_back(static_cast<int32_t>(tokens[i]));
  }
}

void Automaton::trans_tokens(const int64_t* tokens, int64_t n) {
  int32_t s = state_;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = static_cast<int32_t>(tokens[i]);
    int32_t c = child(s, a);
    while (c < 0 && s != 0) {
      s = nodes_[s].fail;
      c = child(s, a);
    }
    s = c >= 0 ? c : 0;
  }
  state_ = s;
}

void Automaton::build() {
  root_group_.clear();
  for (Node& n : nodes_) {
    n.rev_head = n.rev_next = n.rev_prev = -1;
    n.rev_count = n.group_size = 0;
  }
  stack_.clear();  // used as a FIFO here: index `head` walks it
  for (int32_t c = nodes_[0].first_child; c >= 0; c = nodes_[c].next_sib) stack_.push_back(c);
  for (size_t head = 0; head < stack_.size(); ++head) {
    const int32_t id = stack_[head];
    rev_link(id, failure_target(nodes_[id].parent, nodes_[id].token));
    for (int32_t c = nodes_[id].first_child; c >= 0; c = nodes_[c].next_sib) stack_.push_back(c);
  }
  stack_.clear();
}

// ---------------------------------------------------------------- retrieve

int32_t Automaton::tree_add(int32_t parent, int32_t token, uint8_t source, int32_t ctx,
                            int32_t rank, double share) {
  const int32_t id = static_cast<int32_t>(t_token_.size());
  t_token_.push_back(token);
  t_parent_.push_back(parent);
  t_depth_.push_back(parent >= 0 ? t_depth_[parent] + 1 : 0);
  t_first_.push_back(-1);
  t_last_.push_back(-1);
  t_next_.push_back(-1);
  t_src_.push_back(source);
  t_ctx_.push_back(ctx);
  t_rank_.push_back(rank);
  t_share_.push_back(share);
  t_mark_.push_back(0);
  if (parent >= 0) {
    if (t_last_[parent] >= 0)
      t_next_[t_last_[parent]] = id;
    else
      t_first_[parent] = id;
    t_last_[parent] = id;
  }
  return id;
}

namespace {
// Heap order: true when a ranks below b (smaller context, then smaller
// frequency, then deeper, then later parent, then larger token).
bool cand_below(int32_t actx, int64_t afreq, int32_t adepth, int32_t aparent, int32_t atoken,
                int32_t bctx, int64_t bfreq, int32_t bdepth, int32_t bparent, int32_t btoken) {
  if (actx != bctx) return actx < bctx;
  if (afreq != bfreq) return afreq < bfreq;
  if (adepth != bdepth) return adepth > bdepth;
  if (aparent != bparent) return aparent > bparent;
  return atoken > btoken;
}
}  // namespace

void Automaton::expand(int32_t n, int32_t cbegin, int32_t ccount) {
  gathered_.clear();
  for (int32_t i = cbegin; i < cbegin + ccount; ++i) {
    const Contrib k = pool_[i];
    const size_t first = gathered_.size();
    int64_t siblings = 0;
    for (int32_t c = nodes_[k.node].first_child; c >= 0; c = nodes_[c].next_sib) {
      gathered_.push_back({0, nodes_[c].token, c, k.ctx});
      siblings = add_sat(siblings, nodes_[c].freq);
    }
    for (size_t j = first; j < gathered_.size(); ++j) gathered_[j].siblings = siblings;
  }
  if (gathered_.empty()) return;
  if (gathered_.size() > 1)
    std::sort(gathered_.begin(), gathered_.end(),
              [](const Gathered& a, const Gathered& b) { return a.token < b.token; });
  auto below = [](const Cand& a, const Cand& b) {
    return cand_below(a.ctx, a.freq, a.depth, a.parent, a.token, b.ctx, b.freq, b.depth, b.parent,
                      b.token);
  };
  const int32_t depth = t_depth_[n] + 1;
  size_t i = 0;
  while (i < gathered_.size()) {
    Cand cand{0, -1.0, 0, depth, n, gathered_[i].token, static_cast<int32_t>(pool_.size()), 0};
    for (; i < gathered_.size() && gathered_[i].token == cand.token; ++i) {
      const Gathered& g = gathered_[i];
      const int64_t freq = nodes_[g.node].freq;
      // The share in the deepest context offering the token (contexts are
      // distinct borders; the larger share breaks a tie all the same).
      const double share = g.siblings > 0 ? static_cast<double>(freq) / static_cast<double>(g.siblings) : 0.0;
      if (g.ctx > cand.ctx || (g.ctx == cand.ctx && share > cand.share)) cand.share = share;
      cand.ctx = std::max(cand.ctx, g.ctx);
      cand.freq = add_sat(cand.freq, freq);
      pool_.push_back({gathered_[i].node, gathered_[i].ctx});
      ++cand.ccount;
    }
    heap_.push_back(cand);
    std::push_heap(heap_.begin(), heap_.end(), below);
  }
}

int32_t Automaton::retrieve(int32_t next_token, int32_t budget, bool chain, int32_t prev_token) {
  t_token_.clear();
  t_parent_.clear();
  t_depth_.clear();
  t_first_.clear();
  t_last_.clear();
  t_next_.clear();
  t_src_.clear();
  t_ctx_.clear();
  t_rank_.clear();
  t_share_.clear();
  t_mark_.clear();
  heap_.clear();
  pool_.clear();
  tree_add(-1, next_token, 0, 0, -1);

  // Retrieval: borders along the failure chain of the matcher state.
  for (int32_t u = state_;; u = nodes_[u].fail) {
    const int32_t c = child(u, next_token);
    if (c >= 0 && nodes_[c].depth >= min_depth_) pool_.push_back({c, nodes_[c].depth});
    if (u == 0) break;
  }
  auto below = [](const Cand& a, const Cand& b) {
    return cand_below(a.ctx, a.freq, a.depth, a.parent, a.token, b.ctx, b.freq, b.depth, b.parent,
                      b.token);
  };
  expand(0, 0, static_cast<int32_t>(pool_.size()));
  while (!heap_.empty() && static_cast<int32_t>(t_token_.size()) < budget) {
    std::pop_heap(heap_.begin(), heap_.end(), below);
    const Cand c = heap_.back();
    heap_.pop_back();
    if (chain && t_first_[c.parent] >= 0) continue;
    const int32_t id = tree_add(c.parent, c.token, 1, c.ctx, -1, c.share);
    expand(id, c.cbegin, c.ccount);
  }

  // Logits tree (Eq. 3, Figure 9): the root's children of rank i get k >> i;
  // below them a node of breadth b gives (b >> 1) >> i.
  if (top_k_ > 0) {
    fifo_.clear();
    fifo_.push_back({0, chain ? 1 : top_k_, 0});
    for (size_t head = 0; head < fifo_.size() && static_cast<int32_t>(t_token_.size()) < budget;
         ++head) {
      const LogitItem item = fifo_[head];
      const int32_t parent = t_parent_[item.node];
      const int32_t* row =
          row_of(parent >= 0 ? t_token_[parent] : prev_token, t_token_[item.node]);
      if (row == nullptr) continue;  // empty row: drafts nothing
      const int32_t b2 = item.depth == keep_depth_ ? item.breadth : item.breadth >> 1;
      const int32_t ranks = std::min(item.breadth, top_k_);
      for (int32_t i = 0; i < ranks && static_cast<int32_t>(t_token_.size()) < budget; ++i) {
        const int32_t t = row[i];
        int32_t c = t_first_[item.node];
        while (c >= 0 && t_token_[c] != t) c = t_next_[c];
        // A token repeated within the row: skip the later rank, so that every
        // node is queued at most once and the queue stays within budget * k.
        if (c >= 0 && t_mark_[c] == static_cast<int64_t>(head) + 1) continue;
        if (c >= 0) {
          t_src_[c] |= 2;
          if (t_rank_[c] < 0) t_rank_[c] = i;
        } else if (chain && t_first_[item.node] >= 0) {
          continue;  // keep a chain a chain
        } else {
          c = tree_add(item.node, t, 2, 0, i);
        }
        t_mark_[c] = static_cast<int64_t>(head) + 1;
        // b2 >> i for i >= 31 would be undefined; the breadth is 0 there anyway.
        const int32_t shifted = i < 31 ? (b2 >> i) : 0;
        fifo_.push_back({c, std::max(1, shifted), item.depth + 1});
      }
    }
  }
  flatten();
  return static_cast<int32_t>(order_.size());
}

void Automaton::flatten() {
  const size_t t = t_token_.size();
  order_.clear();
  index_.assign(t, -1);
  leaves_.clear();
  order_.push_back(0);
  int32_t max_depth = 0;
  for (size_t head = 0; head < order_.size(); ++head) {
    const int32_t n = order_[head];
    index_[n] = static_cast<int32_t>(head);
    max_depth = std::max(max_depth, t_depth_[n]);
    if (t_first_[n] < 0) leaves_.push_back(static_cast<int32_t>(head));
    for (int32_t c = t_first_[n]; c >= 0; c = t_next_[c]) order_.push_back(c);
  }
  width_ = max_depth + 1;
}

void Automaton::fill_draft(const DraftOut& out) const {
  const size_t t = order_.size();
  for (size_t i = 0; i < t; ++i) {
    const int32_t n = order_[i];
    out.tokens[i] = t_token_[n];
    out.position_ids[i] = t_depth_[n];
    out.parents[i] = t_parent_[n] >= 0 ? index_[t_parent_[n]] : -1;
    out.sources[i] = t_src_[n];
    out.context[i] = t_ctx_[n];
    out.rank[i] = t_rank_[n];
    out.share[i] = t_share_[n];
  }
  // Breadth-first, a parent's row is complete before its children's: each
  // row is the parent's row plus the diagonal.
  std::memset(out.attn_mask, 0, t * t);
  for (size_t i = 0; i < t; ++i) {
    uint8_t* row = out.attn_mask + i * t;
    const int64_t p = out.parents[i];
    if (p >= 0) std::memcpy(row, out.attn_mask + static_cast<size_t>(p) * t, static_cast<size_t>(p) + 1);
    row[i] = 1;
  }
  if (out.retrieve_indices == nullptr || out.candidates == nullptr) return;  // a caller that reads no leaf paths
  const size_t w = static_cast<size_t>(width_);
  for (size_t r = 0; r < leaves_.size(); ++r) {
    int64_t* ri = out.retrieve_indices + r * w;
    int64_t* ca = out.candidates + r * w;
    int64_t j = leaves_[r];
    const size_t len = static_cast<size_t>(out.position_ids[j]) + 1;
    for (size_t k = len; k < w; ++k) ri[k] = ca[k] = -1;
    for (size_t k = len; k-- > 0;) {
      ri[k] = j;
      ca[k] = out.tokens[j];
      j = out.parents[j];
    }
  }
}

// ------------------------------------------------------------ test helpers

void Automaton::export_nodes(std::vector<int32_t>& ids, std::vector<int32_t>& parents,
                             std::vector<int32_t>& tokens, std::vector<int32_t>& fails,
                             std::vector<int64_t>& freqs) const {
  ids.clear();
  for (int32_t c = nodes_[0].first_child; c >= 0; c = nodes_[c].next_sib) ids.push_back(c);
  for (size_t head = 0; head < ids.size(); ++head)
    for (int32_t c = nodes_[ids[head]].first_child; c >= 0; c = nodes_[c].next_sib) ids.push_back(c);
  parents.clear();
  tokens.clear();
  fails.clear();
  freqs.clear();
  for (int32_t id : ids) {
    parents.push_back(nodes_[id].parent);
    tokens.push_back(nodes_[id].token);
    fails.push_back(nodes_[id].fail);
    freqs.push_back(nodes_[id].freq);
  }
}

void Automaton::state_path(std::vector<int32_t>& out) const {
  out.clear();
  for (int32_t n = state_; n != 0; n = nodes_[n].parent) out.push_back(nodes_[n].token);
  std::reverse(out.begin(), out.end());
}

void Automaton::export_pairs(std::vector<int32_t>& prev, std::vector<int32_t>& tokens,
                             std::vector<int32_t>& rows) const {
  for (int32_t s = pair_oldest_; s >= 0; s = pair_newer_[s]) {
    prev.push_back(static_cast<int32_t>(pair_key_[s] >> 32));
    tokens.push_back(static_cast<int32_t>(pair_key_[s] & 0xFFFFFFFFu));
    const int32_t* row = &pair_table_[static_cast<size_t>(s) * top_k_];
    rows.insert(rows.end(), row, row + top_k_);
  }
}

std::string Automaton::check_internal() const {
  // Tree shape: sibling lists, child map, counts.
  size_t live = 1;
  std::vector<uint8_t> seen(nodes_.size(), 0);
  std::vector<int32_t> fifo{0};
  seen[0] = 1;
  for (size_t head = 0; head < fifo.size(); ++head) {
    const int32_t u = fifo[head];
    int32_t prev = -1;
    for (int32_t c = nodes_[u].first_child; c >= 0; c = nodes_[c].next_sib) {
      if (c <= 0 || static_cast<size_t>(c) >= nodes_.size() || seen[c]) return "bad child list";
      seen[c] = 1;
      ++live;
      const Node& n = nodes_[c];
      if (n.parent != u || n.prev_sib != prev) return "sibling links inconsistent";
      if (n.depth != nodes_[u].depth + 1) return "depth inconsistent";
      if (child(u, n.token) != c) return "child map disagrees with child list";
      prev = c;
      fifo.push_back(c);
    }
  }
  if (live != static_cast<size_t>(count_)) return "node_count disagrees with the tree";
  if (children_.size() != live - 1) return "child map has stale entries";
  if (count_ > max_nodes_) return "node_count above max_nodes";
  if (!alive(state_)) return "matcher state is dead";
  for (int32_t f : free_)
    if (alive(f)) return "free id is alive";
  if (live + free_.size() != nodes_.size()) return "ids leaked";
  // Reverse failure lists: each live node exactly once, in its target's list.
  std::vector<uint8_t> listed(nodes_.size(), 0);
  size_t in_lists = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const int32_t target = static_cast<int32_t>(i);
    if (!alive(target)) {
      if (target != 0 && nodes_[target].rev_head >= 0) return "dead node has a reverse list";
      continue;
    }
    if (target == 0) continue;
    int32_t prev = -1;
    int32_t length = 0;
    for (int32_t q = nodes_[target].rev_head; q >= 0; q = nodes_[q].rev_next) {
      if (!alive(q) || listed[q] || nodes_[q].fail != target || nodes_[q].rev_prev != prev)
        return "reverse failure list inconsistent";
      listed[q] = 1;
      ++in_lists;
      ++length;
      prev = q;
    }
    if (length != nodes_[target].rev_count) return "reverse list count wrong";
  }
  size_t root_listed = 0;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (!alive(id) || nodes_[id].fail != 0) continue;
    const int32_t head = root_group_.find(static_cast<uint32_t>(nodes_[id].token));
    if (head < 0 || nodes_[head].rev_prev != -1) return "root group missing";
    if (nodes_[id].rev_prev == -1 && head != id) return "root group head wrong";
    ++root_listed;
  }
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (alive(id) && nodes_[id].fail == 0 && nodes_[id].rev_prev == -1) {
      int32_t length = 0;
      for (int32_t q = id; q >= 0; q = nodes_[q].rev_next, ++length)
        if (nodes_[q].fail != 0 || nodes_[q].token != nodes_[id].token)
          return "root group inconsistent";
      if (length != nodes_[id].group_size) return "root group size wrong";
    }
  }
  if (in_lists + root_listed != live - 1) return "reverse lists miss nodes";
  // Every live leaf has a live heap entry.
  std::vector<uint8_t> has_entry(nodes_.size(), 0);
  for (const LeafEntry& e : leaf_heap_)
    if (e.id > 0 && static_cast<size_t>(e.id) < nodes_.size() && alive(e.id) &&
        nodes_[e.id].stamp == e.stamp)
      has_entry[e.id] = 1;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (alive(id) && is_leaf(id) && !has_entry[id]) return "leaf missing from the heap";
  }
  // Pair rows: the recency list visits every slot once, each slot's key maps back to it.
  const size_t slots = pair_key_.size();
  if (slots != pair_index_.size() || slots > static_cast<size_t>(vocab_size_) ||
      pair_table_.size() != slots * static_cast<size_t>(top_k_))
    return "pair table size wrong";
  size_t pairs_listed = 0;
  for (int32_t s = pair_oldest_, o = -1; s >= 0; o = s, s = pair_newer_[s], ++pairs_listed) {
    if (static_cast<size_t>(s) >= slots || pairs_listed >= slots || pair_older_[s] != o)
      return "pair recency list broken";
    if (pair_index_.find(pair_key_[s]) != s) return "pair key not indexed";
    if (pair_newer_[s] < 0 && pair_newest_ != s) return "pair newest wrong";
  }
  if (pairs_listed != slots) return "pair recency list misses slots";
  return "";
}

}  // namespace racer
