// host_build.hpp: the host side of a solver emitted by {{VERSION}}: the preconditioner built from CSR
// arrays, and the conversions of a CSR matrix to the storage formats the kernels read. Plain
// C++17 (no CUDA), the same arithmetic in the same order as autopcg's Rust code (crates/solver
// precond.rs, crates/sparse ell.rs, dia.rs, coo.rs, hyb.rs), so that the emitted solver and
// `autopcg solve --plan` build bit-identical operands.
//
// Errors are thrown as apg::Error with a message naming the row and value at fault.
#ifndef AUTOPCG_GENERATED_HOST_BUILD_HPP
#define AUTOPCG_GENERATED_HOST_BUILD_HPP

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace apg {

// Column index of a padded ELL slot (ELL_PAD of the kernels).
constexpr uint32_t kEllPad = 0xffffffffu;

struct Error : std::runtime_error {
    explicit Error(const std::string &what) : std::runtime_error(what) {}
};

inline std::string fmt_double(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

inline std::string fmt_short(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

// A CSR matrix with 0-based 32-bit indices, columns strictly ascending in every row.
struct Csr {
    uint32_t nrows = 0;
    uint32_t ncols = 0;
    std::vector<uint32_t> indptr;  // nrows + 1
    std::vector<uint32_t> indices; // nnz
    std::vector<double> vals;      // nnz

    size_t nnz() const { return vals.size(); }
    uint32_t row_len(uint32_t i) const { return indptr[i + 1] - indptr[i]; }
};

// Limits on padded formats (PaddingLimits of crates/sparse).
struct PaddingLimits {
    double max_fill_ratio;
    uint64_t max_bytes;
};

// Stored slots over stored entries: 1 for an empty matrix, infinite with slots but no entry.
inline double fill_ratio(uint64_t slots, size_t nnz) {
    if (nnz == 0) return slots == 0 ? 1.0 : INFINITY;
    return (double)slots / (double)nnz;
}

inline void check_padding(const char *format, uint64_t slots, size_t nnz, uint64_t bytes,
                          const PaddingLimits &limits) {
    const double fill = fill_ratio(slots, nnz);
    if (fill <= limits.max_fill_ratio && bytes <= limits.max_bytes) return;
    throw Error(std::string(format) + " needs " + std::to_string(slots) + " slots for " +
                std::to_string(nnz) + " entries (fill ratio " + fmt_short(fill) + ", limit " +
                fmt_short(limits.max_fill_ratio) + "; " + std::to_string(bytes) +
                " bytes, limit " + std::to_string(limits.max_bytes) + ")");
}

// Value of (i, i), 0 when not stored (binary search: columns are sorted).
inline std::vector<double> diagonal(const Csr &a) {
    const uint32_t m = std::min(a.nrows, a.ncols);
    std::vector<double> d(m, 0.0);
    for (uint32_t i = 0; i < m; ++i) {
        const uint32_t *b = a.indices.data() + a.indptr[i];
        const uint32_t *e = a.indices.data() + a.indptr[i + 1];
        const uint32_t *p = std::lower_bound(b, e, i);
        if (p != e && *p == i) d[i] = a.vals[a.indptr[i] + (uint32_t)(p - b)];
    }
    return d;
}

// The diagonal, every entry positive and finite (else the first row that is not, 1-based, its
// number shifted by `row_offset`: the first row of a block of a larger matrix).
inline std::vector<double> positive_diagonal(const Csr &a, const char *precond,
                                             uint64_t row_offset = 0) {
    std::vector<double> d = diagonal(a);
    for (size_t i = 0; i < d.size(); ++i) {
        if (!(d[i] > 0.0 && std::isfinite(d[i]))) {
            throw Error(std::string(precond) + " needs a positive diagonal, but row " +
                        std::to_string(row_offset + i + 1) + " has diagonal " +
                        fmt_double(d[i]));
        }
    }
    return d;
}

// The transpose (entries of each row in ascending column order).
inline Csr transpose(const Csr &a) {
    Csr t;
    t.nrows = a.ncols;
    t.ncols = a.nrows;
    t.indptr.assign((size_t)a.ncols + 1, 0);
    for (uint32_t c : a.indices) t.indptr[(size_t)c + 1] += 1;
    for (size_t j = 0; j < a.ncols; ++j) t.indptr[j + 1] += t.indptr[j];
    t.indices.resize(a.nnz());
    t.vals.resize(a.nnz());
    std::vector<uint32_t> next(t.indptr.begin(), t.indptr.end() - 1);
    for (uint32_t i = 0; i < a.nrows; ++i) {
        for (uint32_t k = a.indptr[i]; k < a.indptr[i + 1]; ++k) {
            const uint32_t p = next[a.indices[k]]++;
            t.indices[p] = i;
            t.vals[p] = a.vals[k];
        }
    }
    return t;
}

// A sparse accumulator for one row at a time: sums the values of each column in the order they
// are added (the first value of a column is stored as is), and gives the columns sorted.
class RowAccumulator {
  public:
    explicit RowAccumulator(uint32_t ncols) : vals_(ncols, 0.0), seen_(ncols, 0) {}
    void add(uint32_t col, double v) {
        if (seen_[col]) {
            vals_[col] += v;
        } else {
            seen_[col] = 1;
            vals_[col] = v;
            cols_.push_back(col);
        }
    }
    // Appends the row to (indices, vals) sorted by column and empties the accumulator.
    void drain(std::vector<uint32_t> &indices, std::vector<double> &vals) {
        std::sort(cols_.begin(), cols_.end());
        for (uint32_t c : cols_) {
            indices.push_back(c);
            vals.push_back(vals_[c]);
            seen_[c] = 0;
        }
        cols_.clear();
    }

  private:
    std::vector<double> vals_;
    std::vector<unsigned char> seen_;
    std::vector<uint32_t> cols_;
};

inline void push_row_end(Csr &m) {
    if (m.indices.size() >= 0xffffffffull) {
        throw Error("the preconditioner has more than 4294967294 nonzeros, beyond 32-bit "
                    "indices");
    }
    m.indptr.push_back((uint32_t)m.indices.size());
}

// An empty n x n matrix whose rows are appended with push_row_end: indptr holds the leading 0
// and has room for the n row ends.
inline Csr square_csr(uint32_t n) {
    Csr m;
    m.nrows = n;
    m.ncols = n;
    m.indptr.reserve((size_t)n + 1);
    m.indptr.push_back(0);
    return m;
}

// K = I - X (order 1) or K = I - X + X^2 (order 2), X = omega L D^-1 (L the strict lower
// triangle of a).
inline Csr ssor_k(const Csr &a, const std::vector<double> &d, double omega, int order) {
    const uint32_t n = a.nrows;
    Csr k = square_csr(n);
    if (order == 1) {
        for (uint32_t i = 0; i < n; ++i) {
            for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
                const uint32_t j = a.indices[q];
                if (j < i) {
                    k.indices.push_back(j);
                    k.vals.push_back(-(omega * a.vals[q] / d[j]));
                }
            }
            k.indices.push_back(i);
            k.vals.push_back(1.0);
            push_row_end(k);
        }
        return k;
    }
    // X_ij = omega a_ij / d_j for j < i.
    Csr x = square_csr(n);
    for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
            const uint32_t j = a.indices[q];
            if (j < i) {
                x.indices.push_back(j);
                x.vals.push_back(omega * a.vals[q] / d[j]);
            }
        }
        push_row_end(x);
    }
    RowAccumulator acc(n);
    for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t q = x.indptr[i]; q < x.indptr[i + 1]; ++q) acc.add(x.indices[q], -x.vals[q]);
        for (uint32_t q = x.indptr[i]; q < x.indptr[i + 1]; ++q) {
            const uint32_t kk = x.indices[q];
            const double xik = x.vals[q];
            for (uint32_t r = x.indptr[kk]; r < x.indptr[kk + 1]; ++r) {
                acc.add(x.indices[r], xik * x.vals[r]);
            }
        }
        acc.add(i, 1.0);
        acc.drain(k.indices, k.vals);
        push_row_end(k);
    }
    return k;
}

