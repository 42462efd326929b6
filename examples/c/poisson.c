/*
 * autopcg from C: a 2D Poisson matrix (5-point stencil on an m x m grid) in CSR arrays with
 * 0-based 32-bit indices, three right-hand sides solved on one handle, then new values of the
 * same pattern (a shift added to the diagonal) and the three solved again.
 *
 *     make -C examples c && examples/build/poisson_c [m] [auto|cpu|gpu]
 *
 * Prints one line per solve: "<matrix> rhs <k>: <iterations> iterations, relative residual
 * <r>".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autopcg.h"

/* Reports a failed call with the library's message and exits. */
static void check(int status, const char *what) {
    if (status != AUTOPCG_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, autopcg_status_string(status), autopcg_last_error());
        exit(1);
    }
}

int main(int argc, char **argv) {
    int32_t m = argc > 1 ? atoi(argv[1]) : 64;
    const char *device = argc > 2 ? argv[2] : "auto";
    if (m < 2 || m > 20000) {
        fprintf(stderr, "usage: %s [m >= 2] [auto|cpu|gpu]\n", argv[0]);
        return 2;
    }
    int32_t n = m * m;
    const double shift = 0.5;
    /* The GPU's context is created while the matrix is assembled below. */
    if (strcmp(device, "cpu") != 0)
        check(autopcg_open_gpu_ahead(0), "autopcg_open_gpu_ahead");

    /* The 5-point stencil, rows in order, columns sorted inside each row. */
    int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t *indices = malloc(sizeof(int32_t) * 5 * (size_t)n);
    double *values = malloc(sizeof(double) * 5 * (size_t)n);
    int32_t nnz = 0;
    indptr[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t r = i / m, c = i % m;
        if (r > 0) { indices[nnz] = i - m; values[nnz++] = -1.0; }
        if (c > 0) { indices[nnz] = i - 1; values[nnz++] = -1.0; }
        indices[nnz] = i; values[nnz++] = 4.0;
        if (c + 1 < m) { indices[nnz] = i + 1; values[nnz++] = -1.0; }
        if (r + 1 < m) { indices[nnz] = i + m; values[nnz++] = -1.0; }
        indptr[i + 1] = nnz;
    }

    autopcg_options opts;
    check(autopcg_options_init(&opts), "autopcg_options_init");
    opts.rtol = 1e-10;
    if (strcmp(device, "cpu") == 0) opts.device = AUTOPCG_DEVICE_CPU;
    else if (strcmp(device, "gpu") == 0) opts.device = AUTOPCG_DEVICE_GPU;
    else if (strcmp(device, "auto") != 0) {
        fprintf(stderr, "device %s: expected auto, cpu or gpu\n", device);
        return 2;
    }

    autopcg_solver *s = NULL;
    check(autopcg_create_i32(n, indptr, indices, values, 0, &opts, &s), "autopcg_create_i32");
    autopcg_setup setup;
    check(autopcg_get_setup(s, &setup), "autopcg_get_setup");
    printf("autopcg %s on %s, preconditioner %s\n", autopcg_version(), autopcg_device(s),
           autopcg_precond(s));
    printf("2D Poisson %d x %d: n = %d, nnz = %d, setup %.2f ms\n", m, m, n, nnz,
           setup.total_ms);

    /* Three right-hand sides, one after the other in b (column k at b + k n): all ones, a
       ramp, and a point source in the middle of the grid. */
    enum { NRHS = 3 };
    double *b = calloc((size_t)n * NRHS, sizeof(double));
    double *x = calloc((size_t)n * NRHS, sizeof(double));
    for (int32_t i = 0; i < n; i++) {
        b[i] = 1.0;
        b[n + i] = (double)(i % m + 1) / m;
    }
    b[2 * n + (m / 2) * m + m / 2] = 1.0;

    autopcg_info info[NRHS];
    check(autopcg_solve_many(s, NRHS, b, x, NULL, info), "autopcg_solve_many");
    for (int k = 0; k < NRHS; k++)
        printf("A rhs %d: %lld iterations, relative residual %.3e\n", k + 1,
               (long long)info[k].iterations, info[k].relative_residual);

    /* New values, same pattern: A + shift I. The plan is kept; the preconditioner is rebuilt. */
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = indptr[i]; k < indptr[i + 1]; k++)
            if (indices[k] == i) values[k] += shift;
    check(autopcg_update_values(s, values), "autopcg_update_values");
    for (int k = 0; k < NRHS; k++) {
        /* One right-hand side at a time this time, from the previous solution. */
        check(autopcg_solve(s, b + (size_t)k * n, x + (size_t)k * n, x + (size_t)k * n, &info[k]),
              "autopcg_solve");
        printf("A+%.1fI rhs %d: %lld iterations, relative residual %.3e\n", shift, k + 1,
               (long long)info[k].iterations, info[k].relative_residual);
    }

    autopcg_destroy(s);
    free(indptr);
    free(indices);
    free(values);
    free(b);
    free(x);
    return 0;
}
