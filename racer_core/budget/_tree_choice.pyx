# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython bindings of the tree policy's estimates and choice (tree_choice.hpp).

Each function answers None where it cannot read its inputs as they are -- an
array not native, contiguous float64 or int64 of the expected size, a tree
the feature tables cannot read -- and the policy then asks its Python
reference (tree_policy.py), which is what these compute, bit for bit.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy
from libcpp cimport bool as cbool
from libcpp.vector cimport vector

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef extern from "tree_choice.hpp" namespace "racer":
    cdef struct ChoiceTree:
        int64_t n
        const int64_t* parents
        const int64_t* context
        const int64_t* rank
        const int64_t* depth

    cdef struct ChoiceState:
        const int64_t* bucket_of
        const int64_t* kind_of
        int64_t context_cap, rank_cap, depth_cap
        const double* bucket_hits
        const double* bucket_trials
        const double* kind_hits
        const double* kind_trials
        double kind_weight
        const double* calibration_hits
        const double* calibration_trials
        const double* centres
        int64_t bins

    cdef struct ChoiceOut:
        int64_t* order
        double* gains
        int64_t* option_nodes
        int64_t* option_fed
        double* option_expected
        double* option_seconds
        int64_t options
        int64_t best
        int64_t best_n
        int64_t* chosen

    cbool tree_estimates(const ChoiceTree&, const ChoiceState&, int64_t*, int64_t*, double*, double*, double*) nogil
    void tree_choice(int64_t, const double*, const int64_t*, const double*, int64_t, int64_t, double,
                     ChoiceOut&) nogil

    cdef struct LabelCounts:
        double* bucket_hits
        double* bucket_trials
        int64_t buckets
        double* kind_hits
        double* kind_trials
        int64_t kinds
        double* calibration_hits
        double* calibration_trials
        int64_t bins

    cbool tree_label(int64_t, const int64_t*, const int64_t*, const int64_t*, const int64_t*, const int64_t*,
                     const double*, const int64_t*, int64_t, int64_t, double, LabelCounts&, uint8_t*) nogil


cdef inline void* _data(object a, int typenum, Py_ssize_t size):
    """`a`'s data where it is a native, aligned, C-contiguous array of `typenum` and `size` items, else NULL."""
    if not cnp.PyArray_Check(a):
        return NULL
    cdef cnp.ndarray arr = <cnp.ndarray>a
    if (cnp.PyArray_TYPE(arr) != typenum or not cnp.PyArray_IS_C_CONTIGUOUS(arr)
            or not cnp.PyArray_ISBEHAVED_RO(arr) or cnp.PyArray_SIZE(arr) != size):
        return NULL
    return cnp.PyArray_DATA(arr)


cdef inline double* _counts(object a):
    """`a`'s data where `_data` reads it as float64 (of any size) and it is writeable, else NULL."""
    if not cnp.PyArray_Check(a) or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>a):
        return NULL
    return <double*>_data(a, cnp.NPY_FLOAT64, cnp.PyArray_SIZE(<cnp.ndarray>a))