// K^T diag(s) K given kt = K^T: entry (i, j) sums (K_qi K_qj) s_q over q ascending.
inline Csr gram_product(const Csr &kt, const Csr &k, const std::vector<double> &s) {
    const uint32_t n = k.ncols;
    Csr m = square_csr(n);
    RowAccumulator acc(n);
    for (uint32_t i = 0; i < n; ++i) {
        for (uint32_t p = kt.indptr[i]; p < kt.indptr[i + 1]; ++p) {
            const uint32_t q = kt.indices[p];
            const double kqi = kt.vals[p];
            const double sq = s[q];
            for (uint32_t r = k.indptr[q]; r < k.indptr[q + 1]; ++r) {
                acc.add(k.indices[r], (kqi * k.vals[r]) * sq);
            }
        }
        acc.drain(m.indices, m.vals);
        push_row_end(m);
    }
    return m;
}

// What the preconditioner kinds of plan.h ask for.
enum PrecondKind { kNone = 0, kJacobi = 1, kSsorFactored = 2, kSsorExplicit = 3 };

struct Precond {
    int kind = kNone;
    std::vector<double> inv_diag; // Jacobi: 1 / d; factored SSOR-AI: omega (2 - omega) / d
    Csr k, kt;                    // factored SSOR-AI: K and K^T diag(inv_diag)
    Csr m;                        // explicit SSOR-AI
};

