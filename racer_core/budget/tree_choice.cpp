#include "tree_choice.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace racer {

namespace {

// np.interp(x, xp, fp) for one x, by numpy's own formula (compiled_base.c,
// arr_interp): the last xp at or below x, its value where x is on it, else
// slope * (x - xp[j]) + fp[j] with the slope (fp[j+1] - fp[j]) / (xp[j+1] - xp[j]).
double interp(double x, const double* xp, const double* fp, int64_t len) {
  if (std::isnan(x)) return x;
  if (x < xp[0]) return fp[0];
  if (x > xp[len - 1]) return fp[len - 1];
  if (x == xp[len - 1]) return fp[len - 1];
  int64_t lo = 0, hi = len - 1;  // xp[lo] <= x < xp[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (xp[mid] <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t j = lo;
  if (xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  double y = slope * (x - xp[j]) + fp[j];
  if (std::isnan(y)) {  // numpy's other direction, then the flat case
    y = slope * (x - xp[j + 1]) + fp[j + 1];
    if (std::isnan(y) && fp[j] == fp[j + 1]) y = fp[j];
  }
  return y;
}

}  // namespace

bool tree_estimates(const ChoiceTree& tree, const ChoiceState& state, int64_t* bucket, int64_t* kind,
                    double* raw, double* probability, double* table) {
  const int64_t n = tree.n;
  if (n < 1) return false;
  const int64_t ranks = state.rank_cap + 1, depths = state.depth_cap + 1;
  for (int64_t i = 0; i < n; ++i) {
    if (tree.context[i] < 0 || tree.depth[i] < 0) return false;
    if (i > 0 && (tree.parents[i] < 0 || tree.parents[i] >= i)) return false;
    const int64_t c = std::min(tree.context[i], state.context_cap);
    const int64_t r = std::min(std::max<int64_t>(tree.rank[i] + 1, 0), state.rank_cap);
    const int64_t d = std::min(tree.depth[i], state.depth_cap);
    const int64_t at = (c * ranks + r) * depths + d;
    bucket[i] = state.bucket_of[at];
    kind[i] = state.kind_of[at];
  }
  if (n == 1) {  // the root alone: its chance is 1, whatever was learned
    raw[0] = probability[0] = 1.0;
    return true;
  }
  // Edge chances: each kind's counts shrunk towards its bucket's chance (KindCounts.chances).
  const double w = state.kind_weight;
  for (int64_t i = 0; i < n; ++i) {
    const double coarse = state.bucket_hits[bucket[i]] / state.bucket_trials[bucket[i]];
    raw[i] = (state.kind_hits[kind[i]] + w * coarse) / (state.kind_trials[kind[i]] + w);
  }
  raw[0] = 1.0;
  // Siblings exclude each other: their chances summed in node order (np.bincount), capped at 0.95.
  std::vector<double> totals(static_cast<size_t>(n), 0.0);
  for (int64_t i = 1; i < n; ++i) totals[tree.parents[i]] += raw[i];
  for (int64_t i = 1; i < n; ++i) {
    const double total = totals[tree.parents[i]];
    if (total > 0.95) raw[i] *= 0.95 / std::max(total, 1e-9);
  }
  // A path's chance: its parent's times its edge, in node order.
  for (int64_t i = 1; i < n; ++i) raw[i] *= raw[tree.parents[i]];
  // The calibration table (PathCalibration.table): 0, each bin's rate, 1, made non-decreasing.
  const int64_t len = state.bins + 2;
  table[0] = 0.0;
  for (int64_t b = 0; b < state.bins; ++b) table[b + 1] = state.calibration_hits[b] / state.calibration_trials[b];
  table[len - 1] = 1.0;
  for (int64_t b = 1; b < len; ++b) table[b] = std::isnan(table[b - 1]) || table[b - 1] > table[b] ? table[b - 1] : table[b];
  probability[0] = 1.0;
  for (int64_t i = 1; i < n; ++i) {
    probability[i] = interp(raw[i], state.centres, table, len);
    const double parent = probability[tree.parents[i]];
    if (parent < probability[i]) probability[i] = parent;  // the choice takes parents first
  }
  return true;
}

void tree_choice(int64_t n, const double* probability, const int64_t* sizes, const double* seconds,
                 int64_t size_count, int64_t others, double drafting_s, ChoiceOut& out) {
  const int64_t count = n - 1;
  // np.argsort(-p, kind="stable"): numpy's order (NaN last), ties in node order.
  for (int64_t i = 0; i < count; ++i) out.order[i] = i + 1;
  std::stable_sort(out.order, out.order + count, [probability](int64_t a, int64_t b) {
    const double ka = -probability[a], kb = -probability[b];
    return ka < kb || (std::isnan(kb) && !std::isnan(ka));
  });
  out.gains[0] = 0.0;
  if (count > 0) out.gains[1] = probability[out.order[0]];
  for (int64_t k = 2; k <= count; ++k) out.gains[k] = out.gains[k - 1] + probability[out.order[k - 1]];
  // tree_value at the load: (others + tokens) / (t + the drafting time under load, 0 for the root alone).
  const double others_f = static_cast<double>(others);
  const double wait = others ? drafting_s : 0.0;
  int64_t best_n = 0, best = 0, options = 1;
  double best_value = (others_f + 1.0) / (seconds[0] + 0.0);
  out.option_nodes[0] = 1;
  out.option_fed[0] = sizes[0];
  out.option_expected[0] = 1.0;
  out.option_seconds[0] = seconds[0];
  for (int64_t s = 0; s < size_count; ++s) {
    const int64_t drafts = std::min(sizes[s] - 1, count);
    const double tokens = 1.0 + out.gains[drafts];
    const double value = (others_f + tokens) / (seconds[s] + (drafts ? wait : 0.0));
    if (drafts > 0) {
      out.option_nodes[options] = drafts + 1;
      out.option_fed[options] = sizes[s];
      out.option_expected[options] = tokens;
      out.option_seconds[options] = seconds[s];
      ++options;
    }
    if (value > best_value * 1.0001) {
      best_n = drafts;
      best_value = value;
      best = options - 1;
    }
    if (drafts == count) break;
  }
  out.options = options;
  out.best = best;
  out.best_n = best_n;
  out.chosen[0] = 0;
  std::copy(out.order, out.order + best_n, out.chosen + 1);
  std::sort(out.chosen + 1, out.chosen + 1 + best_n);
}


bool tree_label(int64_t n, const int64_t* tokens, const int64_t* parents, const int64_t* depths,
                const int64_t* bucket, const int64_t* kind, const double* raw, const int64_t* text,
                int64_t text_len, int64_t known, double decay, LabelCounts& counts, uint8_t* on_path) {
  if (n < 1 || parents[0] != -1) return false;
  for (int64_t j = 1; j < n; ++j) {
    if (parents[j] < 0 || parents[j] >= j) return false;
    if (depths[j] <= known) {  // counted below: its bucket, kind and bin must exist
      if (bucket[j] < 0 || bucket[j] >= counts.buckets || kind[j] < 0 || kind[j] >= counts.kinds) return false;
      if (!(raw[j] >= 0.0 && raw[j] <= 1.0)) return false;  // NaN too
    }
  }
  // text_path: at each depth the first later node that is a child of the last one and holds the token
  std::fill(on_path, on_path + n, uint8_t{0});
  on_path[0] = 1;
  int64_t node = 0, i = 1;
  for (int64_t t = 0; t < text_len; ++t) {
    while (i < n && (parents[i] != node || tokens[i] != text[t])) ++i;
    if (i == n) break;
    node = i;
    on_path[i++] = 1;
  }
  bool tested = false, labelled = false;
  for (int64_t j = 1; j < n; ++j) {
    if (depths[j] <= known) {
      labelled = true;
      tested = tested || on_path[parents[j]];
    }
  }
  if (tested) {  // numpy's order: every count decayed, then one added per tested node
    for (int64_t b = 0; b < counts.buckets; ++b) counts.bucket_hits[b] *= decay;
    for (int64_t b = 0; b < counts.buckets; ++b) counts.bucket_trials[b] *= decay;
    for (int64_t k = 0; k < counts.kinds; ++k) counts.kind_hits[k] *= decay;
    for (int64_t k = 0; k < counts.kinds; ++k) counts.kind_trials[k] *= decay;
    for (int64_t j = 1; j < n; ++j) {
      if (depths[j] > known || !on_path[parents[j]]) continue;
      counts.bucket_trials[bucket[j]] += 1.0;
      counts.kind_trials[kind[j]] += 1.0;
      if (on_path[j]) {
        counts.bucket_hits[bucket[j]] += 1.0;
        counts.kind_hits[kind[j]] += 1.0;
      }
    }
  }
  if (labelled) {
    for (int64_t b = 0; b < counts.bins; ++b) counts.calibration_hits[b] *= decay;
    for (int64_t b = 0; b < counts.bins; ++b) counts.calibration_trials[b] *= decay;
    for (int64_t j = 1; j < n; ++j) {
      if (depths[j] > known) continue;
      const int64_t at = std::min(static_cast<int64_t>(raw[j] * static_cast<double>(counts.bins)), counts.bins - 1);
      counts.calibration_trials[at] += 1.0;
      if (on_path[j]) counts.calibration_hits[at] += 1.0;
    }
  }
  return true;
}

}  // namespace racer
