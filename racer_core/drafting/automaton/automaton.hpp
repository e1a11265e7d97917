// RACER automaton: an Aho-Corasick n-gram trie with LRU leaf eviction, the
// copy-logit table, and the draft-tree builder. docs/automaton.md is the exact
// specification; racer_core/automaton/reference.py is the Python oracle.
//
// The Cython binding validates every argument before calling in here, so the
// methods below assume valid input (tokens in range, budget >= 1, ...). The
// only exception they may throw is std::bad_alloc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace racer {

// Children live in one flat hash map keyed by (parent, token) rather than in a
// map per node: lookups are O(1) even at the root, which can have thousands of
// children, and there is no per-node allocation. Each node also threads its
// children on an intrusive sibling list for iteration.
//
// Open-addressing hash map from a 64-bit key to an int32 value; linear
// probing with backward-shift deletion, so there are no tombstones and lookups
// stay short however many erase/insert cycles LRU eviction causes.
class IdMap {
 public:
  IdMap();
  int32_t find(uint64_t key) const;
  void put(uint64_t key, int32_t value);  // insert or overwrite
  void erase(uint64_t key);
  void clear();
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const;
  void grow();
  std::vector<uint64_t> keys_;
  std::vector<int32_t> values_;
  size_t mask_ = 0;
  int shift_ = 0;
  size_t count_ = 0;
};

struct DraftOut {
  int64_t* tokens;
  int64_t* position_ids;
  int64_t* parents;
  uint8_t* sources;
  int64_t* context;            // retrieval context of the candidate that added it, else 0
  int64_t* rank;               // logits-row rank that reached it, else -1
  double* share;               // retrieved: its count over its siblings' in its context, else -1
  uint8_t* attn_mask;          // T x T
  int64_t* retrieve_indices;   // leaves x width (null, with candidates: not filled)
  int64_t* candidates;         // leaves x width
};

class Automaton {
 public:
  // late_halving: the logits tree's older rule (docs/automaton.md, Logits),
  // kept as an option for comparison; the default is the paper's rule.
  // pair_rows: keep rows keyed by (previous token, token) too (docs/automaton.md).
  Automaton(int32_t max_nodes, int32_t min_depth, int32_t ngram, bool late_halving = false,
            bool pair_rows = true);

  int32_t max_nodes() const { return max_nodes_; }
  int32_t min_depth() const { return min_depth_; }
  int32_t ngram() const { return ngram_; }
  bool late_halving() const { return keep_depth_ == 1; }
  bool pair_rows() const { return pair_rows_; }
  int32_t pair_count() const { return static_cast<int32_t>(pair_index_.size()); }
  int32_t vocab_size() const { return vocab_size_; }  // 0 before init_logits
  int32_t top_k() const { return top_k_; }            // 0 before init_logits
  int32_t node_count() const { return count_; }

  void init_logits(int32_t vocab_size, int32_t top_k);
  // rows: n x top_k, row-major. prev: n previous tokens (-1: none), or null.
  void update(const int64_t* token_ids, int64_t n, const int64_t* rows, const int64_t* prev);
  void insert(const int64_t* pattern, int64_t n, int64_t freq);
  void add_tokens(const int64_t* tokens, int64_t n);
  void trans_tokens(const int64_t* tokens, int64_t n);
  void reset() { state_ = 0; }
  void build();

  // Builds the draft tree; returns its size T. Then draft_leaves() and
  // draft_width() give the shape of retrieve_indices, and fill_draft writes
  // the arrays into caller-owned buffers of those sizes.
  // prev_token: the token before next_token, -1 if unknown.
  int32_t retrieve(int32_t next_token, int32_t budget, bool chain, int32_t prev_token = -1);
  int32_t draft_leaves() const { return static_cast<int32_t>(leaves_.size()); }
  int32_t draft_width() const { return width_; }
  void fill_draft(const DraftOut& out) const;

  // Test helpers. export_nodes lists live non-root nodes breadth-first.
  void export_nodes(std::vector<int32_t>& ids, std::vector<int32_t>& parents,
                    std::vector<int32_t>& tokens, std::vector<int32_t>& fails,
                    std::vector<int64_t>& freqs) const;
  void state_path(std::vector<int32_t>& out) const;
  // Pair rows, least recently written first: keys as (prev, token), rows top_k wide.
  void export_pairs(std::vector<int32_t>& prev, std::vector<int32_t>& tokens,
                    std::vector<int32_t>& rows) const;
  // Checks the unobservable structures (child map, sibling lists, reverse
  // failure lists, leaf heap); returns "" or a description of the first fault.
  std::string check_internal() const;
  // Test hook: how create() finds the nodes a new node takes over.
  // 0 the cheaper of the two walks (default), 1 failure subtree only, 2 failure
  // chain only, 3 failure subtree for two visits, then the chain.
  void set_redirect_mode(int mode) { redirect_mode_ = mode; }

