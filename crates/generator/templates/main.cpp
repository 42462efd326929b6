// main.cpp: the command-line solver of a solver emitted by {{VERSION}} from one plan.
//
//   autopcg_gen_solve A.mtx [--rhs b.mtx] [--out x.mtx] [--tol 1e-8] [--max-iter 10000]
//                     [--history] [--force] [--any-device]
//
// Reads A (Matrix Market coordinate, real or integer, general or symmetric: the lower triangle
// is kept and mirrored, as `autopcg solve` reads it), b (default b = A * ones, so the exact
// solution is all ones), solves through the C API and prints one JSON object with the fields of
// `autopcg solve --json`, with its `reason` and `replacements`.
// Exit codes: 0 converged, 1 ran but did not converge (or not SPD), 2 bad input or usage.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../include/autopcg_generated.h"

namespace {

struct Usage : std::runtime_error {
    explicit Usage(const std::string &m) : std::runtime_error(m) {}
};

std::string lower(std::string s) {
    for (char &c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

std::string num(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

std::string jstr(const std::string &s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                o += buf;
            } else {
                o += (char)c;
            }
        }
    }
    return o + "\"";
}

// A Matrix Market file split into its header and data lines.
struct MmFile {
    std::string format, field, symmetry;
    std::vector<std::pair<size_t, std::string>> lines; // (1-based line number, text)
};

MmFile read_mm(const std::string &path) {
    std::ifstream in(path);
    if (!in) throw Usage(path + ": cannot be opened");
    MmFile f;
    std::string line;
    size_t no = 0;
    bool banner = false;
    while (std::getline(in, line)) {
        ++no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!banner) {
            std::istringstream ss(line);
            std::string mm, object;
            ss >> mm >> object >> f.format >> f.field >> f.symmetry;
            if (lower(mm) != "%%matrixmarket" || lower(object) != "matrix") {
                throw Usage(path + " line 1: not a Matrix Market matrix banner: '" + line + "'");
            }
            f.format = lower(f.format);
            f.field = lower(f.field);
            f.symmetry = lower(f.symmetry);
            banner = true;
            continue;
        }
        const size_t p = line.find_first_not_of(" \t");
        if (p == std::string::npos || line[p] == '%') continue;
        f.lines.emplace_back(no, line);
    }
    if (!banner) throw Usage(path + ": empty file");
    if (f.field != "real" && f.field != "integer" && f.field != "double") {
        throw Usage(path + " line 1: field '" + f.field + "' is not supported (real or integer)");
    }
    if (f.lines.empty()) throw Usage(path + ": no size line");
    return f;
}

double parse_double(const std::string &path, size_t line, const std::string &tok) {
    char *end = nullptr;
    const double v = std::strtod(tok.c_str(), &end);
    if (end == tok.c_str() || *end != '\0' || !std::isfinite(v)) {
        throw Usage(path + " line " + std::to_string(line) + ": value '" + tok +
                    "' is not a finite number");
    }
    return v;
}

long long parse_index(const std::string &path, size_t line, const std::string &tok) {
    char *end = nullptr;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (end == tok.c_str() || *end != '\0') {
        throw Usage(path + " line " + std::to_string(line) + ": '" + tok + "' is not an index");
    }
    return v;
}

// The symmetric matrix of a coordinate file, in 0-based CSR with both triangles: the lower
// triangle (diagonal included; duplicates summed) and its mirror. What lies above the diagonal
// must agree with its mirror (relative 1e-10) and is then dropped.
struct Matrix {
    int32_t n = 0;
    std::vector<int32_t> row_ptr, col_idx;
    std::vector<double> vals;
};

