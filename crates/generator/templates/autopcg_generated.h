/* autopcg_generated.h: the C API of a solver emitted by {{VERSION}} from one plan.
 *
 * The solver runs Chronopoulos-Gear preconditioned conjugate gradients for a sparse symmetric
 * positive definite matrix on one NVIDIA GPU, with the storage formats, kernels and launch
 * configurations of the plan it was generated from (see plan.json and README.md).
 *
 * Usage: autopcg_gen_setup once per matrix (the preconditioner is built and every operand
 * converted and uploaded), autopcg_gen_solve any number of times, autopcg_gen_update_values
 * when the values change but not the pattern, autopcg_gen_destroy at the end. Functions return
 * AUTOPCG_GEN_OK or an error code; autopcg_gen_last_error() then says what went wrong, in one
 * line (per thread). A handle is used by one thread at a time.
 *
 * The matrix is given in CSR: row pointers (n + 1 entries) and column indices with index_base
 * 0 (C) or 1 (Fortran), both triangles stored, columns strictly ascending within each row.
 */
#ifndef AUTOPCG_GENERATED_H
#define AUTOPCG_GENERATED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define AUTOPCG_GEN_OK 0
/* A bad argument: sizes, indices, tolerance, a non-positive diagonal. */
#define AUTOPCG_GEN_ERR_INPUT 1
/* The matrix or the GPU is not the plan's (see AUTOPCG_GEN_FORCE, AUTOPCG_GEN_ANY_DEVICE). */
#define AUTOPCG_GEN_ERR_PLAN 2
/* A CUDA call failed (no device, out of memory, a launch failed). */
#define AUTOPCG_GEN_ERR_CUDA 3
/* Anything else (a bug: please report it with the message). */
#define AUTOPCG_GEN_ERR_INTERNAL 4

/* Why a solve stopped (autopcg_gen_info.reason). */
/* The recomputed true residual ||b - A x|| meets tol * ||b||. */
#define AUTOPCG_GEN_CONVERGED 0
/* The iteration limit was reached first. */
#define AUTOPCG_GEN_MAX_ITER 1
/* The recurrence met the tolerance but the true residual did not, and stopped decreasing
 * across residual replacements. */
#define AUTOPCG_GEN_STAGNATED 2
/* (r, M^-1 r) <= 0 or (A p, p) <= 0: the matrix or the preconditioner is not SPD. */
#define AUTOPCG_GEN_NOT_SPD 3
/* A NaN or infinity appeared. */
#define AUTOPCG_GEN_BREAKDOWN 4

/* Setup flag: run on a matrix whose n or nnz differs from the plan's. */
#define AUTOPCG_GEN_FORCE 1u
/* Setup flag: run on another GPU than the plan's (the kernels must still run there: same
 * architecture or one the build targets); for a plan split into row blocks over several GPUs,
 * also on a host with fewer GPUs than the plan names (block i then runs on GPU i modulo the
 * GPUs there are). */
#define AUTOPCG_GEN_ANY_DEVICE 2u

/* Solver parameters (autopcg_gen_default_params fills the defaults). */
typedef struct autopcg_gen_params {
    /* Relative tolerance: converged when ||b - A x|| <= tol ||b||. Default 1e-8. */
    double tol;
    /* Iteration limit. Default 10000. */
    int64_t max_iter;
    /* Nonzero: keep the recurrence residual norm of every iteration examined
     * (autopcg_gen_residual_history). Default 0. */
    int32_t record_history;
    /* Reserved, set to 0. */
    int32_t reserved;
} autopcg_gen_params;

