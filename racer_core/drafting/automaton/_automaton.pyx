# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython bindings of the C++17 automaton (automaton.hpp).

Every argument is validated here before the C++ object is touched, so a call
that raises leaves the automaton unchanged. Common inputs (lists of Python
ints, aligned native int32/int64 arrays) are checked in C; anything else goes
through racer_core.drafting.automaton._checks, which is also what the reference uses,
so both raise the same exceptions with the same messages.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

cimport numpy as cnp
import numpy as np

from racer_core.drafting.automaton import _checks
from racer_core.drafting.automaton.draft import DraftTree

cnp.import_array()

cdef extern from "automaton.hpp" namespace "racer":
    cdef struct DraftOut:
        int64_t* tokens
        int64_t* position_ids
        int64_t* parents
        uint8_t* sources
        int64_t* context
        int64_t* rank
        double* share
        uint8_t* attn_mask
        int64_t* retrieve_indices
        int64_t* candidates

    cdef cppclass CoreAutomaton "racer::Automaton":
        CoreAutomaton(int32_t, int32_t, int32_t, cbool, cbool) except +
        int32_t max_nodes()
        int32_t min_depth()
        int32_t ngram()
        cbool late_halving()
        cbool pair_rows()
        int32_t pair_count()
        int32_t vocab_size()
        int32_t top_k()
        int32_t node_count()
        void init_logits(int32_t, int32_t) except +
        void update(const int64_t*, int64_t, const int64_t*, const int64_t*) except +
        void insert(const int64_t*, int64_t, int64_t) except +
        void add_tokens(const int64_t*, int64_t) except +
        void trans_tokens(const int64_t*, int64_t) except +
        void reset()
        void build() except +
        int32_t retrieve(int32_t, int32_t, cbool, int32_t) except +
        int32_t draft_leaves()
        int32_t draft_width()
        void fill_draft(const DraftOut&)
        void export_nodes(vector[int32_t]&, vector[int32_t]&, vector[int32_t]&,
                          vector[int32_t]&, vector[int64_t]&) except +
        void state_path(vector[int32_t]&) except +
        void export_pairs(vector[int32_t]&, vector[int32_t]&, vector[int32_t]&) except +
        string check_internal() except +
        void set_redirect_mode(int)

cdef extern from "top_k.hpp" namespace "racer":
    cbool top_k_row(const float*, int64_t, int32_t, int64_t*) nogil
    int32_t kTopKMax


cdef int64_t TOKEN_LIMIT = _checks.TOKEN_LIMIT
cdef int64_t MAX_DRAFT = _checks.MAX_DRAFT


cdef inline bint _native_int_array(cnp.ndarray arr):
    """Aligned, native byte order, 32- or 64-bit signed integers."""
    cdef int typenum = cnp.PyArray_TYPE(arr)
    if not cnp.PyArray_ISBEHAVED_RO(arr):
        return False
    if typenum == cnp.NPY_INT32:
        return True
    return (typenum == cnp.NPY_INT64 or typenum == cnp.NPY_LONGLONG) and cnp.PyArray_ITEMSIZE(arr) == 8


cdef inline int64_t _read(char* p, int itemsize) noexcept nogil:
    if itemsize == 8:
        return (<int64_t*>p)[0]
    return (<int32_t*>p)[0]


cdef inline const void* _int64s(object a, Py_ssize_t n):
    """`a`'s data where it is a native, aligned, C-contiguous int64 array of n items, else NULL."""
    if not cnp.PyArray_Check(a):
        return NULL
    cdef cnp.ndarray arr = <cnp.ndarray>a
    if (cnp.PyArray_NDIM(arr) != 1 or not _native_int_array(arr) or cnp.PyArray_ITEMSIZE(arr) != 8
            or not cnp.PyArray_IS_C_CONTIGUOUS(arr) or cnp.PyArray_DIM(arr, 0) != n):
        return NULL
    return cnp.PyArray_DATA(arr)


