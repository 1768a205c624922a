/* Process groups over the backend's collectives: the world (data parallelism, ZeRO) and the
 * DP x TP x PP grid's groups.
 *
 * One process per rank, launched by mpirun. it_dist_new() joins the group only when the
 * process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment);
 * otherwise it returns a group of one that never touches MPI, so single-process runs and the
 * unit tests behave exactly as before.
 *
 * Two communicators: a host one (the CPU backend's collectives, over MPI) for control data
 * (losses, checksums, config hashes), and the device's own when its backend has a `ccl`
 * table. A device without collectives is served by the host communicator: tensors are staged
 * through host memory (copy to host, collective, copy back).
 *
 * Sums are deterministic when the backend's are (the CPU's sum each element in rank order
 * 0..N-1): every rank ends with bitwise the same result. */
#ifndef INFINITRAIN_DIST_H
#define INFINITRAIN_DIST_H

#include "backend.h"
#include "optim.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct it_dist it_dist;

/* True when launched by mpirun (the environment names a rank). Reads no MPI state. */
IT_API bool it_dist_launched(void);
/* Rank and world size from the launcher's environment (0 and 1 when not launched). */
IT_API void it_dist_env(int *rank, int *world);

/* Join the world group (MPI_Init when launched) and create the communicators for `dev`. */
IT_API it_status it_dist_new(it_device dev, it_dist **out);
/* A part of group `parent`, built as the world group is (host communicator, device one from
 * the backend's ccl with its own unique id, or staging): the ranks of parent that pass the same
 * color (>= 0), ranked by key (ties by their rank in parent). Collective over parent: every
 * rank of it calls, in the same order as its other splits. Not launched: a group of one.
 * Every split group is freed before the world group (which finalizes MPI). */
IT_API it_status it_dist_split(it_dist *parent, int color, int key, it_dist **out);
/* The group's name in the watchdog's lines ("DP", "TP", ...; the world is "world"). */
IT_API void it_dist_set_label(it_dist *d, const char *label);
/* Destroys the communicators; finalizes MPI if it_dist_new initialized it. */
IT_API void it_dist_free(it_dist *d);
/* This process's rank in the group, and the group's size. */
IT_API int it_dist_rank(const it_dist *d);
IT_API int it_dist_world(const it_dist *d);
/* True when device tensors go through host memory (the device's backend has no ccl). */
IT_API bool it_dist_staged(const it_dist *d);
/* Stop every rank of the job now (after an error only one rank saw), whichever group d is;
 * never returns when the job has more than one rank. */
IT_API void it_dist_abort(it_dist *d, int code);

/* In place on a contiguous tensor: every rank ends with op over all ranks' values. */
IT_API it_status it_dist_all_reduce(it_dist *d, it_tensor *t, it_reduce_kind op);
/* src (world*n) -> dst (n): this rank's chunk of the sum (or avg/max) over ranks. */
IT_API it_status it_dist_reduce_scatter(it_dist *d, it_tensor *src, it_tensor *dst, it_reduce_kind op);
/* src (n) -> dst (world*n), rank r's src at [r*n, (r+1)*n). src may be that slice of dst. */
IT_API it_status it_dist_all_gather(it_dist *d, it_tensor *src, it_tensor *dst);
IT_API it_status it_dist_broadcast(it_dist *d, it_tensor *t, int root);
/* Bytes this rank has sent in the tensor collectives above since the group was made (or the
 * last reset), counted as a ring algorithm sends them: all-reduce 2(N-1)/N of the tensor,
 * reduce-scatter and all-gather (N-1)/N of the whole buffer. Host control data not counted. */