cdef class ChoiceTables:
    """The policy's feature tables and learned counts the native choice reads:
    the arrays themselves, so what the policy learns in place is seen."""

    cdef object _keep
    cdef ChoiceState state
    cdef readonly cbool usable
    # each step's working memory, kept between steps (the policy calls under its lock, one at a time)
    cdef vector[double] table, gains, expected, spent
    cdef vector[int64_t] order, nodes, fed, picked, remap

    def __init__(self, bucket_of, kind_of, bucket_hits, bucket_trials, kind_hits, kind_trials, double kind_weight,
                 calibration_hits, calibration_trials, centres):
        self._keep = (bucket_of, kind_of, bucket_hits, bucket_trials, kind_hits, kind_trials, calibration_hits,
                      calibration_trials, centres)
        self.usable = False
        if np.ndim(bucket_of) != 3 or np.shape(kind_of) != np.shape(bucket_of):
            return
        shape = np.shape(bucket_of)
        cdef Py_ssize_t table = shape[0] * shape[1] * shape[2]
        cdef Py_ssize_t buckets = np.size(bucket_hits), kinds = np.size(kind_hits), bins = np.size(calibration_hits)
        self.state.bucket_of = <const int64_t*>_data(bucket_of, cnp.NPY_INT64, table)
        self.state.kind_of = <const int64_t*>_data(kind_of, cnp.NPY_INT64, table)
        self.state.context_cap, self.state.rank_cap, self.state.depth_cap = shape[0] - 1, shape[1] - 1, shape[2] - 1
        self.state.bucket_hits = <const double*>_data(bucket_hits, cnp.NPY_FLOAT64, buckets)
        self.state.bucket_trials = <const double*>_data(bucket_trials, cnp.NPY_FLOAT64, buckets)
        self.state.kind_hits = <const double*>_data(kind_hits, cnp.NPY_FLOAT64, kinds)
        self.state.kind_trials = <const double*>_data(kind_trials, cnp.NPY_FLOAT64, kinds)
        self.state.kind_weight = kind_weight
        self.state.calibration_hits = <const double*>_data(calibration_hits, cnp.NPY_FLOAT64, bins)
        self.state.calibration_trials = <const double*>_data(calibration_trials, cnp.NPY_FLOAT64, bins)
        self.state.centres = <const double*>_data(centres, cnp.NPY_FLOAT64, bins + 2)
        self.state.bins = bins
        # every bucket and kind the tables name must index the counts
        self.usable = (self.state.bucket_of != NULL and self.state.kind_of != NULL and self.state.bucket_hits != NULL
                       and self.state.bucket_trials != NULL and self.state.kind_hits != NULL
                       and self.state.kind_trials != NULL and self.state.calibration_hits != NULL
                       and self.state.calibration_trials != NULL and self.state.centres != NULL and bins > 0
                       and 0 <= np.min(bucket_of) and np.max(bucket_of) < buckets
                       and 0 <= np.min(kind_of) and np.max(kind_of) < kinds)

    def holds(self, bucket_hits, bucket_trials, kind_hits, kind_trials, calibration_hits, calibration_trials) -> bool:
        """Whether these are still the learned arrays it reads (the policy may replace one)."""
        keep = self._keep
        return (bucket_hits is keep[2] and bucket_trials is keep[3] and kind_hits is keep[4]
                and kind_trials is keep[5] and calibration_hits is keep[6] and calibration_trials is keep[7])


cdef inline cnp.ndarray _empty(Py_ssize_t n, int typenum):
    cdef cnp.npy_intp dim = n
    return cnp.PyArray_EMPTY(1, &dim, typenum, 0)


cdef object _estimate(ChoiceTables tables, parents, context, rank, depth, cbool* done):
    """(buckets, kinds, raw products, calibrated chances), done[0] False where the reference must answer."""
    done[0] = False
    if not tables.usable or not cnp.PyArray_Check(parents):
        return None
    cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>parents)
    cdef ChoiceTree tree
    tree.n = n
    tree.parents = <const int64_t*>_data(parents, cnp.NPY_INT64, n)
    tree.context = <const int64_t*>_data(context, cnp.NPY_INT64, n)
    tree.rank = <const int64_t*>_data(rank, cnp.NPY_INT64, n)
    tree.depth = <const int64_t*>_data(depth, cnp.NPY_INT64, n)
    if n < 1 or tree.parents == NULL or tree.context == NULL or tree.rank == NULL or tree.depth == NULL:
        return None
    bucket, kind = _empty(n, cnp.NPY_INT64), _empty(n, cnp.NPY_INT64)
    raw, probability = _empty(n, cnp.NPY_FLOAT64), _empty(n, cnp.NPY_FLOAT64)
    tables.table.resize(tables.state.bins + 2)
    if not tree_estimates(tree, tables.state, <int64_t*>cnp.PyArray_DATA(bucket), <int64_t*>cnp.PyArray_DATA(kind),
                          <double*>cnp.PyArray_DATA(raw), <double*>cnp.PyArray_DATA(probability),
                          tables.table.data()):
        return None
    done[0] = True
    return bucket, kind, raw, probability


def estimates(ChoiceTables tables not None, parents, context, rank, depth):
    """(each node's bucket, its kind, its path's product of edge chances, that
    read through the calibration) as TreePolicy._estimates works them out, or None."""
    cdef cbool done
    return _estimate(tables, parents, context, rank, depth, &done)


