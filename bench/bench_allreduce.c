/* The gradient all-reduce alone, as DDP runs it: it_dist_all_reduce_buckets (SUM, rank-ordered,
 * 25 MiB buckets) over a flat fp32 tensor of a model's parameter count, on every rank of an
 * mpirun job. Prints, from rank 0, the median time of the repetitions and two bandwidths:
 *   algbw = bytes / time                      (the gradient's size over the time)
 *   busbw = algbw * 2 (N - 1) / N             (the bytes each rank's link carries in an
 *                                              optimal all-reduce; NCCL-tests' convention)
 * Usage: mpirun -np N bench_allreduce [ELEMENTS] [REPS]   (default GPT-2 124M's 124475904, 5) */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "infinitrain/dist.h"
#include "infinitrain/tensor.h"

int main(int argc, char **argv) {
    long long n = argc > 1 ? atoll(argv[1]) : 124475904LL;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: mpirun -np N %s [ELEMENTS >= 1] [REPS 1..1000]\n", argv[0]);
        return 2;
    }
    it_device dev = it_device_cpu();
    it_dist *d = NULL;
    if (it_dist_new(dev, &d)) {
        fprintf(stderr, "bench_allreduce: %s\n", it_last_error());
        return 1;
    }
    int rank = it_dist_rank(d), world = it_dist_world(d);
    it_tensor *t = it_tensor_new(dev, IT_DTYPE_FP32, 1, (int64_t[]){n});
    if (!t || it_tensor_fill(t, it_scalar_f64(1.0 + rank))) {
        fprintf(stderr, "bench_allreduce: rank %d: %s\n", rank, it_last_error());
        it_dist_abort(d, 1);
        return 1;
    }
    double *ms = calloc((size_t)reps, sizeof *ms);
    it_status st = it_dist_all_reduce_buckets(d, t, 0); /* warm-up: pages, MPI's shared memory */
    for (int r = 0; r < reps && !st; r++) {
        it_dist_all_reduce_host(d, &(double){0}, 1, IT_DTYPE_FP64, IT_CCL_SUM); /* start together */
        double t0 = bench_now_ms();
        st = it_dist_all_reduce_buckets(d, t, 0);
        double dt = bench_now_ms() - t0;
        it_dist_all_reduce_host(d, &dt, 1, IT_DTYPE_FP64, IT_CCL_MAX); /* the slowest rank's */
        ms[r] = dt;
    }
    if (st) {
        fprintf(stderr, "bench_allreduce: rank %d: %s\n", rank, it_last_error());
        it_dist_abort(d, 1);
        return 1;
    }
    if (rank == 0) {
        double med = bench_median(ms, reps), bytes = (double)n * 4.0;
        double alg = bytes / (med * 1e-3) / 1e9, bus = alg * 2.0 * (world - 1) / world;
        printf("ALLREDUCE ranks=%d elements=%lld MB=%.1f ms_median=%.2f ms_min=%.2f algbw_GBs=%.2f busbw_GBs=%.2f\n",
               world, n, bytes / 1e6, med, ms[0], alg, bus);
    }
    free(ms);
    it_tensor_release(t);
    it_dist_free(d);
    return 0;
}