Matrix read_matrix(const std::string &path) {
    MmFile f = read_mm(path);
    if (f.format != "coordinate") throw Usage(path + " line 1: the matrix must be in coordinate format");
    if (f.symmetry != "general" && f.symmetry != "symmetric") {
        throw Usage(path + " line 1: symmetry '" + f.symmetry + "' is not supported");
    }
    std::istringstream size(f.lines[0].second);
    long long nr = -1, nc = -1, nz = -1;
    size >> nr >> nc >> nz;
    if (nr < 0 || nc < 0 || nz < 0) throw Usage(path + " line " + std::to_string(f.lines[0].first) + ": bad size line");
    if (nr != nc) throw Usage(path + ": the matrix is " + std::to_string(nr) + " x " + std::to_string(nc) + ", not square");
    if (nr > 2147483646LL) throw Usage(path + ": too many rows for 32-bit indices");
    if ((long long)f.lines.size() - 1 != nz) {
        throw Usage(path + ": the size line announces " + std::to_string(nz) + " entries but the file has " +
                    std::to_string(f.lines.size() - 1));
    }
    struct T {
        int32_t i, j;
        double v;
        size_t line;
    };
    std::vector<T> lo, up;
    for (size_t k = 1; k < f.lines.size(); ++k) {
        const size_t ln = f.lines[k].first;
        std::istringstream ss(f.lines[k].second);
        std::string a, b, c;
        ss >> a >> b >> c;
        const long long i = parse_index(path, ln, a), j = parse_index(path, ln, b);
        if (i < 1 || i > nr || j < 1 || j > nc) {
            throw Usage(path + " line " + std::to_string(ln) + ": index (" + a + ", " + b + ") is outside the " +
                        std::to_string(nr) + " x " + std::to_string(nc) + " matrix");
        }
        const double v = parse_double(path, ln, c);
        T t{(int32_t)(i - 1), (int32_t)(j - 1), v, ln};
        (t.i >= t.j ? lo : up).push_back(t);
    }
    auto by_pos = [](const T &x, const T &y) { return x.i != y.i ? x.i < y.i : x.j < y.j; };
    std::stable_sort(lo.begin(), lo.end(), by_pos);
    std::vector<T> low;
    for (const T &t : lo) {
        if (!low.empty() && low.back().i == t.i && low.back().j == t.j) {
            low.back().v += t.v;
        } else {
            low.push_back(t);
        }
    }
    for (const T &t : up) {
        T key{t.j, t.i, 0.0, 0};
        auto it = std::lower_bound(low.begin(), low.end(), key, by_pos);
        const bool found = it != low.end() && it->i == t.j && it->j == t.i;
        const double w = found ? it->v : 0.0;
        if (f.symmetry == "symmetric" && !found) {
            throw Usage(path + " line " + std::to_string(t.line) +
                        ": an entry above the diagonal of a symmetric matrix whose mirror is not given");
        }
        if (std::fabs(t.v - w) > 1e-10 * std::max(std::fabs(t.v), std::fabs(w))) {
            throw Usage(path + " line " + std::to_string(t.line) + ": A(" + std::to_string(t.i + 1) + ", " +
                        std::to_string(t.j + 1) + ") = " + num(t.v) + " but its mirror is " + num(w) +
                        ": the matrix is not symmetric");
        }
    }
    // Both triangles: row i holds the lower entries (i, j <= i) and the mirrors (i, j > i) of
    // the lower entries (j, i).
    Matrix m;
    m.n = (int32_t)nr;
    std::vector<int64_t> count((size_t)nr + 1, 0);
    for (const T &t : low) {
        count[(size_t)t.i + 1] += 1;
        if (t.i != t.j) count[(size_t)t.j + 1] += 1;
    }
    for (size_t i = 0; i < (size_t)nr; ++i) count[i + 1] += count[i];
    if (count[(size_t)nr] > 2147483646LL) throw Usage(path + ": too many entries for 32-bit indices");
    m.row_ptr.assign(count.begin(), count.end());
    m.col_idx.resize((size_t)count[(size_t)nr]);
    m.vals.resize((size_t)count[(size_t)nr]);
    std::vector<int64_t> next(count.begin(), count.end() - 1);
    // Lower entries come in row order, so each row receives its lower part (ascending) first;
    // then the mirrors, ascending too because `low` is sorted by row.
    for (const T &t : low) {
        const int64_t p = next[(size_t)t.i]++;
        m.col_idx[(size_t)p] = t.j;
        m.vals[(size_t)p] = t.v;
    }
    for (const T &t : low) {
        if (t.i == t.j) continue;
        const int64_t p = next[(size_t)t.j]++;
        m.col_idx[(size_t)p] = t.i;
        m.vals[(size_t)p] = t.v;
    }
    return m;
}