def choose(ChoiceTables tables not None, parents, context, rank, depth, sizes, seconds, int64_t others,
           double drafting_s):
    """The estimates and TreePolicy.choose's weighing of the efficient `sizes`
    (their `seconds`) at `others` sequences beside, or None: (bucket, kind,
    raw, probability, chosen, best_n, best option, expected drafts, the options'
    nodes, fed, expected tokens and seconds (arrays: BudgetOptions makes them lists where read), the largest
    retrieval context of a draft, the largest depth, the rows fed for the chosen nodes)."""
    return _choose(tables, parents, context, rank, depth, sizes, seconds, others, drafting_s)


def choose_cut(ChoiceTables tables not None, parents, context, rank, depth, sizes, seconds, int64_t others,
               double drafting_s, ancestors, tokens, sources, share):
    """`choose` and `cut_nodes` of its chosen nodes in one call (a step's
    choice and cut, drafting/tree.py's `cut`): (choose's answer or None,
    cut_nodes's answer or None; None too where choose's is)."""
    weighed = _choose(tables, parents, context, rank, depth, sizes, seconds, others, drafting_s)
    if weighed is None:
        return None, None
    return weighed, _cut(tables.remap, (<tuple>weighed)[4], parents, ancestors, tokens, depth, sources, context,
                         rank, share)


cdef object _choose(ChoiceTables tables, parents, context, rank, depth, sizes, seconds, int64_t others,
                    double drafting_s):
    cdef cbool done
    found = _estimate(tables, parents, context, rank, depth, &done)
    if not done:
        return None
    probability = found[3]
    cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>probability)
    if not cnp.PyArray_Check(sizes):
        return None
    cdef Py_ssize_t count = cnp.PyArray_SIZE(<cnp.ndarray>sizes), i
    cdef const int64_t* size_data = <const int64_t*>_data(sizes, cnp.NPY_INT64, count)
    cdef const double* second_data = <const double*>_data(seconds, cnp.NPY_FLOAT64, count)
    if count < 1 or size_data == NULL or second_data == NULL:
        return None
    tables.order.resize(n)
    tables.gains.resize(n)
    tables.picked.resize(n)
    tables.nodes.resize(count + 1)
    tables.fed.resize(count + 1)
    tables.expected.resize(count + 1)
    tables.spent.resize(count + 1)
    cdef ChoiceOut out
    out.order, out.gains = tables.order.data(), tables.gains.data()
    out.option_nodes, out.option_fed, out.option_expected, out.option_seconds = (
        tables.nodes.data(), tables.fed.data(), tables.expected.data(), tables.spent.data())
    out.chosen = tables.picked.data()
    tree_choice(n, <const double*>cnp.PyArray_DATA(<cnp.ndarray>probability), size_data, second_data, count, others,
                drafting_s, out)
    chosen = _int64s(out.chosen, out.best_n + 1)
    cdef const int64_t* ctx = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>context)
    cdef const int64_t* dep = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>depth)
    cdef int64_t widest = 0, deepest = dep[0]  # contexts are not negative (_estimate)
    for i in range(1, n):
        widest = max(widest, ctx[i])
        deepest = max(deepest, dep[i])
    # the rows fed for the chosen nodes (EfficientSizes.padded): the smallest size holding them, else as many
    cdef int64_t fed = out.best_n + 1
    for i in range(count):
        if size_data[i] >= fed:
            fed = size_data[i]
            break
    return (found[0], found[1], found[2], probability, chosen, out.best_n, out.best,
            out.gains[out.best_n], _int64s(out.option_nodes, out.options), _int64s(out.option_fed, out.options),
            _doubles(out.option_expected, out.options), _doubles(out.option_seconds, out.options), widest, deepest,
            fed)


cdef cnp.ndarray _int64s(const int64_t* values, Py_ssize_t n):
    out = _empty(n, cnp.NPY_INT64)
    memcpy(cnp.PyArray_DATA(out), values, n * sizeof(int64_t))
    return out


cdef cnp.ndarray _doubles(const double* values, Py_ssize_t n):
    out = _empty(n, cnp.NPY_FLOAT64)
    memcpy(cnp.PyArray_DATA(out), values, n * sizeof(double))
    return out


