#!/usr/bin/env python3
"""k2_rows.py: what the device's merges meet in second-order SSOR-AI's K of a matrix.

    python3 tools/k2_rows.py MATRIX.mtx [G]

With G, the matrix is first multiplied (Kronecker) by the 5-point Poisson matrix of a G x G
grid, as `autopcg matgen --kron MATRIX.mtx --n G` does. Only the pattern is read (made
symmetric). Row i of K = I - X + X^2 is the union of the rows q of the first-order K (A's row q
up to its diagonal) over the columns q of its own row i; the script prints K's entries, its
longest row, the rows of 1024 entries or more (past the count's histogram bins), the most
entries a row gathers from the rows it unites and how many rows gather more than 4096 (past
the sorted list a block holds), and the widest span of a row's columns in words of 32 (a block
holds a row as bits within 4096 of them). Needs numpy and scipy.
"""
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    a = scipy.io.mmread(sys.argv[1]).tocsr()
    if len(sys.argv) == 3:
        g = int(sys.argv[2])
        t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
        p = sp.kron(sp.eye(g), t) + sp.kron(t, sp.eye(g))
        a = sp.kron(a, p).tocsr()
    a = (abs(a) + abs(a.T)).tocsr()
    a.data[:] = 1.0
    n = a.shape[0]
    lower = sp.tril(a).tocsr()
    k = (lower + lower @ lower).tocsr()
    lens = np.diff(k.indptr)
    part = np.diff(lower.indptr).astype(np.int64)
    gathered = np.add.reduceat(part[lower.indices], lower.indptr[:-1])
    first = k.indices[k.indptr[:-1]].astype(np.int64)
    words = ((np.arange(n) - (first & ~31)) >> 5) + 1
    print(f"rows {n}, entries of A {a.nnz}, entries of K {k.nnz}")
    print(f"longest row of K {lens.max()}, rows of 1024 entries or more {(lens >= 1024).sum()}")
    print(f"most entries gathered for a row {gathered.max()}, rows gathering more than 4096 "
          f"{(gathered > 4096).sum()}")
    print(f"widest span of a row in words of 32 {words.max()}, rows wider than 4096 words "
          f"{(words > 4096).sum()}")


if __name__ == "__main__":
    main()
