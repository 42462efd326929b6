// driver_api.cuh: the solve loop and the C API functions of a solver emitted by {{VERSION}} that
// are the same however the matrix is laid out over the devices. Included by solver.cu after
// its ApgSolver type and the operations the loop calls:
//   rhs_norm(S)             ||b||
//   zero_solution(S)        x = 0
//   reserve_history(S, k)   room for k history records
//   start(S)                r = b - A x, u = M^-1 r, w = A u, p = s = 0, record 0
//   run_iterations(S, k)    queue k iterations
//   poll_read(S, from, count, scalars, history)
//   true_residual(S)        ||b - A x||
//   put_problem(S, b, x)    b and x0 onto the devices; get_solution(S, x) back
//   synchronize(S)          wait for every queued operation
//   setup_on_devices(S, any_device, t0)   the devices opened and checked (PlanRefusal), the
//                           operands placed, the vectors allocated (S.a holds the matrix)
//   replace_values(S, values)             new values of the same pattern (checked finite)
// and ApgSolver's fields n, residual_history, device_ms, precond_ms, backend_ms, device_name and
// notes.
//
// The stopping rule (as `autopcg solve`'s):
//   - the first record whose recurrence residual sqrt(rr) meets tol ||b|| ends the run; then the
//     true residual ||b - A x|| of the current x is recomputed: converged when it meets
//     tol ||b||; otherwise the residual is replaced (the recurrence restarts from x: r = b - A x,
//     u = M^-1 r, w = A u, the dots and scalars, p = s = 0), unless the true residual did not
//     decrease since the previous replacement: then the solve stops as stagnated;
//   - a record whose recurrence halted (gamma <= 0, (A p, p) <= 0: not SPD; NaN or infinity:
//     breakdown) ends the solve;
//   - at the iteration limit the true residual decides convergence.

extern "C" void autopcg_gen_default_params(autopcg_gen_params *params) {
    if (params == nullptr) return;
    params->tol = 1e-8;
    params->max_iter = 10000;
    params->record_history = 0;
    params->reserved = 0;
}

extern "C" const char *autopcg_gen_last_error(void) { return g_last_error.c_str(); }

extern "C" const char *autopcg_gen_plan_json_members(void) { return APG_PLAN_JSON_MEMBERS; }

extern "C" const char *autopcg_gen_reason_name(int32_t reason) {
    switch (reason) {
    case AUTOPCG_GEN_CONVERGED: return "converged";
    case AUTOPCG_GEN_MAX_ITER: return "max_iter";
    case AUTOPCG_GEN_STAGNATED: return "stagnated";
    case AUTOPCG_GEN_NOT_SPD: return "not_spd";
    case AUTOPCG_GEN_BREAKDOWN: return "breakdown";
    default: return "unknown";
    }
}