IT_API uint64_t it_dist_bytes_sent(const it_dist *d);
IT_API void it_dist_bytes_reset(it_dist *d);
/* Point to point (pipeline stages): rank `peer` of the group; between two ranks messages
 * arrive in the order sent, and a receive must be issued in that order (its tag must be the
 * send's: the staged path matches by tag, a device ccl by order). Two ways:
 *  - staged (a device without ccl group calls, and the CPU): a send is copied to host memory
 *    and posted without waiting, so two ranks may send to each other at once;
 *  - on the device (it_dist_p2p_on_device: its ccl has send, recv and group calls): a send is
 *    held, its tensor retained, until the next it_dist_recv / it_dist_exchange /
 *    it_dist_send_wait, which issues the held sends and the receives in one group, device to
 *    device.
 * Either way a sent tensor must not be written until it_dist_send_wait. A receive gives its
 * tensor (contiguous, of the sent size) the data before it returns (on the device: before
 * any later work on the device's stream). it_dist_exchange receives n tensors in one group
 * with the held sends (a pipeline schedule's step: its sends and the next step's receives,
 * which never wait for each other); it_dist_send_wait completes the sends. */
IT_API it_status it_dist_send(it_dist *d, it_tensor *t, int peer, int tag);
IT_API it_status it_dist_recv(it_dist *d, it_tensor *t, int peer, int tag);
IT_API it_status it_dist_exchange(it_dist *d, int n, it_tensor *const *t, const int *peer, const int *tag);
IT_API it_status it_dist_send_wait(it_dist *d);
IT_API bool it_dist_p2p_on_device(const it_dist *d);
/* Host buffers, over the host communicator (control data). */
IT_API it_status it_dist_all_reduce_host(it_dist *d, void *buf, size_t count, it_dtype dt, it_reduce_kind op);

/* All-reduce (SUM) a flat gradient in buckets of bucket_bytes (0: 25 MiB). */
IT_API it_status it_dist_all_reduce_buckets(it_dist *d, it_tensor *flat, size_t bucket_bytes);
/* ---- DDP's gradient all-reduce, overlapped with backward.
 * The flat gradient is cut into buckets of bucket_bytes (0: 25 MiB). During the backward of a
 * step's last micro-step (it_backward_hooked with it_grad_sync_ready), a bucket is all-reduced
 * (SUM) as soon as every gradient in it is final and every bucket after it has started:
 * buckets start in one fixed order, last first, on every rank (collectives must), whatever
 * order the gradients become final in. With the CPU backend the all-reduces are MPI
 * non-blocking ones progressed between backward nodes; a backend whose collectives enqueue on
 * its stream overlaps by itself; a staged one reduces there and then. Results are bitwise
 * those of it_dist_all_reduce_buckets. */
typedef struct it_grad_sync it_grad_sync;
IT_API it_status it_grad_sync_new(it_dist *d, it_tensor *flat_grads, size_t bucket_bytes, it_grad_sync **out);
IT_API void it_grad_sync_free(it_grad_sync *g);
/* Before the step's last backward. `addend` (NULL or flat like the gradient) holds the earlier
 * micro-steps' sum: each bucket becomes addend + gradient just before it is reduced. */
IT_API it_status it_grad_sync_begin(it_grad_sync *g, it_tensor *addend);
/* The it_grad_ready_fn for it_backward_hooked (ctx = the it_grad_sync). */
IT_API it_status it_grad_sync_ready(void *g, it_tensor *leaf);
/* After backward: start what has not started, wait for everything. *early (may be NULL): how
 * many of the *buckets buckets started while backward still ran. */
IT_API it_status it_grad_sync_finish(it_grad_sync *g, int *early, int *buckets);
/* 64-bit FNV-1a hash of a tensor's bytes, taken 8 at a time (synchronizing host read): equal
 * bytes give equal hashes on every device and rank. */
IT_API it_status it_dist_tensor_hash(it_tensor *t, uint64_t *out);
/* For each of n hashes, whether all ranks agree: differs[i] set when some rank's differs. */
IT_API it_status it_dist_check_equal(it_dist *d, const uint64_t *hashes, size_t n, bool *differs);