def cut_nodes(chosen, parents, ancestors, tokens, depths, sources, context, rank, share):
    """The nodes `chosen` of a tree, renumbered in their order, as
    drafting/tree.py's `cut` takes them: (parents, ancestor mask, tokens,
    depths, sources, contexts, ranks, shares or None where `share` is None).
    None unless `chosen` ascends from the root (0) within the tree and the
    columns are native contiguous arrays (int64, the mask bool n x n, the
    sources uint8, the shares float64): `cut` then indexes them itself."""
    cdef vector[int64_t] remap
    return _cut(remap, chosen, parents, ancestors, tokens, depths, sources, context, rank, share)


cdef object _cut(vector[int64_t]& remap, chosen, parents, ancestors, tokens, depths, sources, context, rank, share):
    """cut_nodes, `remap` its working memory."""
    if not cnp.PyArray_Check(parents) or not cnp.PyArray_Check(chosen):
        return None
    cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>parents), k = cnp.PyArray_SIZE(<cnp.ndarray>chosen), i, j, jj
    cdef const int64_t* pick = <const int64_t*>_data(chosen, cnp.NPY_INT64, k)
    cdef const int64_t* up = <const int64_t*>_data(parents, cnp.NPY_INT64, n)
    cdef const cnp.npy_bool* mask = <const cnp.npy_bool*>_data(ancestors, cnp.NPY_BOOL, n * n)
    cdef const int64_t* token = <const int64_t*>_data(tokens, cnp.NPY_INT64, n)
    cdef const int64_t* depth = <const int64_t*>_data(depths, cnp.NPY_INT64, n)
    cdef const uint8_t* source = <const uint8_t*>_data(sources, cnp.NPY_UINT8, n)
    cdef const int64_t* ctx = <const int64_t*>_data(context, cnp.NPY_INT64, n)
    cdef const int64_t* rnk = <const int64_t*>_data(rank, cnp.NPY_INT64, n)
    cdef const double* shares = NULL
    if share is not None:
        shares = <const double*>_data(share, cnp.NPY_FLOAT64, n)
        if shares == NULL:
            return None
    if (k < 1 or pick == NULL or up == NULL or mask == NULL or token == NULL or depth == NULL or source == NULL
            or ctx == NULL or rnk == NULL or cnp.PyArray_NDIM(<cnp.ndarray>ancestors) != 2 or pick[0] != 0 or pick[k - 1] >= n):
        return None
    for i in range(1, k):
        if pick[i] <= pick[i - 1] or up[pick[i]] < 0 or up[pick[i]] >= n:
            return None
    remap.assign(n, -1)
    for i in range(k):
        remap[pick[i]] = i
    out_parents, out_tokens, out_depths = _empty(k, cnp.NPY_INT64), _empty(k, cnp.NPY_INT64), _empty(k, cnp.NPY_INT64)
    out_context, out_rank, out_sources = _empty(k, cnp.NPY_INT64), _empty(k, cnp.NPY_INT64), _empty(k, cnp.NPY_UINT8)
    cdef cnp.npy_intp dims[2]
    dims[0] = dims[1] = k
    out_mask = cnp.PyArray_EMPTY(2, dims, cnp.NPY_BOOL, 0)
    out_share = None if shares == NULL else _empty(k, cnp.NPY_FLOAT64)
    cdef double* sh = NULL
    if shares != NULL:
        sh = <double*>cnp.PyArray_DATA(out_share)
    cdef int64_t* p = <int64_t*>cnp.PyArray_DATA(out_parents)
    cdef int64_t* t = <int64_t*>cnp.PyArray_DATA(out_tokens)
    cdef int64_t* d = <int64_t*>cnp.PyArray_DATA(out_depths)
    cdef int64_t* c = <int64_t*>cnp.PyArray_DATA(out_context)
    cdef int64_t* r = <int64_t*>cnp.PyArray_DATA(out_rank)
    cdef uint8_t* s = <uint8_t*>cnp.PyArray_DATA(out_sources)
    cdef cnp.npy_bool* m = <cnp.npy_bool*>cnp.PyArray_DATA(out_mask)
    cdef const cnp.npy_bool* row
    for i in range(k):
        j = pick[i]
        p[i] = remap[up[j]] if i else -1  # a parent not chosen: -1, as the remap gives it
        t[i], d[i], s[i], c[i], r[i] = token[j], depth[j], source[j], ctx[j], rnk[j]
        if sh != NULL:
            sh[i] = shares[j]
        row = mask + j * n
        for jj in range(k):
            m[i * k + jj] = row[pick[jj]]
    return out_parents, out_mask, out_tokens, out_depths, out_sources, out_context, out_rank, out_share