extern "C" int autopcg_gen_setup(int32_t n, const int32_t *row_ptr, const int32_t *col_idx,
                                 const double *values, int32_t index_base, uint32_t flags,
                                 autopcg_gen_solver **solver) {
    g_last_error.clear();
    if (solver == nullptr) {
        fail("autopcg_gen_setup: solver is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    *solver = nullptr;
    ApgSolver *S = nullptr;
    try {
        apg::Csr a = apg::csr_from_arrays(n, row_ptr, col_idx, values, index_base);
        const bool force = (flags & AUTOPCG_GEN_FORCE) != 0;
        const bool any_device = (flags & AUTOPCG_GEN_ANY_DEVICE) != 0;
        std::string notes;
        if ((long long)a.nrows != APG_PLAN_N || (long long)a.nnz() != APG_PLAN_NNZ) {
            std::string msg = "the plan was made for a matrix with n = " +
                              std::to_string(APG_PLAN_N) + ", nnz = " +
                              std::to_string(APG_PLAN_NNZ) + " but this one has n = " +
                              std::to_string(a.nrows) + ", nnz = " + std::to_string(a.nnz());
            if (!force) throw PlanRefusal{msg + " (pass AUTOPCG_GEN_FORCE to run the plan anyway)"};
            // The blocks' rows are the plan's: a matrix of another size cannot be split by them.
            if (APG_NBLOCKS > 1 && (long long)a.nrows != APG_PLAN_N) {
                throw PlanRefusal{msg + ": the plan's row blocks cannot split a matrix of another "
                                        "size"};
            }
            notes += "fingerprint check forced: " + msg + "\n";
        }
        auto t0 = std::chrono::steady_clock::now();
        S = new ApgSolver();
        S->a = std::move(a);
        S->n = S->a.nrows;
        S->index_base = index_base;
        S->notes = notes;
        setup_on_devices(*S, any_device, t0);
        *solver = reinterpret_cast<autopcg_gen_solver *>(S);
        return AUTOPCG_GEN_OK;
    } catch (const PlanRefusal &e) {
        fail(e.what);
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_PLAN;
    } catch (const apg::Error &e) {
        fail(e.what());
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_INPUT;
    } catch (const CudaFailure &e) {
        fail(e.what);
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_CUDA;
    } catch (const std::bad_alloc &) {
        fail("out of host memory during setup");
        autopcg_gen_destroy(reinterpret_cast<autopcg_gen_solver *>(S));
        return AUTOPCG_GEN_ERR_INTERNAL;
    }
}

extern "C" int autopcg_gen_update_values(autopcg_gen_solver *solver, const double *values) {
    g_last_error.clear();
    ApgSolver *S = reinterpret_cast<ApgSolver *>(solver);
    if (S == nullptr || (values == nullptr && S->a.nnz() > 0)) {
        fail("autopcg_gen_update_values: solver or values is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    try {
        for (size_t q = 0; q < S->a.nnz(); ++q) {
            if (!std::isfinite(values[q])) {
                throw apg::Error("value " + std::to_string(q + S->index_base) + " is " +
                                 apg::fmt_double(values[q]) + ", not finite");
            }
        }
        replace_values(*S, values);
        return AUTOPCG_GEN_OK;
    } catch (const apg::Error &e) {
        fail(e.what());
        return AUTOPCG_GEN_ERR_INPUT;
    } catch (const CudaFailure &e) {
        fail(e.what);
        return AUTOPCG_GEN_ERR_CUDA;
    } catch (const std::bad_alloc &) {
        fail("out of host memory during the update");
        return AUTOPCG_GEN_ERR_INTERNAL;
    }
}

extern "C" int autopcg_gen_residual_history(const autopcg_gen_solver *solver,
                                            const double **data, int64_t *len) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    if (S == nullptr || data == nullptr || len == nullptr) {
        fail("autopcg_gen_residual_history: a NULL argument");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    *data = S->residual_history.data();
    *len = (int64_t)S->residual_history.size();
    return AUTOPCG_GEN_OK;
}

extern "C" int autopcg_gen_setup_times(const autopcg_gen_solver *solver, double *device_ms,
                                       double *precond_ms, double *backend_ms) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    if (S == nullptr) {
        fail("autopcg_gen_setup_times: solver is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    if (device_ms) *device_ms = S->device_ms;
    if (precond_ms) *precond_ms = S->precond_ms;
    if (backend_ms) *backend_ms = S->backend_ms;
    return AUTOPCG_GEN_OK;
}

extern "C" const char *autopcg_gen_device(const autopcg_gen_solver *solver) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    return S == nullptr ? "" : S->device_name.c_str();
}

extern "C" const char *autopcg_gen_notes(const autopcg_gen_solver *solver) {
    const ApgSolver *S = reinterpret_cast<const ApgSolver *>(solver);
    return S == nullptr ? "" : S->notes.c_str();
}

namespace {

// The solve proper (b and x0 already on the device). Fills info; throws on CUDA failures.
void solve_on_device(ApgSolver &S, const autopcg_gen_params &prm, autopcg_gen_info &info) {
    S.residual_history.clear();
    const double bnorm = rhs_norm(S);
    info.rhs_norm = bnorm;
    if (!std::isfinite(bnorm)) {
        info.reason = AUTOPCG_GEN_BREAKDOWN;
        info.relative_residual = NAN;
        return;
    }
    if (bnorm == 0.0) {
        // x = 0 is the exact solution, whatever the initial guess.
        zero_solution(S);
        info.converged = 1;
        info.reason = AUTOPCG_GEN_CONVERGED;
        if (prm.record_history) S.residual_history.push_back(0.0);
        return;
    }
    const double threshold = prm.tol * bnorm;
    const uint64_t max_iter = (uint64_t)prm.max_iter;
    uint64_t reserve = max_iter + 1;
    if (reserve > (1ull << 20)) reserve = 1ull << 20;
    reserve_history(S, reserve);

    // Polls spaced while the residual is far from the tolerance, as the library's driver
    // spaces them: after each poll the iterations still needed are projected from the fall of
    // the log of the least residual of each poll since the one before, and up to
    // APG_PACING_SAFETY of them are issued, in whole intervals of APG_CHECK_EVERY, at most
    // APG_POLL_GROWTH intervals and at least one.
    bool paced = false;        // last_it and last_ln hold the poll before
    uint64_t last_it = 0;
    double last_ln = 0.0;
    uint64_t span = APG_CHECK_EVERY;
    uint64_t issued = 0;       // iterations queued since the solve began
    uint64_t base = 0;         // iteration of record 0 of the current run
    uint64_t queued = 0;       // records queued in the current run
    uint64_t polled = 0;       // records examined in the current run
    double last_true = INFINITY; // true residual at the last replacement
    double true_res = NAN;     // true residual of the current x, when computed
    bool true_current = false;
    std::vector<double> hist;
    double sc[kScalarsLen];

    start(S);
    queued = 1;
    for (;;) {
        // Poll: the scalars and the history records since the last poll.
        const uint64_t count = queued - polled;
        hist.resize(3 * count);
        poll_read(S, polled, count, sc, hist.data());
        launches_done("the iterations");
        const int halt = (int)sc[kHalt];
        const uint64_t halt_iter = (uint64_t)sc[kHaltIter];
        bool met = false, halted = false;
        double least = INFINITY;
        for (uint64_t j = 0; j < count; ++j) {
            const uint64_t k = polled + j;
            const double rr = hist[3 * j + 2];
            const double res = std::sqrt(rr);
            if (res < least) least = res;
            if (prm.record_history) S.residual_history.push_back(res);
            info.iterations = (int64_t)(base + k);
            info.recurrence_relative_residual = res / bnorm;
            if (res <= threshold) {
                met = true;
                break;
            }
            if (halt != 0 && halt_iter == k) {
                info.reason = halt == 3 ? AUTOPCG_GEN_BREAKDOWN : AUTOPCG_GEN_NOT_SPD;
                halted = true;
                break;
            }
        }
        if (!met && !halted && halt == 0 && count > 0 && (uint64_t)sc[kIter] != queued - 1) {
            throw CudaFailure{"the device recorded iteration " + std::to_string((uint64_t)sc[kIter]) +
                              " but " + std::to_string(queued - 1) + " were queued (internal error)"};
        }
        if (halt != 0 && !halted && !met) {
            throw CudaFailure{"the device recurrence halted at iteration " +
                              std::to_string(halt_iter) + ", outside the records " +
                              std::to_string(polled) + ".." + std::to_string(queued) +
                              " (internal error)"};
        }
        polled = queued;
        if (halted) break;
        if (met) {
            true_res = true_residual(S);
            true_current = true;
            if (!std::isfinite(true_res)) {
                info.reason = AUTOPCG_GEN_BREAKDOWN;
                break;
            }
            if (true_res <= threshold) {
                info.reason = AUTOPCG_GEN_CONVERGED;
                break;
            }
            if (!(true_res < last_true)) {
                info.reason = AUTOPCG_GEN_STAGNATED;
                break;
            }
            if (issued >= max_iter) {
                info.reason = AUTOPCG_GEN_MAX_ITER;
                break;
            }
            // Residual replacement: restart the recurrence from the current x.
            last_true = true_res;
            info.residual_replacements += 1;
            base = issued;
            start(S);
            true_current = false;
            queued = 1;
            polled = 0;
            paced = false;
            span = APG_CHECK_EVERY;
            continue;
        }
        if (issued >= max_iter) {
            info.reason = AUTOPCG_GEN_MAX_ITER;
            break;
        }
        {
            const uint64_t it = queued - 1; // the last record's iteration in this run
            const double ln_now = std::log(least);
            uint64_t intervals = 1;
            if (paced && it > last_it && std::isfinite(ln_now)) {
                const double rate = (last_ln - ln_now) / (double)(it - last_it);
                const double left = ln_now - std::log(threshold);
                if (rate > 0.0 && std::isfinite(left) && left > 0.0) {
                    const double projected =
                        left / rate * APG_PACING_SAFETY / (double)APG_CHECK_EVERY;
                    if (std::isfinite(projected) && projected >= 1.0) {
                        intervals = projected >= (double)APG_POLL_GROWTH
                                        ? (uint64_t)APG_POLL_GROWTH
                                        : (uint64_t)projected;
                    }
                }
            }
            paced = std::isfinite(ln_now);
            last_it = it;
            last_ln = ln_now;
            span = intervals * (uint64_t)APG_CHECK_EVERY;
        }
        uint64_t next = issued + span;
        if (next > max_iter) next = max_iter;
        const uint64_t batch = next - issued;
        reserve_history(S, queued + batch);
        run_iterations(S, batch);
        issued = next;
        queued += batch;
        true_current = false;
    }
    if (info.reason == AUTOPCG_GEN_NOT_SPD || info.reason == AUTOPCG_GEN_BREAKDOWN) {
        info.relative_residual = NAN;
        if (info.reason == AUTOPCG_GEN_NOT_SPD) {
            double tr = true_residual(S);
            info.relative_residual = tr / bnorm;
        }
        info.converged = 0;
        return;
    }
    if (!true_current) true_res = true_residual(S);
    info.relative_residual = true_res / bnorm;
    if (!std::isfinite(true_res)) {
        info.reason = AUTOPCG_GEN_BREAKDOWN;
        info.converged = 0;
        return;
    }
    if (true_res <= threshold) info.reason = AUTOPCG_GEN_CONVERGED;
    info.converged = info.reason == AUTOPCG_GEN_CONVERGED ? 1 : 0;
}

} // namespace

extern "C" int autopcg_gen_solve(autopcg_gen_solver *solver, const double *b, double *x,
                                 const autopcg_gen_params *params, autopcg_gen_info *info_out) {
    g_last_error.clear();
    ApgSolver *S = reinterpret_cast<ApgSolver *>(solver);
    autopcg_gen_params prm;
    autopcg_gen_default_params(&prm);
    if (params != nullptr) prm = *params;
    if (S == nullptr || (S->n > 0 && (b == nullptr || x == nullptr))) {
        fail("autopcg_gen_solve: solver, b or x is NULL");
        return AUTOPCG_GEN_ERR_INPUT;
    }
    if (!(std::isfinite(prm.tol) && prm.tol > 0.0)) {
        fail("autopcg_gen_solve: tolerance must be positive and finite, got " +
             apg::fmt_double(prm.tol));
        return AUTOPCG_GEN_ERR_INPUT;
    }
    if (prm.max_iter < 0) {
        fail("autopcg_gen_solve: max_iter must not be negative, got " +
             std::to_string(prm.max_iter));
        return AUTOPCG_GEN_ERR_INPUT;
    }
    autopcg_gen_info info;
    std::memset(&info, 0, sizeof info);
    info.reason = AUTOPCG_GEN_MAX_ITER;
    try {
        auto t0 = std::chrono::steady_clock::now();
        put_problem(*S, b, x);
        uint64_t records = (uint64_t)prm.max_iter + 1;
        if (records > (1ull << 20)) records = 1ull << 20;
        reserve_history(*S, records);
        synchronize(*S);
        info.upload_ms = ms_since(t0);
        auto t1 = std::chrono::steady_clock::now();
        solve_on_device(*S, prm, info);
        get_solution(*S, x);
        info.solve_ms = ms_since(t1);
    } catch (const CudaFailure &e) {
        fail(e.what);
        if (info_out) *info_out = info;
        return AUTOPCG_GEN_ERR_CUDA;
    } catch (const apg::Error &e) {
        fail(e.what());
        if (info_out) *info_out = info;
        return AUTOPCG_GEN_ERR_INPUT;
    } catch (const std::bad_alloc &) {
        fail("out of host memory during the solve");
        return AUTOPCG_GEN_ERR_INTERNAL;
    }
    if (info_out) *info_out = info;
    return AUTOPCG_GEN_OK;
}