/* ---- The process grid: world = DP x TP x CP x PP, laid out as InfiniTrain lays it (its
 * context-parallel branch's "tp-cp-dp-pp" order, TP fastest; Megatron's "tp-cp-dp-pp" too):
 *     rank = tp + TP*cp + TP*CP*dp + TP*CP*DP*pp
 * A rank's DP group is the ranks that differ from it in dp only, listed by dp = 0..DP-1, so
 * its rank in that group is its dp coordinate; likewise TP, CP and PP. Each axis has
 * world/size groups, numbered as InfiniTrain names them (DP<id>, TP<id>, CP<id>, PP<id>): the
 * other coordinates, PP varying fastest, then DP, CP, TP; with CP = 1
 *     DP id = pp + PP*tp,   TP id = pp + PP*dp,   PP id = dp + DP*tp
 * Example, 8 = DP2 x TP2 x PP2: TP groups {0,1} {4,5} {2,3} {6,7} (ids 0..3), DP groups
 * {0,2} {4,6} {1,3} {5,7}, PP groups {0,4} {2,6} {1,5} {3,7}. Under context parallelism the
 * DP x CP group (the ranks sharing tp and pp, id tp*PP + pp, ranked cp + CP*dp) takes DP's
 * place for the gradient reduction, ZeRO's shards and the loss mean: every rank of it holds
 * the same parameters and a different part of the tokens. */
typedef enum it_dist_axis { IT_DIST_DP = 0, IT_DIST_TP = 1, IT_DIST_PP = 2, IT_DIST_CP = 3 } it_dist_axis;
#define IT_DIST_AXES 4

/* The layout alone, computed without MPI (for the unit tests and for checking the sizes
 * before any group is built). size and stride are indexed by it_dist_axis. */
typedef struct it_dist_layout {
    int world;
    int size[IT_DIST_AXES];
    int stride[IT_DIST_AXES]; /* TP: 1, CP: TP, DP: TP*CP, PP: TP*CP*DP */
} it_dist_layout;

/* Checks every size >= 1 and world == dp*tp*cp*pp; on failure one IT_ERR_INVALID_ARG message
 * naming the numbers, *l untouched. it_dist_layout_init: CP = 1. */
IT_API it_status it_dist_layout_init(it_dist_layout *l, int world, int dp, int tp, int pp);
IT_API it_status it_dist_layout_init_cp(it_dist_layout *l, int world, int dp, int tp, int cp, int pp);
/* "DP", "TP", "PP", "CP" */
IT_API const char *it_dist_axis_name(it_dist_axis ax);
/* The world rank at coord[DP], coord[TP], coord[PP], coord[CP], and its inverse (rank in [0, world)). */
IT_API int it_dist_layout_rank(const it_dist_layout *l, const int coord[IT_DIST_AXES]);
IT_API void it_dist_layout_coords(const it_dist_layout *l, int rank, int coord[IT_DIST_AXES]);
/* The id of rank's group along ax (in [0, world/size[ax])), and its members, in group-rank
 * order, into out[0 .. size[ax]). */
IT_API int it_dist_layout_group_id(const it_dist_layout *l, it_dist_axis ax, int rank);
IT_API void it_dist_layout_group_ranks(const it_dist_layout *l, it_dist_axis ax, int rank, int *out);

/* The grid over the world group: one it_dist per axis (a group of one where that size is 1),
 * each usable by every collective above. Collective over the world: every rank calls it with
 * the same sizes. The sizes are checked (it_dist_layout_init) before any communication. */
typedef struct it_dist_grid it_dist_grid;
IT_API it_status it_dist_grid_new(it_dist *world, int dp, int tp, int pp, it_dist_grid **out);
IT_API it_status it_dist_grid_new_cp(it_dist *world, int dp, int tp, int cp, int pp, it_dist_grid **out);
/* Frees the groups (not the world); before the world group is freed. */
IT_API void it_dist_grid_free(it_dist_grid *g);
IT_API const it_dist_layout *it_dist_grid_layout(const it_dist_grid *g);
/* This rank's world rank and its coordinate along ax (= its rank in that axis's group). */
IT_API int it_dist_grid_rank(const it_dist_grid *g);
IT_API int it_dist_grid_coord(const it_dist_grid *g, it_dist_axis ax);
/* This rank's group along ax, its id, and its members' world ranks in group-rank order
 * (it_dist_world(group) of them, owned by the grid). */