 private:
  struct Node {
    int32_t token, depth, parent, fail;
    int32_t first_child, next_sib, prev_sib;
    int32_t rev_head, rev_next, rev_prev;  // reverse failure lists
    int32_t rev_count;   // length of the list headed by rev_head
    int32_t group_size;  // on the head of a root group: the group's length
    int64_t freq, stamp;
  };
  struct LeafEntry {
    int64_t stamp;
    int32_t id;
  };
  struct Cand {
    int64_t freq;
    double share;  // in the deepest context offering the token: its count / all that context's children's
    int32_t ctx, depth, parent, token, cbegin, ccount;
  };
  struct Contrib {
    int32_t node, ctx;
  };
  struct Gathered {
    int64_t siblings;  // the freq of the contributor's children, this one included
    int32_t token, node, ctx;
  };
  struct LogitItem {
    int32_t node, breadth, depth;
  };

  static uint64_t child_key(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
           static_cast<uint32_t>(token);
  }
  int32_t child(int32_t parent, int32_t token) const {
    return children_.find(child_key(parent, token));
  }
  bool alive(int32_t id) const { return id == 0 || nodes_[id].parent >= 0; }
  bool is_leaf(int32_t id) const { return id != 0 && nodes_[id].first_child < 0; }

  void insert_one(const int64_t* pattern, int64_t n, int64_t freq);
  void touch(int32_t id);
  void push_leaf(int32_t id);
  void compact_leaves();
  int32_t pop_lru_leaf(int32_t cur);
  void evict(int32_t x);
  int32_t create(int32_t u, int32_t a);
  int32_t failure_target(int32_t u, int32_t a) const;
  void rev_link(int32_t q, int32_t target);
  void rev_unlink(int32_t q);
  int64_t chain_cost(int32_t target, int32_t a) const;
  bool redirect_by_failure_tree(int32_t u, int32_t a, int32_t p, int32_t depth, int64_t limit);
  void redirect_by_chain(int32_t u, int32_t a, int32_t p, int32_t depth, int32_t target);
  bool ends_with(int32_t q, int32_t u, int32_t a) const;

  const int32_t* row_of(int32_t prev, int32_t token) const;  // the pair's, else the token's, else null
  void write_pair(int32_t prev, int32_t token, const int64_t* row);

  int32_t tree_add(int32_t parent, int32_t token, uint8_t source, int32_t ctx, int32_t rank,
                   double share = -1.0);
  void expand(int32_t n, int32_t cbegin, int32_t ccount);
  void flatten();

  int32_t max_nodes_, min_depth_, ngram_;
  // The logits-queue depth whose nodes pass their breadth on unhalved: 0 (the
  // root, the paper's rule) or 1 (late_halving).
  int32_t keep_depth_;
  int32_t vocab_size_ = 0, top_k_ = 0;

  std::vector<Node> nodes_;
  std::vector<int32_t> free_;
  IdMap children_;    // (parent, token) -> child
  IdMap root_group_;  // token -> first node failing to the root with that token
  std::vector<LeafEntry> leaf_heap_;  // min-heap by stamp; stale entries skipped
  std::vector<LeafEntry> kept_;
  std::vector<int32_t> stack_;
  int32_t count_ = 1;
  int64_t clock_ = 0;
  int32_t state_ = 0;
  int redirect_mode_ = 0;
  std::vector<int32_t> history_;  // the last ngram - 1 tokens
  std::vector<int64_t> window_;

  // vocab_size x top_k, left uninitialised: a row is read only once written_
  // says so, and a fresh allocation this large is the kernel's zero pages,
  // touched only where rows are written (a conversation writes a few
  // thousand of 49,152; zeroing the whole 1.5 MB took 0.5 ms a conversation)
  std::unique_ptr<int32_t[]> table_;
  std::vector<uint8_t> written_;   // row written?
  // Pair rows: at most vocab_size, the least recently written one replaced
  // when full. Slot s holds pair_table_[s * top_k ...] for key pair_key_[s]
  // and sits on a recency list (pair_older_/pair_newer_, oldest first).
  bool pair_rows_;
  IdMap pair_index_;  // (prev, token) -> slot
  std::vector<int32_t> pair_table_;
  std::vector<uint64_t> pair_key_;
  std::vector<int32_t> pair_older_, pair_newer_;
  int32_t pair_oldest_ = -1, pair_newest_ = -1;

  // Draft tree, internal order (order of addition).
  std::vector<int32_t> t_token_, t_parent_, t_depth_, t_first_, t_last_, t_next_;
  std::vector<uint8_t> t_src_;
  std::vector<int32_t> t_ctx_, t_rank_;
  std::vector<double> t_share_;
  std::vector<int64_t> t_mark_;  // logits queue position + 1 that last reached the node
  std::vector<Cand> heap_;
  std::vector<Contrib> pool_;
  std::vector<Gathered> gathered_;
  std::vector<LogitItem> fifo_;
  // Draft tree, breadth-first.
  std::vector<int32_t> order_, index_, leaves_;
  int32_t width_ = 0;
};

}  // namespace racer