std::vector<double> read_vector(const std::string &path) {
    MmFile f = read_mm(path);
    std::istringstream size(f.lines[0].second);
    long long nr = -1, nc = -1, nz = -1;
    size >> nr >> nc >> nz;
    if (nr < 0 || nc != 1) throw Usage(path + ": a right-hand side must be an n x 1 matrix");
    std::vector<double> v((size_t)nr, 0.0);
    if (f.format == "array") {
        if ((long long)f.lines.size() - 1 != nr) throw Usage(path + ": expected " + std::to_string(nr) + " values");
        for (size_t k = 1; k < f.lines.size(); ++k) {
            std::istringstream ss(f.lines[k].second);
            std::string a;
            ss >> a;
            v[k - 1] = parse_double(path, f.lines[k].first, a);
        }
        return v;
    }
    for (size_t k = 1; k < f.lines.size(); ++k) {
        const size_t ln = f.lines[k].first;
        std::istringstream ss(f.lines[k].second);
        std::string a, b, c;
        ss >> a >> b >> c;
        const long long i = parse_index(path, ln, a);
        if (i < 1 || i > nr || parse_index(path, ln, b) != 1) {
            throw Usage(path + " line " + std::to_string(ln) + ": index outside the vector");
        }
        v[(size_t)(i - 1)] += parse_double(path, ln, c);
    }
    return v;
}

void write_vector(const std::string &path, const std::vector<double> &x) {
    std::FILE *f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw Usage(path + ": cannot be written");
    std::fprintf(f, "%%%%MatrixMarket matrix array real general\n%zu 1\n", x.size());
    for (double v : x) std::fprintf(f, "%.17g\n", v);
    if (std::fclose(f) != 0) throw Usage(path + ": cannot be written");
}

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

const char *kUsage =
    "usage: autopcg_gen_solve A.mtx [--rhs b.mtx] [--out x.mtx] [--tol T] [--max-iter N] "
    "[--history] [--force] [--any-device]";