IT_API it_dist *it_dist_grid_group(const it_dist_grid *g, it_dist_axis ax);
IT_API int it_dist_grid_group_id(const it_dist_grid *g, it_dist_axis ax);
IT_API const int *it_dist_grid_members(const it_dist_grid *g, it_dist_axis ax);
/* The DP x CP group (the DP group itself when CP is 1) and its id. */
IT_API it_dist *it_dist_grid_dp_cp(const it_dist_grid *g);
IT_API int it_dist_grid_dp_cp_id(const it_dist_grid *g);

/* ---- Tensor parallelism's regions (Megatron's, InfiniTrain's tensor_parallel.cc) as
 * differentiable ops over group d, a TP group. Each returns x itself when d has one rank.
 *   it_tp_copy           forward identity,               backward all-reduce (SUM)
 *   it_tp_reduce         forward all-reduce (SUM),       backward identity
 *   it_sp_gather         (B, T/N, ...) -> (B, T, ...): all-gather along dim 1 (rank r's rows at
 *                        [r*T/N, (r+1)*T/N)), backward reduce-scatter along dim 1
 *   it_sp_reduce_scatter (B, T, ...) -> (B, T/N, ...): the sum over ranks, this rank's rows;
 *                        backward all-gather along dim 1
 * and for a computation every rank repeats on the whole sequence (Mixtral's router; Megatron's
 * gather with tensor_parallel_output_grad=False and its scatter-to-sequence-parallel region):
 *   it_sp_gather_split   forward as it_sp_gather, backward this rank's rows of dy (no sum:
 *                        every rank's gradient is the whole one)
 *   it_sp_split          (B, T, ...) -> (B, T/N, ...): this rank's rows of x, the same on every
 *                        rank; backward all-gather along dim 1
 * Every rank of d calls them in the same order (they are collectives), forward and backward. */
IT_API it_tensor *it_tp_copy(it_dist *d, it_tensor *x);
IT_API it_tensor *it_tp_reduce(it_dist *d, it_tensor *x);
IT_API it_tensor *it_sp_gather(it_dist *d, it_tensor *x);
IT_API it_tensor *it_sp_reduce_scatter(it_dist *d, it_tensor *x);
IT_API it_tensor *it_sp_gather_split(it_dist *d, it_tensor *x);
IT_API it_tensor *it_sp_split(it_dist *d, it_tensor *x);
/* Vocab-parallel embedding's local part: w holds rows [lo, lo + V/N) of the table; ids outside
 * them give zero rows (InfiniTrain's mask). Not reduced: follow with it_tp_reduce or
 * it_sp_reduce_scatter. idx (...) int32/int64 -> (..., C). */
IT_API it_tensor *it_tp_embedding(it_tensor *idx, it_tensor *w, int64_t lo);
/* Vocab-parallel cross entropy (mean over rows, 0-D, the same on every rank of d): logits
 * (..., Vl) float32 are the vocabulary columns [lo, lo + Vl) of the full logits, of which the
 * first `valid` (0..Vl) are real tokens (the rest llm.c's padding); targets (...) are global
 * ids. No rank holds more than its columns; backward communicates nothing. */
IT_API it_tensor *it_tp_cross_entropy(it_dist *d, it_tensor *logits, it_tensor *targets, int64_t lo, int64_t valid);