// `kind` (order and omega for SSOR-AI) built from `a`; `row_offset` shifts the row an error
// names (a block of a larger matrix whose first row is row_offset).
inline Precond build_precond(const Csr &a, int kind, int order, double omega,
                             uint64_t row_offset = 0) {
    Precond p;
    p.kind = kind;
    if (kind == kNone) return p;
    if (kind == kJacobi) {
        std::vector<double> d = positive_diagonal(a, "jacobi", row_offset);
        p.inv_diag.resize(d.size());
        for (size_t i = 0; i < d.size(); ++i) p.inv_diag[i] = 1.0 / d[i];
        return p;
    }
    if (order != 1 && order != 2) throw Error("SSOR-AI order must be 1 or 2");
    if (!(std::isfinite(omega) && omega > 0.0 && omega < 2.0)) {
        throw Error("SSOR relaxation factor omega must be in (0, 2), got " + fmt_double(omega));
    }
    std::vector<double> d =
        positive_diagonal(a, order == 2 ? "ssor-ai2" : "ssor-ai", row_offset);
    Csr k = ssor_k(a, d, omega, order);
    const double scale = omega * (2.0 - omega);
    std::vector<double> s(d.size());
    for (size_t i = 0; i < d.size(); ++i) s[i] = scale / d[i];
    Csr kt = transpose(k);
    if (kind == kSsorFactored) {
        // K^T diag(s): the diagonal scaling folded into K^T's columns, so that the solver
        // applies M^-1 = K^T diag(s) K with two products.
        for (size_t q = 0; q < kt.vals.size(); ++q) kt.vals[q] *= s[kt.indices[q]];
        p.k = std::move(k);
        p.kt = std::move(kt);
        p.inv_diag = std::move(s);
    } else {
        p.m = gram_product(kt, k, s);
    }
    return p;
}

// ------------------------------------------------------------------------------- formats

// Column-major ELLPACK: slot k of row i at k * nrows + i.
struct Ell {
    uint32_t width = 0;
    std::vector<uint32_t> cols;
    std::vector<double> vals;
};

inline uint32_t max_row_len(const Csr &a) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < a.nrows; ++i) m = std::max(m, a.row_len(i));
    return m;
}

// The first `width` entries of every row.
inline Ell to_ell_width(const Csr &a, uint32_t width) {
    Ell e;
    e.width = width;
    const size_t n = a.nrows;
    e.cols.assign((size_t)width * n, kEllPad);
    e.vals.assign((size_t)width * n, 0.0);
    for (uint32_t i = 0; i < a.nrows; ++i) {
        const uint32_t len = std::min(a.row_len(i), width);
        for (uint32_t k = 0; k < len; ++k) {
            e.cols[(size_t)k * n + i] = a.indices[a.indptr[i] + k];
            e.vals[(size_t)k * n + i] = a.vals[a.indptr[i] + k];
        }
    }
    return e;
}

inline Ell to_ell(const Csr &a, const PaddingLimits &limits) {
    const uint32_t k = max_row_len(a);
    const uint64_t slots = (uint64_t)k * a.nrows;
    check_padding("ELL", slots, a.nnz(), slots * 12, limits);
    return to_ell_width(a, k);
}

// Diagonal storage: offsets ascending, data[d * nrows + i] = A[i][i + offsets[d]].
struct Dia {
    std::vector<int32_t> offsets;
    std::vector<double> data;
};

inline Dia to_dia(const Csr &a, const PaddingLimits &limits) {
    Dia out;
    const uint64_t n = a.nrows, m = a.ncols;
    if (n == 0 || m == 0) {
        check_padding("DIA", 0, a.nnz(), 0, limits);
        return out;
    }
    // Bit b stands for offset b - (n - 1).
    std::vector<int32_t> rank(n + m - 1, -1);
    for (uint32_t i = 0; i < a.nrows; ++i) {
        for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
            rank[a.indices[q] + (n - 1) - i] = 0;
        }
    }
    int32_t ndiag = 0;
    for (size_t b = 0; b < rank.size(); ++b) {
        if (rank[b] == 0) {
            rank[b] = ndiag++;
            out.offsets.push_back((int32_t)((int64_t)b - (int64_t)(n - 1)));
        }
    }
    const uint64_t slots = (uint64_t)ndiag * n;
    check_padding("DIA", slots, a.nnz(), slots * 8 + (uint64_t)ndiag * 4, limits);
    out.data.assign(slots, 0.0);
    for (uint32_t i = 0; i < a.nrows; ++i) {
        for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
            const int32_t d = rank[a.indices[q] + (n - 1) - i];
            out.data[(size_t)d * n + i] = a.vals[q];
        }
    }
    return out;
}

// Row-sorted COO.
struct Coo {
    std::vector<uint32_t> rows, cols;
    std::vector<double> vals;
};

