// update_values.cpp: the C API of an emitted solver with new values for the same pattern
// (tests/emitted_driver.rs). Reads a matrix written by the test (n as u64, then indptr,
// indices and values, each as a u64 count and the entries), solves A x = A * ones, then
// replaces the values by 2 A (autopcg_gen_update_values) and solves 2 A x = 2 A * ones. Scaling
// by 2 is exact, so both solves must take the same iterations and give the same x.
// Prints: iterations of each solve, whether the solutions are identical, the largest |x - 1|.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "autopcg_generated.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    std::ifstream f(argv[1], std::ios::binary);
    std::vector<unsigned char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t at = 0;
    auto u64 = [&]() {
        uint64_t v;
        std::memcpy(&v, b.data() + at, 8);
        at += 8;
        return v;
    };
    const int32_t n = (int32_t)u64();
    std::vector<int32_t> ptr(u64()), idx;
    for (auto &p : ptr) { uint32_t v; std::memcpy(&v, b.data() + at, 4); at += 4; p = (int32_t)v; }
    idx.resize(u64());
    for (auto &p : idx) { uint32_t v; std::memcpy(&v, b.data() + at, 4); at += 4; p = (int32_t)v; }
    std::vector<double> val(u64());
    for (auto &p : val) { std::memcpy(&p, b.data() + at, 8); at += 8; }

    autopcg_gen_solver *s = nullptr;
    if (autopcg_gen_setup(n, ptr.data(), idx.data(), val.data(), 0, 0, &s) != AUTOPCG_GEN_OK) {
        std::fprintf(stderr, "setup: %s\n", autopcg_gen_last_error());
        return 1;
    }
    auto rhs = [&](const std::vector<double> &v) {
        std::vector<double> r((size_t)n, 0.0);
        for (int32_t i = 0; i < n; ++i)
            for (int32_t q = ptr[i]; q < ptr[i + 1]; ++q) r[(size_t)i] += v[(size_t)q];
        return r;
    };
    autopcg_gen_params prm;
    autopcg_gen_default_params(&prm);
    autopcg_gen_info i1, i2;
    std::vector<double> x1((size_t)n, 0.0), x2((size_t)n, 0.0);
    std::vector<double> b1 = rhs(val);
    if (autopcg_gen_solve(s, b1.data(), x1.data(), &prm, &i1) != AUTOPCG_GEN_OK) {
        std::fprintf(stderr, "solve: %s\n", autopcg_gen_last_error());
        return 1;
    }
    std::vector<double> val2(val);
    for (double &v : val2) v *= 2.0;
    if (autopcg_gen_update_values(s, val2.data()) != AUTOPCG_GEN_OK) {
        std::fprintf(stderr, "update: %s\n", autopcg_gen_last_error());
        return 1;
    }
    std::vector<double> b2 = rhs(val2);
    if (autopcg_gen_solve(s, b2.data(), x2.data(), &prm, &i2) != AUTOPCG_GEN_OK) {
        std::fprintf(stderr, "solve: %s\n", autopcg_gen_last_error());
        return 1;
    }
    double err = 0.0;
    for (double v : x2) err = std::fmax(err, std::fabs(v - 1.0));
    std::printf("%lld %lld %d %.3e\n", (long long)i1.iterations, (long long)i2.iterations,
                x1 == x2 ? 1 : 0, err);
    autopcg_gen_destroy(s);
    return i1.converged && i2.converged ? 0 : 1;
}