/* ---- Context parallelism (src/dist/context.c): the sequence cut over a CP group of the grid.
 * Rank r holds T/CP rows of every sequence: the slice [r*T/CP, (r+1)*T/CP) (InfiniTrain's),
 * or with `balance` two chunks of T/(2CP), chunk r then chunk 2CP-1-r (Megatron's and
 * torchtitan's load balancing: every rank gets as much causal work). Attention brings in the
 * earlier keys by --cp_comm_type:
 *   p2p         ring attention over the backend's flash kernels, partial outputs merged by
 *               log-sum-exp, K/V gradients sent back round the ring (without the flash slots,
 *               or with --flash off: all_gather's way);
 *   all_gather  K and V gathered (their gradients reduce-scattered);
 *   a2a         Ulysses: all-to-all to head-cut q, k, v over the whole sequence and back
 *               (the local query and kv heads divisible by CP). */
typedef enum it_cp_comm { IT_CP_P2P = 0, IT_CP_ALL_GATHER = 1, IT_CP_A2A = 2 } it_cp_comm;
IT_API const char *it_cp_comm_name(it_cp_comm c);
/* Rows [lo, lo + n) of rank r's T/CP as runs of global positions: start[k], len[k] for the
 * returned count (1, or 2 when balanced rows cross from one chunk to the other). */
IT_API int it_cp_runs(int64_t T, int cp, int r, bool balance, int64_t lo, int64_t n, int64_t start[2], int64_t len[2]);
/* Rank r's rows of B sequences of T tokens: dst (B, T/CP), in place when dst == src. */
IT_API void it_cp_slice_host(const int32_t *src, int32_t *dst, int64_t B, int64_t T, int cp, int r, bool balance);
/* Causal attention of this rank's rows: q (B, T/CP, H, D), k and v (B, T/CP, Hkv, D) ->
 * (B, T/CP, H * D), as it_attention on the whole sequence gives for these rows. A
 * collective over g: every rank calls it, forward and backward, in the same order. */
IT_API it_tensor *it_cp_attention(it_dist *g, it_cp_comm comm, bool balance, it_tensor *q, it_tensor *k, it_tensor *v);
/* Whether p2p runs as a ring on dev (flash attention on and both its slots there). */
IT_API bool it_cp_ring_available(it_device dev);

/* ---- ZeRO: the optimizer's state (stage 1), and the reduced gradient (stage 2), sharded over
 * the data-parallel ranks of d. Neither keeps a full-size copy of the parameters or gradients.
 * Stage 1: the flat buffers (P elements) are N rows of S = ceil(P/N); rank r owns row r and
 * keeps Adam's m and v for it. After backward, it_zero_reduce_grads reduce-scatters the
 * gradient (the sum, as DDP's all-reduce computes it) into this rank's row.
 * Stage 2: the gradient is cut into buckets of about bucket_bytes (0: 25 MiB), each split
 * evenly over the ranks (a last bucket's len mod N trailing elements are all-reduced and kept
 * by every rank); during the step's last backward (it_backward_hooked with it_zero_ready) a
 * bucket is reduce-scattered as soon as its gradients are final, in one fixed order, last
 * first, on every rank. Afterwards only this rank's shard of the gradient is needed: the
 * model's flat gradient may be released until the next backward (it_model_grads_release).
 * Both: it_zero_step updates the owned parameters and all-gathers them into `params`. */
typedef struct it_zero it_zero;
IT_API it_status it_zero_new(it_dist *d, int stage, size_t bucket_bytes, const it_optim_config *cfg, it_tensor *params,
                             it_tensor *grads, it_zero **out);
IT_API void it_zero_free(it_zero *z);
IT_API int it_zero_stage(const it_zero *z);
/* Reduce-scatter the whole flat gradient into this rank's shard now (stage 1 after backward;
 * stage 2 when its backward was not hooked). */
IT_API it_status it_zero_reduce_grads(it_zero *z);
/* Stage 2, before the step's last backward. `addend` (NULL or flat like the gradient) holds
 * the earlier micro-steps' sum: each bucket becomes addend + gradient just before it is
 * reduced, as DDP's do. */
