// host_build_check.cpp: runs the emitted host_build.hpp on a matrix written by
// tests/emit.rs and writes what it builds, for a bit-for-bit comparison with the Rust code.
//
//   host_build_check IN OUT
//
// IN: n (u64), indptr, indices (u64 count + u32 each), values (u64 count + f64 bits each),
// preconditioner kind (1 jacobi, 2 factored SSOR-AI, 3 explicit SSOR-AI), order, omega (f64).
// OUT: the preconditioner's diagonal, then K and K^T (factored) or M (explicit) as CSR arrays,
// then A as ELL (width, columns, values), DIA (offsets, band), COO (rows, columns, values) and
// HYB with the one-third split (split, ELL columns and values, COO rows, columns and values).
// Padding limits are off (both sides).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <vector>

#include "host_build.hpp"

namespace {

struct In {
    std::vector<unsigned char> b;
    size_t at = 0;
    uint64_t u64() {
        uint64_t v;
        std::memcpy(&v, b.data() + at, 8);
        at += 8;
        return v;
    }
    template <typename T> std::vector<T> vec() {
        std::vector<T> v(u64());
        if (!v.empty()) std::memcpy(v.data(), b.data() + at, v.size() * sizeof(T));
        at += v.size() * sizeof(T);
        return v;
    }
};

struct Out {
    std::vector<unsigned char> b;
    void u64(uint64_t v) {
        const unsigned char *p = reinterpret_cast<const unsigned char *>(&v);
        b.insert(b.end(), p, p + 8);
    }
    template <typename T> void vec(const std::vector<T> &v) {
        u64(v.size());
        const unsigned char *p = reinterpret_cast<const unsigned char *>(v.data());
        b.insert(b.end(), p, p + v.size() * sizeof(T));
    }
    void csr(const apg::Csr &m) {
        vec(m.indptr);
        vec(m.indices);
        vec(m.vals);
    }
};

} // namespace

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    std::ifstream f(argv[1], std::ios::binary);
    In in;
    in.b.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    apg::Csr a;
    a.nrows = a.ncols = (uint32_t)in.u64();
    a.indptr = in.vec<uint32_t>();
    a.indices = in.vec<uint32_t>();
    a.vals = in.vec<double>();
    const int kind = (int)in.u64();
    const int order = (int)in.u64();
    double omega;
    uint64_t ob = in.u64();
    std::memcpy(&omega, &ob, 8);
    Out out;
    try {
        apg::Precond p = apg::build_precond(a, kind, order, omega);
        out.vec(p.inv_diag);
        if (kind == apg::kSsorFactored) {
            out.csr(p.k);
            out.csr(p.kt);
        } else if (kind == apg::kSsorExplicit) {
            out.csr(p.m);
        }
        const apg::PaddingLimits unlimited{std::numeric_limits<double>::infinity(),
                                           std::numeric_limits<uint64_t>::max()};
        apg::Ell e = apg::to_ell(a, unlimited);
        out.u64(e.width);
        out.vec(e.cols);
        out.vec(e.vals);
        apg::Dia d = apg::to_dia(a, unlimited);
        out.vec(d.offsets);
        out.vec(d.data);
        apg::Coo c = apg::to_coo(a);
        out.vec(c.rows);
        out.vec(c.cols);
        out.vec(c.vals);
        apg::Hyb h = apg::to_hyb(a, -1, unlimited);
        out.u64(h.ell.width);
        out.vec(h.ell.cols);
        out.vec(h.ell.vals);
        out.vec(h.coo.rows);
        out.vec(h.coo.cols);
        out.vec(h.coo.vals);
    } catch (const apg::Error &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    std::ofstream o(argv[2], std::ios::binary);
    o.write(reinterpret_cast<const char *>(out.b.data()), (std::streamsize)out.b.size());
    return o ? 0 : 1;
}
