"""cuda_events.py: the CUDA-event timing shared by the kernel microbenchmarks of tools/.

    from cuda_events import timeit
    us = timeit(lambda: kernel(grid, block, args), reps=30)

Two untimed calls, then five batches of `reps` calls between two events; the median batch's
time per call, in microseconds.
"""
import cupy as cp


def timeit(f, reps):
    f()
    f()
    cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(5):
        s.record()
        for _ in range(reps):
            f()
        e.record()
        e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e) / reps * 1e3)
    return sorted(ts)[2]