inline Coo to_coo(const Csr &a) {
    Coo c;
    c.rows.resize(a.nnz());
    for (uint32_t i = 0; i < a.nrows; ++i) {
        std::fill(c.rows.begin() + a.indptr[i], c.rows.begin() + a.indptr[i + 1], i);
    }
    c.cols = a.indices;
    c.vals = a.vals;
    return c;
}

// The one-third rule: the largest h such that at least ceil(nrows / 3) rows have h or more
// entries (0 for a matrix without rows).
inline uint32_t one_third_split(const Csr &a) {
    std::vector<uint64_t> hist((size_t)max_row_len(a) + 1, 0);
    for (uint32_t i = 0; i < a.nrows; ++i) hist[a.row_len(i)] += 1;
    const uint64_t need = ((uint64_t)a.nrows + 2) / 3;
    uint64_t at_least = 0;
    for (size_t h = hist.size() - 1; h >= 1; --h) {
        at_least += hist[h];
        if (at_least >= need) return (uint32_t)h;
    }
    return 0;
}

// ELL for the first h entries of every row (h = split, or the one-third rule when split < 0),
// COO for the rest in row order.
struct Hyb {
    Ell ell;
    Coo coo;
};

inline Hyb to_hyb(const Csr &a, long long split, const PaddingLimits &limits) {
    const uint32_t h = split < 0 ? one_third_split(a) : (uint32_t)split;
    uint64_t in_ell = 0;
    for (uint32_t i = 0; i < a.nrows; ++i) in_ell += std::min(a.row_len(i), h);
    const uint64_t slots = (uint64_t)h * a.nrows;
    check_padding("HYB", slots, (size_t)in_ell, slots * 12, limits);
    Hyb out;
    out.ell = to_ell_width(a, h);
    for (uint32_t i = 0; i < a.nrows; ++i) {
        for (uint32_t q = a.indptr[i] + h; q < a.indptr[i + 1]; ++q) {
            out.coo.rows.push_back(i);
            out.coo.cols.push_back(a.indices[q]);
            out.coo.vals.push_back(a.vals[q]);
        }
    }
    return out;
}

// Checks CSR arrays as a caller gives them (index_base 0 or 1; both triangles) and returns the
// 0-based matrix, or throws naming the row and value at fault.
inline Csr csr_from_arrays(int32_t n, const int32_t *row_ptr, const int32_t *col_idx,
                           const double *values, int32_t base) {
    if (n < 0) throw Error("n = " + std::to_string(n) + " is negative");
    if (base != 0 && base != 1) {
        throw Error("index_base must be 0 or 1, got " + std::to_string(base));
    }
    if (row_ptr == nullptr || (n > 0 && (col_idx == nullptr || values == nullptr))) {
        throw Error("a CSR array is NULL");
    }
    Csr a;
    a.nrows = (uint32_t)n;
    a.ncols = (uint32_t)n;
    a.indptr.resize((size_t)n + 1);
    if (row_ptr[0] != base) {
        throw Error("row_ptr[0] = " + std::to_string(row_ptr[0]) + ", expected the index base " +
                    std::to_string(base));
    }
    for (int32_t i = 0; i <= n; ++i) {
        if (i > 0 && row_ptr[i] < row_ptr[i - 1]) {
            throw Error("row_ptr decreases at row " + std::to_string(i - 1 + base) + ": " +
                        std::to_string(row_ptr[i - 1]) + " then " + std::to_string(row_ptr[i]));
        }
        a.indptr[i] = (uint32_t)(row_ptr[i] - base);
    }
    const size_t nnz = a.indptr[n];
    a.indices.resize(nnz);
    a.vals.assign(values, values + nnz);
    for (int32_t i = 0; i < n; ++i) {
        for (uint32_t q = a.indptr[i]; q < a.indptr[i + 1]; ++q) {
            const int64_t c = (int64_t)col_idx[q] - base;
            if (c < 0 || c >= n) {
                throw Error("row " + std::to_string(i + base) + ": column index " +
                            std::to_string(col_idx[q]) + " is outside 1..n (base " +
                            std::to_string(base) + ", n = " + std::to_string(n) + ")");
            }
            if (q > a.indptr[i] && (uint32_t)c <= a.indices[q - 1]) {
                throw Error("row " + std::to_string(i + base) +
                            ": column indices must be strictly ascending, found " +
                            std::to_string(col_idx[q - 1]) + " then " +
                            std::to_string(col_idx[q]));
            }
            if (!std::isfinite(a.vals[q])) {
                throw Error("row " + std::to_string(i + base) + ", column " +
                            std::to_string(col_idx[q]) + ": value " + fmt_double(a.vals[q]) +
                            " is not finite");
            }
            a.indices[q] = (uint32_t)c;
        }
    }
    return a;
}

} // namespace apg

#endif // AUTOPCG_GENERATED_HOST_BUILD_HPP