IT_API it_status it_zero_begin(it_zero *z, it_tensor *addend);
/* The it_grad_ready_fn for it_backward_hooked (ctx = the it_zero). */
IT_API it_status it_zero_ready(void *z, it_tensor *leaf);
/* After backward: reduce what has not been (everything when it_zero_begin was not called this
 * step); *early (may be NULL): how many of the *buckets buckets were reduced during backward. */
IT_API it_status it_zero_finish(it_zero *z, int *early, int *buckets);
/* Global L2 norm of the reduced gradient: the shards' sums of squares, all-reduced. */
IT_API it_status it_zero_grad_norm(it_zero *z, double *norm);
/* The same when other ranks (a TP group) hold some of the same elements: from each owned part
 * g of the gradient (its first element at `flat_lo` of the flat buffer) shared() subtracts the
 * share of the squares other ranks count too (it_model_grad_shared_sumsq); the rest is summed
 * over d and then over `also` (NULL: none). */
typedef it_status (*it_zero_shared_fn)(void *ctx, it_tensor *g, int64_t flat_lo, double *over);
IT_API it_status it_zero_grad_norm_shared(it_zero *z, it_zero_shared_fn shared, void *ctx, it_dist *also, double *norm);
/* Update this rank's shard and all-gather the parameters into the model's flat buffer. */
IT_API it_status it_zero_step(it_zero *z, float lr, float grad_scale);
/* Bytes of optimizer state this rank holds, and of its own shard buffers (the reduced
 * gradient; a parameter row copy at stage 1 when N does not divide P and the row is short). */
IT_API size_t it_zero_state_bytes(const it_zero *z);
IT_API size_t it_zero_shard_bytes(const it_zero *z);
/* Checkpoints: Adam's moments whole (P elements each, host memory, the parameters' dtype,
 * flat order whatever the stage) and the step count. Gather is a collective (every rank gets
 * the whole moments); scatter takes this rank's shard, so a state saved at one world size or
 * stage loads at another. */
IT_API it_status it_zero_state_gather(it_zero *z, void *m, void *v, int64_t *step);
IT_API it_status it_zero_state_scatter(it_zero *z, const void *m, const void *v, int64_t step);

/* ---- The collective watchdog (src/dist/watchdog.c) ----
 * Watches this rank's waits in collectives and point-to-point receives. A wait longer than
 * warn_s seconds prints, once, a flight-recorder line on stderr: the step, the collective, its
 * group and bytes, and each peer that has not arrived (its host, and what it is doing, or that
 * it is not running or cannot be reached); one longer than timeout_s prints the line and ends
 * the process with exit status IT_DIST_TIMEOUT_EXIT (mpirun then ends the job). 0 turns either
 * off. Collective over `world` (the ranks exchange their hostnames and where to probe them);
 * nothing to do on a group of one. `app` starts each line. */
#define IT_DIST_TIMEOUT_EXIT 75 /* EX_TEMPFAIL: a launcher may retry (scripts/run-elastic.sh) */
IT_API it_status it_dist_watchdog_start(it_dist *world, const char *app, double warn_s, double timeout_s);
/* The training step the lines name. */
IT_API void it_dist_watchdog_step(int64_t step);
/* From a signal handler (async-signal-safe): when this rank is waiting, the checker prints the
 * line ("stopped by signal N while waiting") before the signal's effect ends the process. */
IT_API void it_dist_watchdog_signal(int sig);
IT_API void it_dist_watchdog_stop(void);
/* Milliseconds this process has spent waiting in collectives and receives (on groups of more
 * than one rank), counted whether or not the watchdog runs. */
IT_API double it_dist_waited_ms(void);
/* A world rank's hostname, gathered by it_dist_watchdog_start (even with both limits 0; "?" before). */
IT_API const char *it_dist_host_of(int world_rank);

#ifdef __cplusplus
}
#endif
#endif