/* What a solve did. */
typedef struct autopcg_gen_info {
    /* The iteration at which the solve stopped (the one whose residual met the tolerance). */
    int64_t iterations;
    /* 1 when reason is AUTOPCG_GEN_CONVERGED. */
    int32_t converged;
    /* AUTOPCG_GEN_CONVERGED, AUTOPCG_GEN_MAX_ITER, ... */
    int32_t reason;
    /* ||b - A x|| / ||b|| of the returned x, recomputed. */
    double relative_residual;
    /* The recurrence's ||r|| / ||b|| at the last iteration examined. */
    double recurrence_relative_residual;
    /* ||b||. */
    double rhs_norm;
    /* How many times the residual was replaced by b - A x and the recurrence restarted. */
    int64_t residual_replacements;
    /* Milliseconds uploading b and x0. */
    double upload_ms;
    /* Milliseconds of the solve: ||b||, the iterations, the residual checks and copying x
     * back. */
    double solve_ms;
} autopcg_gen_info;

/* Opaque solver. */
typedef struct autopcg_gen_solver autopcg_gen_solver;

/* Fills the default parameters. */
void autopcg_gen_default_params(autopcg_gen_params *params);

/* Sets up a solver for the n x n matrix (row_ptr, col_idx, values) on GPU 0 (a plan split into
 * row blocks: block i on GPU i, its preconditioner built on its own rows): checks the input
 * and that matrix and GPU are the plan's (n and nnz, unless flags has AUTOPCG_GEN_FORCE; the
 * device name and architecture, unless it has AUTOPCG_GEN_ANY_DEVICE), builds the preconditioner on the host, converts
 * every operand to the plan's format and uploads it. The arrays are copied. */
int autopcg_gen_setup(int32_t n, const int32_t *row_ptr, const int32_t *col_idx,
                      const double *values, int32_t index_base, uint32_t flags,
                      autopcg_gen_solver **solver);

/* Solves A x = b. x holds the initial guess on entry and the last iterate on return (also when
 * the solve did not converge). Returns AUTOPCG_GEN_OK when the solve ran (info->reason says how
 * it ended), an error code otherwise. info may be NULL. */
int autopcg_gen_solve(autopcg_gen_solver *solver, const double *b, double *x,
                      const autopcg_gen_params *params, autopcg_gen_info *info);

/* New values for the same pattern (nnz values in the order of setup's col_idx): the
 * preconditioner and every converted operand are rebuilt and copied into place; the plan, the
 * device buffers and the captured graphs stay. On AUTOPCG_GEN_ERR_INPUT (a value that is not
 * finite, a diagonal that is not positive) nothing changed; after AUTOPCG_GEN_ERR_CUDA the
 * solver must be destroyed. */
int autopcg_gen_update_values(autopcg_gen_solver *solver, const double *values);

/* Frees everything (NULL is allowed). */
void autopcg_gen_destroy(autopcg_gen_solver *solver);

/* The recurrence residual norms of the last solve (when params.record_history was set): *len
 * entries at *data, valid until the next solve or destroy. */
int autopcg_gen_residual_history(const autopcg_gen_solver *solver, const double **data,
                                 int64_t *len);

/* Where setup time went, in milliseconds: opening the device, building the preconditioner,
 * converting, uploading and allocating. */
int autopcg_gen_setup_times(const autopcg_gen_solver *solver, double *device_ms,
                            double *precond_ms, double *backend_ms);

/* The GPU the solver runs on, e.g. "gpu 0 (NVIDIA H200)". */
const char *autopcg_gen_device(const autopcg_gen_solver *solver);

/* Notes of the setup (a forced fingerprint or device check), one per line; "" when none. */
const char *autopcg_gen_notes(const autopcg_gen_solver *solver);

/* The plan's members of the JSON report of `autopcg solve --json` (precond, omega,
 * precond_applied, check_every, plan, model, predicted_ms_per_iteration), as the text between
 * the braces of a JSON object. */
const char *autopcg_gen_plan_json_members(void);

/* "converged", "max_iter", "stagnated", "not_spd" or "breakdown". */
const char *autopcg_gen_reason_name(int32_t reason);

/* The message of the last error of this thread ("" when none). */
const char *autopcg_gen_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* AUTOPCG_GENERATED_H */