int run(int argc, char **argv) {
    std::string matrix, rhs, out;
    autopcg_gen_params prm;
    autopcg_gen_default_params(&prm);
    bool force = false, any_device = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&](const char *name) -> std::string {
            if (i + 1 >= argc) throw Usage(std::string(name) + " needs a value");
            return argv[++i];
        };
        if (a == "--rhs") {
            rhs = value("--rhs");
        } else if (a == "--out") {
            out = value("--out");
        } else if (a == "--tol") {
            const std::string t = value("--tol");
            char *end = nullptr;
            prm.tol = std::strtod(t.c_str(), &end);
            if (*end != '\0' || !(prm.tol > 0.0) || !std::isfinite(prm.tol)) {
                throw Usage("--tol must be a positive number, got '" + t + "'");
            }
        } else if (a == "--max-iter") {
            const std::string t = value("--max-iter");
            char *end = nullptr;
            const long long v = std::strtoll(t.c_str(), &end, 10);
            if (*end != '\0' || v < 0) throw Usage("--max-iter must be a count, got '" + t + "'");
            prm.max_iter = v;
        } else if (a == "--history") {
            prm.record_history = 1;
        } else if (a == "--force") {
            force = true;
        } else if (a == "--any-device") {
            any_device = true;
        } else if (a == "--json") {
            // JSON is the only output.
        } else if (a == "-h" || a == "--help") {
            std::printf("%s\n", kUsage);
            return 0;
        } else if (!a.empty() && a[0] == '-') {
            throw Usage("unknown option " + a + "\n" + kUsage);
        } else if (matrix.empty()) {
            matrix = a;
        } else {
            throw Usage("more than one matrix given\n" + std::string(kUsage));
        }
    }
    if (matrix.empty()) throw Usage(kUsage);

    auto t_read = std::chrono::steady_clock::now();
    Matrix a = read_matrix(matrix);
    const size_t n = (size_t)a.n;
    std::vector<double> b;
    const bool generated = rhs.empty();
    if (generated) {
        b.assign(n, 0.0);
        for (size_t i = 0; i < n; ++i) {
            double s = 0.0;
            for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) s += a.vals[(size_t)q] * 1.0;
            b[i] = s;
        }
    } else {
        b = read_vector(rhs);
        if (b.size() != n) {
            throw Usage(rhs + ": right-hand side has " + std::to_string(b.size()) + " entries but the matrix " +
                        matrix + " has " + std::to_string(n) + " rows");
        }
    }
    const double read_ms = ms_since(t_read);

    auto t_setup = std::chrono::steady_clock::now();
    autopcg_gen_solver *solver = nullptr;
    int rc = autopcg_gen_setup(a.n, a.row_ptr.data(), a.col_idx.data(), a.vals.data(), 0,
                               (force ? AUTOPCG_GEN_FORCE : 0u) |
                                   (any_device ? AUTOPCG_GEN_ANY_DEVICE : 0u),
                               &solver);
    if (rc != AUTOPCG_GEN_OK) {
        std::fprintf(stderr, "autopcg_gen_solve: error: %s: %s\n", matrix.c_str(), autopcg_gen_last_error());
        return rc == AUTOPCG_GEN_ERR_CUDA || rc == AUTOPCG_GEN_ERR_INTERNAL ? 1 : 2;
    }
    const double setup_call_ms = ms_since(t_setup);
    std::vector<double> x(n, 0.0);
    autopcg_gen_info info;
    rc = autopcg_gen_solve(solver, b.data(), x.data(), &prm, &info);
    if (rc != AUTOPCG_GEN_OK) {
        std::fprintf(stderr, "autopcg_gen_solve: error: %s: %s\n", matrix.c_str(), autopcg_gen_last_error());
        autopcg_gen_destroy(solver);
        return rc == AUTOPCG_GEN_ERR_INPUT ? 2 : 1;
    }
    double device_ms = 0, precond_ms = 0, backend_ms = 0;
    autopcg_gen_setup_times(solver, &device_ms, &precond_ms, &backend_ms);
    if (!out.empty()) write_vector(out, x);

    std::string o = "{";
    o += "\"matrix\":" + jstr(matrix);
    o += ",\"n\":" + std::to_string(n);
    o += ",\"nnz\":" + std::to_string(a.vals.size());
    o += ",\"iterations\":" + std::to_string(info.iterations);
    o += std::string(",\"converged\":") + (info.converged ? "true" : "false");
    o += ",\"reason\":" + jstr(autopcg_gen_reason_name(info.reason));
    o += ",\"replacements\":" + std::to_string(info.residual_replacements);
    o += ",\"relative_residual\":" + num(info.relative_residual);
    o += ",\"recurrence_relative_residual\":" + num(info.recurrence_relative_residual);
    if (generated) {
        double e = 0.0;
        for (double v : x) e = std::max(e, std::fabs(v - 1.0));
        o += ",\"error_vs_ones\":" + num(e);
    } else {
        o += ",\"error_vs_ones\":null";
    }
    const double setup_ms = setup_call_ms + info.upload_ms;
    o += ",\"read_ms\":" + num(read_ms);
    o += ",\"setup_ms\":" + num(setup_ms);
    o += ",\"setup\":{\"device_ms\":" + num(device_ms) + ",\"precond_ms\":" + num(precond_ms) +
         ",\"select_ms\":0,\"backend_ms\":" + num(setup_ms - device_ms - precond_ms) + "}";
    o += ",\"solve_ms\":" + num(info.solve_ms);
    o += ",\"ms_per_iteration\":" + num(info.iterations > 0 ? info.solve_ms / (double)info.iterations : 0.0);
    o += ",\"device\":" + jstr(autopcg_gen_device(solver));
    o += ",\"tol\":" + num(prm.tol);
    o += std::string(",") + autopcg_gen_plan_json_members();
    std::string notes = autopcg_gen_notes(solver);
    o += ",\"notes\":[";
    bool first = true;
    size_t start = 0;
    while (start < notes.size()) {
        size_t end = notes.find('\n', start);
        if (end == std::string::npos) end = notes.size();
        if (end > start) {
            o += (first ? "" : ",") + jstr(notes.substr(start, end - start));
            first = false;
        }
        start = end + 1;
    }
    o += "]";
    if (prm.record_history) {
        const double *h = nullptr;
        int64_t len = 0;
        autopcg_gen_residual_history(solver, &h, &len);
        o += ",\"residual_history\":[";
        for (int64_t i = 0; i < len; ++i) o += (i ? "," : "") + num(h[i]);
        o += "]";
    }
    if (!info.converged) {
        o += ",\"error\":" + jstr(std::string("stopped: ") + autopcg_gen_reason_name(info.reason) + " after " +
                                  std::to_string(info.iterations) + " iterations");
    }
    o += "}";
    std::printf("%s\n", o.c_str());
    autopcg_gen_destroy(solver);
    return info.converged ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
    try {
        return run(argc, argv);
    } catch (const Usage &e) {
        std::fprintf(stderr, "autopcg_gen_solve: error: %s\n", e.what());
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "autopcg_gen_solve: error: %s\n", e.what());
        return 2;
    }
}