def label(tokens, parents, depths, bucket, kind, raw, sequence, Py_ssize_t start, Py_ssize_t count,
          int64_t known, double decay, bucket_hits, bucket_trials, kind_hits, kind_trials, calibration_hits,
          calibration_trials, chosen):
    """TreePolicy._reference_label in one call: the tree's nodes labelled by
    `sequence[start : start + count]` (the text after its root), the counts
    updated in place; answers how many of `chosen`'s nodes (None: none) the
    text follows, or -1, having changed nothing, where it cannot read its
    inputs (then the reference answers): `sequence` a list of ints."""
    if (type(sequence) is not list or not cnp.PyArray_Check(parents) or count < 0 or start < 0
            or start + count > len(<list>sequence)):
        return -1
    cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>parents), k = 0, i
    cdef const int64_t* token = <const int64_t*>_data(tokens, cnp.NPY_INT64, n)
    cdef const int64_t* up = <const int64_t*>_data(parents, cnp.NPY_INT64, n)
    cdef const int64_t* depth = <const int64_t*>_data(depths, cnp.NPY_INT64, n)
    cdef const int64_t* buckets = <const int64_t*>_data(bucket, cnp.NPY_INT64, n)
    cdef const int64_t* kinds = <const int64_t*>_data(kind, cnp.NPY_INT64, n)
    cdef const double* chance = <const double*>_data(raw, cnp.NPY_FLOAT64, n)
    cdef const int64_t* pick = NULL
    if chosen is not None:
        if not cnp.PyArray_Check(chosen):
            return -1
        k = cnp.PyArray_SIZE(<cnp.ndarray>chosen)
        pick = <const int64_t*>_data(chosen, cnp.NPY_INT64, k)
        if pick == NULL:
            return -1
        for i in range(k):
            if pick[i] < 0 or pick[i] >= n:
                return -1
    cdef LabelCounts counts
    counts.bucket_hits, counts.bucket_trials = _counts(bucket_hits), _counts(bucket_trials)
    counts.kind_hits, counts.kind_trials = _counts(kind_hits), _counts(kind_trials)
    counts.calibration_hits, counts.calibration_trials = _counts(calibration_hits), _counts(calibration_trials)
    if (token == NULL or up == NULL or depth == NULL or buckets == NULL or kinds == NULL or chance == NULL
            or counts.bucket_hits == NULL or counts.bucket_trials == NULL or counts.kind_hits == NULL
            or counts.kind_trials == NULL or counts.calibration_hits == NULL or counts.calibration_trials == NULL):
        return -1
    counts.buckets = cnp.PyArray_SIZE(<cnp.ndarray>bucket_hits)
    counts.kinds = cnp.PyArray_SIZE(<cnp.ndarray>kind_hits)
    counts.bins = cnp.PyArray_SIZE(<cnp.ndarray>calibration_hits)
    if (counts.buckets != cnp.PyArray_SIZE(<cnp.ndarray>bucket_trials) or counts.bins < 1
            or counts.kinds != cnp.PyArray_SIZE(<cnp.ndarray>kind_trials)
            or counts.bins != cnp.PyArray_SIZE(<cnp.ndarray>calibration_trials)):
        return -1
    cdef vector[int64_t] text
    text.resize(count)
    for i in range(count):
        item = (<list>sequence)[start + i]
        if type(item) is not int:
            return -1
        text[i] = item
    cdef vector[uint8_t] on_path
    on_path.resize(n)
    if not tree_label(n, token, up, depth, buckets, kinds, chance, text.data(), count, known, decay, counts,
                      on_path.data()):
        return -1
    cdef int64_t gained = 0
    for i in range(k):
        gained += on_path[pick[i]]
    return gained
