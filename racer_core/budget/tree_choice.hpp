// The tree policy's estimates and choice in one pass over a drafted tree
// (racer_core/budget/tree_policy.py is the reference; docs/design.md 1.8).
// Every float is the reference's IEEE arithmetic in the reference's order --
// np.interp's formula, sums in node order, a stable order by chance -- so
// the chances and the choice are the same bit for bit.
#pragma once

#include <cstdint>

namespace racer {

// A drafted tree: node 0 the root, a parent before its children.
struct ChoiceTree {
  int64_t n;
  const int64_t* parents;  // -1 for the root
  const int64_t* context;  // retrieval context, 0 for none
  const int64_t* rank;     // logits rank, -1 for none
  const int64_t* depth;
};

// What the policy has learned, and its tables over the nodes' capped features.
struct ChoiceState {
  const int64_t* bucket_of;  // [context][rank + 1][depth] -> flat bucket (tree_policy._BUCKET)
  const int64_t* kind_of;    // the same -> exact kind (tree_policy._KIND)
  int64_t context_cap, rank_cap, depth_cap;  // the tables' last index on each axis
  const double* bucket_hits;
  const double* bucket_trials;
  const double* kind_hits;  // KindCounts
  const double* kind_trials;
  double kind_weight;
  const double* calibration_hits;  // PathCalibration, `bins` each
  const double* calibration_trials;
  const double* centres;  // bins + 2: 0, the bins' centres, 1
  int64_t bins;
};

// Per node: its bucket and kind, its path's product of edge chances and that
// product read through the calibration (1 for the root, a child never above
// its parent). Returns false, writing nothing meaningful, for a tree the
// tables cannot read (a negative context or depth, a parent not before its
// child): the caller then asks the reference. `table` is bins + 2 scratch.
bool tree_estimates(const ChoiceTree& tree, const ChoiceState& state, int64_t* bucket, int64_t* kind,
                    double* raw, double* probability, double* table);

// The sizes weighed and the one chosen (TreePolicy.choose): `order` (n - 1)
// the non-root nodes by chance, likeliest first, ties in node order; `gains`
// (n) the expected drafts of the first k of them; the options (at most
// sizes + 1 entries, their count returned in `options`); `chosen` (best_n + 1)
// the root and the best_n likeliest nodes in node order.
struct ChoiceOut {
  int64_t* order;
  double* gains;
  int64_t* option_nodes;
  int64_t* option_fed;
  double* option_expected;
  double* option_seconds;
  int64_t options;
  int64_t best;    // index of the chosen option
  int64_t best_n;  // drafts chosen
  int64_t* chosen;
};

void tree_choice(int64_t n, const double* probability, const int64_t* sizes, const double* seconds,
                 int64_t size_count, int64_t others, double drafting_s, ChoiceOut& out);


// The counts TreePolicy.learn updates, written in place.
struct LabelCounts {
  double* bucket_hits;
  double* bucket_trials;
  int64_t buckets;
  double* kind_hits;  // KindCounts
  double* kind_trials;
  int64_t kinds;
  double* calibration_hits;  // PathCalibration
  double* calibration_trials;
  int64_t bins;
};

// One recorded tree labelled by the text that followed its root
// (TreePolicy._reference_label is the reference): `text` (text_len tokens,
// at most the tree's depth) marks the nodes it follows from the root, each
// depth's first child holding its token; a node is tested where its parent
// is on that path and `known` tokens decide it; tested nodes count in their
// bucket and kind, every decided node in its path chance's bin, each array
// decayed first where anything is added to it. `on_path` is n scratch.
// Returns false, writing nothing, for a tree it cannot read (a parent not
// before its child, a bucket, kind or chance out of range): the reference answers.
bool tree_label(int64_t n, const int64_t* tokens, const int64_t* parents, const int64_t* depths,
                const int64_t* bucket, const int64_t* kind, const double* raw, const int64_t* text,
                int64_t text_len, int64_t known, double decay, LabelCounts& counts, uint8_t* on_path);

}  // namespace racer