cdef class Automaton:
    """Aho-Corasick n-gram trie with LRU leaf eviction plus the copy-logit table."""

    cdef CoreAutomaton* core
    cdef vector[int64_t] buf
    cdef vector[int64_t] rows
    cdef vector[int64_t] prev
    # Set while a method runs: converting arguments can run Python code (a
    # custom __index__, the garbage collector) that must not call back in and
    # overwrite the buffers or the draft being copied out.
    cdef bint busy

    def __cinit__(self, max_nodes=10000, min_depth=2, ngram=10, *, _variant=(False, True)):
        # _variant: (late_halving, pair_rows), set through racer_core.drafting.automaton.variants only
        late_halving, pair_rows = _variant
        cdef int32_t m = _checks.check_param("max_nodes", max_nodes, 2)
        cdef int32_t d = _checks.check_param("min_depth", min_depth, 1)
        cdef int32_t g = _checks.check_param("ngram", ngram, 1)
        cdef cbool late = _checks.check_flag("late_halving", late_halving)
        cdef cbool pairs = _checks.check_flag("pair_rows", pair_rows)
        self.core = new CoreAutomaton(m, d, g, late, pairs)

    def __dealloc__(self):
        del self.core

    # ------------------------------------------------------------ properties

    @property
    def max_nodes(self) -> int:
        return self.core.max_nodes()

    @property
    def min_depth(self) -> int:
        return self.core.min_depth()

    @property
    def ngram(self) -> int:
        return self.core.ngram()

    @property
    def late_halving(self) -> bool:
        """True for the logits tree's older breadth rule (docs/automaton.md)."""
        return self.core.late_halving()

    @property
    def pair_rows(self) -> bool:
        """True when the table keeps rows keyed by (previous token, token) too."""
        return self.core.pair_rows()

    @property
    def pair_count(self) -> int:
        """How many (previous token, token) rows the table holds."""
        return self.core.pair_count()

    @property
    def vocab_size(self):
        """None before init_logits."""
        return self.core.vocab_size() if self.core.vocab_size() > 0 else None

    @property
    def top_k(self):
        """None before init_logits."""
        return self.core.top_k() if self.core.top_k() > 0 else None

    @property
    def node_count(self) -> int:
        return self.core.node_count()

    # ----------------------------------------------------------- input checks

    cdef int _enter(self) except -1:
        if self.busy:
            raise RuntimeError("the automaton was called again from inside one of its own calls")
        self.busy = True
        return 0

    cdef inline int64_t _bound(self):
        return self.core.vocab_size() if self.core.vocab_size() > 0 else TOKEN_LIMIT

    cdef Py_ssize_t _load_slow(self, object tokens, str name, int64_t bound, int64_t lowest,
                               vector[int64_t]* out) except -1:
        values = _checks.check_tokens(name, tokens, bound, lowest)
        cdef Py_ssize_t i, n = len(values)
        out.resize(n)
        for i in range(n):
            out[0][i] = values[i]
        return n

    cdef Py_ssize_t _load(self, object tokens, str name, int64_t lowest=0, bint into_prev=False) except -1:
        """Validated tokens in [lowest, bound) into self.buf (self.prev if
        into_prev); returns how many."""
        cdef int64_t bound = self._bound()
        cdef vector[int64_t]* out = &self.prev if into_prev else &self.buf
        cdef Py_ssize_t i, n, stride
        cdef long long v
        cdef int overflow = 0
        cdef object item
        cdef cnp.ndarray arr
        cdef char* data
        cdef int itemsize
        if type(tokens) is list:
            n = PyList_GET_SIZE(tokens)
            out.resize(n)
            for i in range(n):
                item = <object>PyList_GET_ITEM(tokens, i)
                if type(item) is not int:
                    return self._load_slow(tokens, name, bound, lowest, out)
                v = PyLong_AsLongLongAndOverflow(item, &overflow)
                if overflow or v < lowest or v >= bound:
                    return self._load_slow(tokens, name, bound, lowest, out)
                out[0][i] = v
            return n
        if type(tokens) is tuple:
            n = PyTuple_GET_SIZE(tokens)
            out.resize(n)
            for i in range(n):
                item = <object>PyTuple_GET_ITEM(tokens, i)
                if type(item) is not int:
                    return self._load_slow(tokens, name, bound, lowest, out)
                v = PyLong_AsLongLongAndOverflow(item, &overflow)
                if overflow or v < lowest or v >= bound:
                    return self._load_slow(tokens, name, bound, lowest, out)
                out[0][i] = v
            return n
        if isinstance(tokens, cnp.ndarray):
            arr = <cnp.ndarray>tokens
            if cnp.PyArray_NDIM(arr) == 1 and _native_int_array(arr):
                n = cnp.PyArray_DIM(arr, 0)
                stride = cnp.PyArray_STRIDE(arr, 0)
                itemsize = cnp.PyArray_ITEMSIZE(arr)
                data = cnp.PyArray_BYTES(arr)
                out.resize(n)
                for i in range(n):
                    v = _read(data + i * stride, itemsize)
                    if v < lowest or v >= bound:
                        return self._load_slow(tokens, name, bound, lowest, out)
                    out[0][i] = v
                return n
        return self._load_slow(tokens, name, bound, lowest, out)

    cdef int _load_prev(self, object prev_ids, Py_ssize_t n) except -1:
        """Validated previous tokens (-1: none), one per token, into self.prev."""
        if self._load(prev_ids, "prev_ids", -1, True) != n:
            _checks.check_prev("prev_ids", prev_ids, n, self._bound())  # raises: the wrong length
        return 0

    cdef int _load_rows(self, object topk_ids, Py_ssize_t n) except -1:
        """Validated (n, top_k) rows into self.rows. A row may name tokens at or
        above vocab_size: they have no row of their own (docs/automaton.md)."""
        cdef int64_t bound = TOKEN_LIMIT
        cdef Py_ssize_t k = self.core.top_k()
        cdef Py_ssize_t i, j, s0, s1
        cdef long long v
        cdef cnp.ndarray arr
        cdef char* data
        cdef int itemsize
        cdef bint ok
        self.rows.resize(n * k)
        if isinstance(topk_ids, cnp.ndarray):
            arr = <cnp.ndarray>topk_ids
            if (cnp.PyArray_NDIM(arr) == 2 and _native_int_array(arr)
                    and cnp.PyArray_DIM(arr, 0) == n and cnp.PyArray_DIM(arr, 1) == k):
                s0 = cnp.PyArray_STRIDE(arr, 0)
                s1 = cnp.PyArray_STRIDE(arr, 1)
                itemsize = cnp.PyArray_ITEMSIZE(arr)
                data = cnp.PyArray_BYTES(arr)
                ok = True
                for i in range(n):
                    for j in range(k):
                        v = _read(data + i * s0 + j * s1, itemsize)
                        if v < 0 or v >= bound:
                            ok = False
                        self.rows[i * k + j] = v
                if ok:
                    return 0
        table = _checks.check_rows("topk_ids", topk_ids, n, k, bound)
        for i in range(n):
            row = table[i]
            for j in range(k):
                self.rows[i * k + j] = row[j]
        return 0

    # -------------------------------------------------------------- mutation

    def init_logits(self, vocab_size, top_k) -> None:
        """Create the logits table (vocab_size rows of top_k token ids), all rows empty."""
        self._enter()
        try:
            v, k = _checks.check_table(vocab_size, top_k)
            self.core.init_logits(v, k)
        finally:
            self.busy = False

    def update(self, token_ids, topk_ids, prev_ids=None) -> None:
        """Row token_ids[i] of the logits table becomes topk_ids[i]; so does the
        row of the pair (prev_ids[i], token_ids[i]) where prev_ids[i] >= 0."""
        cdef Py_ssize_t n
        self._enter()
        try:
            if self.core.top_k() == 0:
                raise RuntimeError("update called before init_logits")
            n = self._load(token_ids, "token_ids")
            self._load_rows(topk_ids, n)
            if prev_ids is None:
                self.core.update(self.buf.data(), n, self.rows.data(), NULL)
            else:
                self._load_prev(prev_ids, n)
                self.core.update(self.buf.data(), n, self.rows.data(), self.prev.data())
        finally:
            self.busy = False

    def learn_rows(self, logits, token_ids, parents, prev_token, fed=None):
        """update(token_ids, top, before) with top the k (top_k) largest ids of
        each row of `logits`, largest first, and before[i] the token of node
        i's parent (token_ids[parents[i]]; prev_token where parents[i] < 0):
        one pass for the logits table's learning from a verified tree
        (racer_core/drafting/top_k.py); then, with `fed`, feed(fed) (the
        step's text, in the same call). Returns top, or None, learning and
        feeding nothing, where it cannot answer alone: `logits` not a native,
        C-contiguous float32 array of one row per token, `parents` not such
        an int64 array or naming a node past them, prev_token not a token or
        -1, a row whose top-k is not unique (torch.topk orders it), k past
        TOP_K_MAX or the rows too short. Bad tokens raise as update's and
        feed's do (a bad one in `fed` after the update, as update then feed)."""
        cdef Py_ssize_t n, m, k = self.core.top_k(), i, r
        cdef int64_t prev, up
        cdef int overflow = 0
        cdef cnp.ndarray rows, top
        cdef const float* data
        cdef const int64_t* parent
        cdef int64_t* out
        cdef cbool unique = True
        cdef cnp.npy_intp dims[2]
        if k == 0 or k > kTopKMax or not cnp.PyArray_Check(logits) or type(prev_token) is not int:
            return None
        rows = <cnp.ndarray>logits
        if (cnp.PyArray_NDIM(rows) != 2 or cnp.PyArray_TYPE(rows) != cnp.NPY_FLOAT32
                or not cnp.PyArray_IS_C_CONTIGUOUS(rows) or not cnp.PyArray_ISBEHAVED_RO(rows)):
            return None
        m = cnp.PyArray_DIM(rows, 1)
        prev = PyLong_AsLongLongAndOverflow(prev_token, &overflow)
        if m <= k or overflow or prev < -1 or prev >= self._bound():
            return None
        self._enter()
        try:
            n = self._load(token_ids, "token_ids")
            parent = <const int64_t*>_int64s(parents, n)
            if cnp.PyArray_DIM(rows, 0) != n or parent == NULL:
                return None
            self.prev.resize(n)
            for i in range(n):
                up = parent[i]
                if up >= n:
                    return None
                self.prev[i] = prev if up < 0 else self.buf[up]
            dims[0], dims[1] = n, k
            top = cnp.PyArray_EMPTY(2, dims, cnp.NPY_INT64, 0)  # numpy's C API: no Python call a step
            data = <const float*>cnp.PyArray_DATA(rows)
            out = <int64_t*>cnp.PyArray_DATA(top)
            with nogil:
                for r in range(n):
                    if not top_k_row(data + r * m, m, <int32_t>k, out + r * k):
                        unique = False
                        break
            if not unique:
                return None
            self.core.update(self.buf.data(), n, out, self.prev.data())
            if fed is not None:
                n = self._load(fed, "tokens")
                self.core.add_tokens(self.buf.data(), n)
                self.core.trans_tokens(self.buf.data(), n)
            return top
        finally:
            self.busy = False

    def insert(self, pattern, freq=1) -> None:
        """Insert one token path, adding freq to every node on it."""
        cdef Py_ssize_t n
        cdef int64_t f
        self._enter()
        try:
            n = self._load(pattern, "pattern")
            if type(freq) is int and 1 <= freq <= _checks.PARAM_LIMIT:
                f = freq
            else:
                f = _checks.check_freq(freq)
            self.core.insert(self.buf.data(), n, f)
        finally:
            self.busy = False

    def add_tokens(self, tokens) -> None:
        """Append tokens to the history; insert the n-gram ending at each."""
        cdef Py_ssize_t n
        self._enter()
        try:
            n = self._load(tokens, "tokens")
            self.core.add_tokens(self.buf.data(), n)
        finally:
            self.busy = False

    def trans_tokens(self, tokens) -> None:
        """Advance the matcher state over tokens."""
        cdef Py_ssize_t n
        self._enter()
        try:
            n = self._load(tokens, "tokens")
            self.core.trans_tokens(self.buf.data(), n)
        finally:
            self.busy = False

    def feed(self, tokens) -> None:
        """add_tokens then trans_tokens with the same tokens, validated once."""
        cdef Py_ssize_t n
        self._enter()
        try:
            n = self._load(tokens, "tokens")
            self.core.add_tokens(self.buf.data(), n)
            self.core.trans_tokens(self.buf.data(), n)
        finally:
            self.busy = False

    def reset(self) -> None:
        """Matcher state back to the root; the trie, history and table stay."""
        self._enter()
        self.core.reset()
        self.busy = False

    def build(self) -> None:
        """Recompute every failure link from scratch (they are kept incrementally)."""
        self._enter()
        try:
            self.core.build()
        finally:
            self.busy = False

    # -------------------------------------------------------------- retrieve

    def retrieve(self, next_token, max_num_draft=64, is_chain=False, prev_token=-1):
        """Draft tree below next_token (whose previous token is prev_token, -1
        if unknown): retrieval paths first, then the logits tree."""
        self._enter()
        try:
            return self._retrieve(next_token, max_num_draft, is_chain, prev_token)
        finally:
            self.busy = False

    cdef cnp.npy_intp _retrieved(self, object next_token, object max_num_draft, object is_chain,
                                 object prev_token) except -1:
        """Validates the arguments and drafts; returns the tree's size (fill_draft copies it out)."""
        # The root may be any token a row can hold; one without a row drafts
        # from retrieval alone.
        cdef int64_t bound = TOKEN_LIMIT
        cdef long long t = -1, b = -1, p = -2
        cdef int overflow = 0
        if type(next_token) is int:
            t = PyLong_AsLongLongAndOverflow(next_token, &overflow)
            if overflow:
                t = -1
        if type(max_num_draft) is int:
            b = PyLong_AsLongLongAndOverflow(max_num_draft, &overflow)
            if overflow:
                b = -1
        if type(prev_token) is int:
            p = PyLong_AsLongLongAndOverflow(prev_token, &overflow)
            if overflow:
                p = -2
        if (t < 0 or t >= bound or b < 1 or b > MAX_DRAFT or type(is_chain) is not bool
                or p < -1 or p >= bound):
            t = _checks.check_token("next_token", next_token, bound)
            b = _checks.check_budget(max_num_draft)
            is_chain = _checks.check_flag("is_chain", is_chain)
            p = _checks.check_token("prev_token", prev_token, bound, -1)
        cdef cbool chain = is_chain
        return self.core.retrieve(<int32_t>t, <int32_t>b, chain, <int32_t>p)

    cdef object _retrieve(self, object next_token, object max_num_draft, object is_chain, object prev_token):
        cdef cnp.npy_intp size = self._retrieved(next_token, max_num_draft, is_chain, prev_token)
        cdef cnp.npy_intp dims[2]
        dims[0] = self.core.draft_leaves()
        dims[1] = self.core.draft_width()
        retrieve_indices = cnp.PyArray_EMPTY(2, dims, cnp.NPY_INT64, 0)
        candidates = cnp.PyArray_EMPTY(2, dims, cnp.NPY_INT64, 0)
        cdef DraftOut out
        out.retrieve_indices = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>retrieve_indices)
        out.candidates = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>candidates)
        tokens, parents, position_ids, attn_mask, sources, context, rank, share = self._filled(size, out)
        return DraftTree(tokens, position_ids, parents, sources, attn_mask, retrieve_indices,
                         candidates, context, rank, share)

    cdef tuple _filled(self, cnp.npy_intp size, DraftOut& out):
        """The drafted tree's node columns, copied out by fill_draft (with the
        leaf paths where `out` points at arrays for them): (tokens, parents,
        depths, mask, sources, context, rank, share)."""
        cdef cnp.npy_intp dims[2]
        dims[0] = dims[1] = size
        tokens = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        position_ids = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        parents = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        sources = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT8, 0)
        context = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        rank = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
        share = cnp.PyArray_EMPTY(1, dims, cnp.NPY_FLOAT64, 0)
        attn_mask = cnp.PyArray_EMPTY(2, dims, cnp.NPY_BOOL, 0)
        out.tokens = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>tokens)
        out.position_ids = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>position_ids)
        out.parents = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>parents)
        out.sources = <uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>sources)
        out.context = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>context)
        out.rank = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>rank)
        out.share = <double*>cnp.PyArray_DATA(<cnp.ndarray>share)
        out.attn_mask = <uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>attn_mask)
        self.core.fill_draft(out)
        return tokens, parents, position_ids, attn_mask, sources, context, rank, share

    def retrieve_nodes(self, next_token, max_num_draft, prev_token, bytes source_of_bits not None):
        """retrieve's tree as its node columns alone, for a drafter that
        reads no leaf paths: (tokens, parents, depths, mask, sources, context,
        rank, share), each node's source bits read through `source_of_bits`
        (4 bytes: the value for bits 0 to 3)."""
        if len(source_of_bits) != 4:
            raise ValueError(f"source_of_bits must be 4 bytes, not {len(source_of_bits)}")
        cdef const unsigned char* mapped = source_of_bits
        cdef cnp.npy_intp size, i
        cdef DraftOut out
        cdef uint8_t* bits
        self._enter()
        try:
            size = self._retrieved(next_token, max_num_draft, False, prev_token)
            out.retrieve_indices = out.candidates = NULL  # fill_draft skips the leaf paths
            columns = self._filled(size, out)
            bits = out.sources
            for i in range(size):
                bits[i] = mapped[bits[i] & 3]
            return columns
        finally:
            self.busy = False

    # ---------------------------------------------------------- test helpers

    def snapshot(self) -> dict:
        """{path: (freq, failure-link path)} for every non-root node."""
        cdef vector[int32_t] ids, parents, tokens, fails
        cdef vector[int64_t] freqs
        self.core.export_nodes(ids, parents, tokens, fails, freqs)
        cdef size_t i
        paths = {0: ()}
        for i in range(ids.size()):  # breadth-first: parents come first
            paths[ids[i]] = paths[parents[i]] + (tokens[i],)
        # Failure targets are shallower, so their paths are known by now.
        return {paths[ids[i]]: (freqs[i], paths[fails[i]]) for i in range(ids.size())}

    def state_path(self) -> tuple:
        """Tokens of the matcher state's path."""
        cdef vector[int32_t] out
        self.core.state_path(out)
        return tuple(out)

    def pair_snapshot(self) -> list:
        """[((prev, token), row)] for every pair row, least recently written first."""
        cdef vector[int32_t] prev, tokens, rows
        self.core.export_pairs(prev, tokens, rows)
        cdef size_t i, k = self.core.top_k()
        return [((prev[i], tokens[i]), tuple(rows[i * k + j] for j in range(k))) for i in range(prev.size())]

    def _set_redirect_mode(self, int mode) -> None:
        """Test hook: 0 hybrid (default), 1 failure-subtree walk only, 2 failure-chain scan
        only, 3 failure-subtree walk cut after two visits, then the chain scan."""
        if mode not in (0, 1, 2, 3):
            raise ValueError(f"redirect mode must be 0, 1, 2 or 3, got {mode}")
        self.core.set_redirect_mode(mode)

    def _check_internal(self) -> str:
        """'' when the hidden structures are consistent, else the first fault found."""
        return self.core.check_internal().decode()


TOP_K_MAX = kTopKMax


def top_k_rows(const float[:, ::1] logits not None, int k):
    """(indices, unique): per row of `logits` the indices of its k largest
    values, largest first, and whether that answer is unique (the k + 1
    largest distinct, no NaN). A row not unique is left for torch.topk
    (racer_core/drafting/top_k.py); its indices are then meaningless."""
    cdef Py_ssize_t rows = logits.shape[0], n = logits.shape[1], r
    if k < 1 or k > kTopKMax or n <= k:
        raise ValueError(f"k must be in 1..{min(<Py_ssize_t>kTopKMax, n - 1)} for rows of {n}, not {k}")
    top = np.empty((rows, k), dtype=np.int64)
    unique = np.empty(rows, dtype=np.uint8)
    cdef int64_t[:, ::1] out = top
    cdef uint8_t[::1] ok = unique
    with nogil:
        for r in range(rows):
            ok[r] = top_k_row(&logits[r, 0], n, k, &out[r, 0])
    return top, unique.view(np.bool_)
