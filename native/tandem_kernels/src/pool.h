// The kernels' threads: a pool sized to the cores the lane may use. The
// calling thread (MLX's CPU stream thread) works too; workers start from it
// on first use, so they inherit its nice level (the lane's), and sleep once
// a job is done (spin_us: 0 unless a benchmark sets it).
// They never exit: the pool is leaked on purpose, so nothing joins or
// destroys it while the process ends.
#pragma once

#include <functional>

namespace tk {

void set_threads(int n);  // the threads a matmul may use, the caller included (>= 1)
int threads();            // as set, or the CPUs this process may run on
void set_spin_us(int us);  // how long an idle worker polls for the next job before it sleeps
int spin_us();

// fn(i) for every i in [0, chunks), spread over the pool; returns when all are done.
void parallel_for(int chunks, const std::function<void(int)>& fn);

}  // namespace tk
