/* Everything a run needs before its first step, in stages. Each stage validates what it can
 * before it allocates, and says who meets its failures: every rank alike (the ranks decided
 * together, so rank 0 alone reports) or this rank alone (a file only it cannot read: it
 * aborts the job so that no rank waits forever in a collective). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/node.h"
#include "infinitrain/hf.h"
#include "infinitrain/precision.h"
#include "train/train_internal.h"

/* The device each rank drives, and the group of ranks. */
static it_status setup_group(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_status st;
    if (!c->input_bin) return it_error(IT_ERR_INVALID_ARG, "--input_bin: required (an llm.c token shard)");
    if (c->save_interval > 0 && !c->save)
        return it_error(IT_ERR_INVALID_ARG, "--save_interval: %d needs --save DIR (where to write)", c->save_interval);
    if (c->save && c->save_interval <= 0)
        return it_error(IT_ERR_INVALID_ARG, "--save %s: needs --save_interval N (how often)", c->save);
    if (c->profile) { /* its files are written after the last step: refuse a path they cannot go to now */
        char dir[PATH_MAX];
        const char *slash = strrchr(c->profile, '/');
        int n = slash ? (int)(slash - c->profile) : 1;
        snprintf(dir, sizeof dir, "%.*s", n > 0 ? n : 1, slash ? (n > 0 ? c->profile : "/") : ".");
        if (!*c->profile || access(dir, W_OK | X_OK) != 0)
            return it_error(IT_ERR_INVALID_ARG, "--profile %s: cannot write into '%s': %s", c->profile, dir,
                            *c->profile ? strerror(errno) : "empty path");
    }
    it_precision_config pcheck; /* a bad spec stops here, before any work */
    if (c->precision_check && (st = it_precision_parse(c->precision_check, &pcheck))) return st;
    for (int i = 0; i < 2; i++) {
        const char *dir = i ? c->load : c->save;
        if (dir && (!*dir || strlen(dir) > PATH_MAX - 128))
            return it_error(IT_ERR_INVALID_ARG, "--%s: '%.64s%s' is %s", i ? "load" : "save", dir,
                            strlen(dir) > 64 ? "..." : "", *dir ? "too long a path" : "empty");
    }
    if ((st = it_device_parse(c->device, &ctx->dev))) {
        /* unknown, not loadable or not usable here: one exit status for all (2, the user's to fix) */
        char why[1024];
        snprintf(why, sizeof why, "%s", it_last_error());
        return it_error(IT_ERR_NOT_FOUND, "--device: %s", why);
    }
    it_dist_env(&ctx->rank, &ctx->world);
    if (ctx->world > 1 && !strchr(c->device, ':')) { /* each rank drives one device */
        int count = 1;
        if ((st = it_device_count(ctx->dev.backend, &count))) return st;
        ctx->dev.index = ctx->rank % (count > 0 ? count : 1);
    }
    if ((st = it_dist_new(ctx->dev, &ctx->dist))) return it_error_context("data parallel: ");
    ctx->grank = ctx->rank = it_dist_rank(ctx->dist);
    ctx->gworld = ctx->world = it_dist_world(ctx->dist);
    ctx->data_rank = ctx->rank, ctx->data_world = ctx->world, ctx->cp_size = 1;
    ctx->tp_size = ctx->pp_size = 1;
    ctx->quiet = c->quiet || ctx->rank != 0;
    return IT_OK;
}

/* The dims tensor parallelism cuts, known before any model is built: the flags' GPT-2 (its
 * preset and overrides, as setup_model builds it) or an llm.c file's header. false when they
 * are not known here (a bad preset or an unreadable or foreign file: setup_model says why). */
typedef struct grid_dims {
    const char *what, *from;
    int64_t n_head, n_kv_head, ffn, vocab, n_layer;
} grid_dims;

static bool grid_model_dims(const it_train_config *c, grid_dims *d) {
    bool gpt2 = strcmp(c->app, "gpt2") == 0, llama = strcmp(c->app, "llama3") == 0,
         mixtral = strcmp(c->app, "mixtral") == 0, qwen3 = strcmp(c->app, "qwen3") == 0;
    d->what = gpt2 ? "GPT-2" : llama ? "LLaMA-3" : qwen3 ? "Qwen3" : "Mixtral";
    if (!c->llmc_filepath) {
        it_gpt2_config cfg;
        if (!gpt2 || it_gpt2_preset(c->model, &cfg)) return false;
        if (c->n_head) cfg.n_head = c->n_head;
        if (c->n_embd) cfg.n_embd = c->n_embd;
        if (c->n_layer) cfg.n_layer = c->n_layer;
        d->n_layer = cfg.n_layer;
        if (c->vocab_size) cfg.padded_vocab_size = (c->vocab_size + 63) / 64 * 64; /* as setup_model pads */
        d->from = "from the flags";
        d->n_head = d->n_kv_head = cfg.n_head;
        d->ffn = 4 * (int64_t)cfg.n_embd;
        d->vocab = cfg.padded_vocab_size;
        return true;
    }
    int32_t h[32];
    FILE *f = (gpt2 || llama || mixtral || qwen3) ? fopen(c->llmc_filepath, "rb") : NULL;
    size_t got = f ? fread(h, sizeof h[0], 32, f) : 0;
    if (f) fclose(f);
    if (got != 32) return false;
    d->from = "from the --llmc_filepath header";
    if (gpt2 && h[0] == 20240326) { /* [4] n_layer, [5] n_head, [6] n_embd, [7] padded vocab */
        d->n_layer = h[4];
        d->n_head = d->n_kv_head = h[5];
        d->ffn = 4 * (int64_t)h[6];
        d->vocab = h[7];
        return true;
    }
    if (llama && h[0] == 20240803) { /* [3] vocab, [5] n_head, [6] n_kv_head, [7] n_embd, [8]/[9] the FFN's */
        float mult;
        memcpy(&mult, &h[8], sizeof mult);
        if (!(mult > 0 && mult < 64) || h[9] < 1 || h[9] > (1 << 20) || h[7] < 1 || h[7] > (1 << 16)) return false;
        d->n_layer = h[4];
        d->n_head = h[5];
        d->n_kv_head = h[6];
        d->ffn = it_llama3_ffn_hidden(h[7], mult, h[9]);
        d->vocab = h[3];
        return true;
    }
    if (mixtral && h[0] == 20260513) { /* [3] vocab, [4] n_layer, [5] n_head, [6] n_kv_head, [16] FFN */
        d->n_layer = h[4];
        d->n_head = h[5];
        d->n_kv_head = h[6];
        d->ffn = h[16];
        d->vocab = h[3];
        return true;
    }
    if (qwen3 && h[0] == 20240804) { /* [3] vocab, [4] n_layer, [5] n_head, [6] n_kv_head, [8] FFN */
        d->n_layer = h[4];
        d->n_head = h[5];
        d->n_kv_head = h[6];
        d->ffn = h[8];
        d->vocab = h[3];
        return true;
    }
    return false;
}

/* The model's cut dims against tp, on every rank, then agreed: one rank's verdict (a file that
 * differs between ranks) stops them all, and rank 0 alone says why. */
static it_status grid_check_model(it_train_ctx *ctx, int tp, int pp) {
    const it_train_config *c = ctx->cfg;
    grid_dims d = {0};
    double bad[2] = {0, 0}; /* [0]: this rank refuses, [1]: rank 0 does */
    char msg[384] = "";
    int vpp = c->virtual_pipeline_parallel > 1 ? c->virtual_pipeline_parallel : 1;
    if (grid_model_dims(c, &d) && d.n_layer > 0 && pp * vpp > d.n_layer) {
        if (vpp > 1)
            snprintf(msg, sizeof msg,
                     "--pipeline_parallel %d x --virtual_pipeline_parallel %d: %d chunks for %s's %lld layers (%s): at "
                     "most one chunk per layer",
                     pp, vpp, pp * vpp, d.what, (long long)d.n_layer, d.from);
        else
            snprintf(msg, sizeof msg,
                     "--pipeline_parallel: %d stages for %s's %lld layers (%s): at most one stage per layer", pp,
                     d.what, (long long)d.n_layer, d.from);
    }
    if (tp > 1 && !*msg && grid_model_dims(c, &d)) {
        const struct {
            const char *name;
            int64_t n;
        } dims[] = {
            {"n_head", d.n_head}, {"n_kv_head", d.n_kv_head}, {"FFN width", d.ffn}, {"padded vocabulary", d.vocab}};
        for (size_t i = 0; i < sizeof dims / sizeof dims[0] && !*msg; i++)
            /* kv heads: cut when TP divides them, each kept whole on TP/n_kv_head ranks when TP is a
             * multiple of them (model.c) */
            if (dims[i].n > 0 && dims[i].n % tp && !(i == 1 && tp % dims[i].n == 0))
                snprintf(msg, sizeof msg, "--tensor_parallel: %d does not divide %s's %s %lld (%s%s)", tp, d.what,
                         dims[i].name, (long long)dims[i].n, d.from,
                         i == 1 ? "; nor is it a multiple of it: kv heads are cut, or kept one per rank" : "");
    }
    bad[0] = *msg ? 1 : 0;
    bad[1] = ctx->rank == 0 ? bad[0] : 0;
    it_status st = it_dist_all_reduce_host(ctx->dist, bad, 2, IT_DTYPE_FP64, IT_CCL_SUM);
    if (st) return it_error_context("tensor parallel: ");
    if (bad[1] > 0) return it_error(IT_ERR_INVALID_ARG, "%s", msg);
    if (bad[0] > 0) {
        char grid[64];
        snprintf(grid, sizeof grid, pp > 1 ? "--tensor_parallel %d --pipeline_parallel %d" : "--tensor_parallel %d", tp,
                 pp);
        return it_error(IT_ERR_INVALID_ARG,
                        "%s: %d of %d ranks read a model it does not divide (%s differs between ranks; rank 0's "
                        "divides)",
                        grid, (int)bad[0], ctx->gworld, c->llmc_filepath ? c->llmc_filepath : "the model");
    }
    return IT_OK;
}

/* --context_parallel's own checks, before any group or model (one line naming the flag and
 * the numbers): the sequence cut (into 2*CP chunks when balanced), SP's cut of each part, a2a's
 * heads, and what cannot run on a part of each sequence. */
static it_status train_cp_check(it_train_ctx *ctx, int tp, int cp) {
    const it_train_config *c = ctx->cfg;
    if (cp == 1) return IT_OK;
    int64_t T = c->sequence_length, parts = c->cp_load_balance ? 2 * (int64_t)cp : cp;
    if (cp > 64) return it_error(IT_ERR_INVALID_ARG, "--context_parallel %d: at most 64 ranks per CP group", cp);
    if (strcmp(c->app, "mixtral") == 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "--context_parallel %d: not supported for Mixtral (its router's "
                        "load-balancing loss is taken over whole sequences)",
                        cp);
    if (T % parts)
        return it_error(IT_ERR_INVALID_ARG, "--context_parallel %d%s: --sequence_length %lld is not divisible by %lld",
                        cp, c->cp_load_balance ? " --cp_load_balance (2 x CP chunks)" : "", (long long)T,
                        (long long)parts);
    if (c->sequence_parallel && (T / cp) % tp)
        return it_error(
            IT_ERR_INVALID_ARG,
            "--context_parallel %d --sequence_parallel: each rank's %lld rows (--sequence_length %lld / CP) "
            "are not divisible by --tensor_parallel %d",
            cp, (long long)(T / cp), (long long)T, tp);
    grid_dims d = {0};
    if (c->cp_comm_type == IT_CP_A2A && grid_model_dims(c, &d) && d.n_head % tp == 0) {
        int64_t qh = d.n_head / tp, kvh = d.n_kv_head % tp ? 1 : d.n_kv_head / tp; /* kv heads kept when TP exceeds */
        if (qh % cp || kvh % cp)
            return it_error(IT_ERR_INVALID_ARG,
                            "--cp_comm_type a2a: each rank's %lld query and %lld kv heads (%s's %lld and %lld / TP %d) "
                            "are not divisible by --context_parallel %d",
                            (long long)qh, (long long)kvh, d.what, (long long)d.n_head, (long long)d.n_kv_head, tp, cp);
    }
    if (c->freq_generate_txt > 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "--context_parallel %d: --freq_generate_txt (sampling whole sequences on "
                        "one rank) is not supported with context parallelism",
                        cp);
    return IT_OK;
}

/* --tensor_parallel: the DP x TP grid over the job (InfiniTrain's layout, rank = tp + TP*dp);
 * from here on ctx->dist/rank/world are the DP group's. Every rank has the same flags (agreed
 * before), so every rank decides alike. */
static it_status setup_grid(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    int tp = c->tensor_parallel > 0 ? c->tensor_parallel : 1, n = ctx->gworld;
    int pp = c->pipeline_parallel > 0 ? c->pipeline_parallel : 1;
    int cp = c->context_parallel > 0 ? c->context_parallel : 1;
    ctx->cp_size = 1;
    if (c->sequence_parallel && tp == 1)
        return it_error(IT_ERR_INVALID_ARG, "--sequence_parallel: needs --tensor_parallel N > 1 (it splits the "
                                            "sequence over the TP group)");
    if (c->virtual_pipeline_parallel > 1 && pp == 1)
        return it_error(IT_ERR_INVALID_ARG, "--virtual_pipeline_parallel %d: needs --pipeline_parallel P > 1",
                        c->virtual_pipeline_parallel);
    if (c->virtual_pipeline_parallel > 64)
        return it_error(IT_ERR_INVALID_ARG, "--virtual_pipeline_parallel %d: at most 64 chunks per stage",
                        c->virtual_pipeline_parallel);
    if (c->cp_load_balance && cp == 1)
        return it_error(IT_ERR_INVALID_ARG, "--cp_load_balance: needs --context_parallel N > 1");
    it_status st = train_cp_check(ctx, tp, cp);
    if (st) return st;
    if (tp == 1 && pp == 1 && cp == 1) return IT_OK;
    if (n % (tp * pp * cp) && cp > 1)
        return it_error(IT_ERR_INVALID_ARG,
                        "--context_parallel %d: TP x CP x PP = %d x %d x %d = %d does not divide the %d ranks (world "
                        "= DP x TP x CP x PP)",
                        cp, tp, cp, pp, tp * cp * pp, n);
    if (n % (tp * pp) && pp == 1)
        return it_error(IT_ERR_INVALID_ARG,
                        "--tensor_parallel: %d does not divide the %d ranks (world = DP x TP x PP = DP x %d x 1)", tp,
                        n, tp);
    if (n % (tp * pp))
        return it_error(IT_ERR_INVALID_ARG,
                        "--tensor_parallel %d x --pipeline_parallel %d: %d does not divide the %d ranks (world = DP x "
                        "TP x PP = DP x %d x %d)",
                        tp, pp, tp * pp, n, tp, pp);
    if (c->sequence_parallel && c->sequence_length % tp)
        return it_error(IT_ERR_INVALID_ARG,
                        "--sequence_parallel: --sequence_length %lld is not divisible by --tensor_parallel %d",
                        (long long)c->sequence_length, tp);
    if (pp > 1 && c->freq_generate_txt > 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "--pipeline_parallel %d: --freq_generate_txt (sampling; InfiniTrain refuses it too) is not "
                        "supported with pipeline parallelism",
                        pp);
    st = grid_check_model(ctx, tp, pp); /* before any model is built: one line, not one per rank */
    if (st) return st;
    st = it_dist_grid_new_cp(ctx->dist, n / (tp * cp * pp), tp, cp, pp, &ctx->grid);
    if (st) return it_error_context("model parallel: ");
    ctx->job = ctx->dist;
    /* DP x CP: every rank that holds these parameters (the DP group itself without CP) */
    ctx->dist = it_dist_grid_dp_cp(ctx->grid);
    ctx->tp = tp > 1 ? it_dist_grid_group(ctx->grid, IT_DIST_TP) : NULL;
    ctx->pp = pp > 1 ? it_dist_grid_group(ctx->grid, IT_DIST_PP) : NULL;
    ctx->cp = cp > 1 ? it_dist_grid_group(ctx->grid, IT_DIST_CP) : NULL;
    ctx->tp_size = tp;
    ctx->pp_size = pp;
    ctx->cp_size = cp;
    ctx->cp_rank = it_dist_grid_coord(ctx->grid, IT_DIST_CP);
    if (ctx->pp && !ctx->quiet) /* every stage's device has the same backend */
        printf("pipeline: activations %s\n", it_dist_p2p_on_device(ctx->pp)
                                                 ? "device to device (the ccl's send/recv, one group per schedule step)"
                                                 : "staged through host memory (MPI)");
    if (ctx->cp && !ctx->quiet)
        printf("context parallel: %d ranks, %s%s, %s\n", cp, it_cp_comm_name((it_cp_comm)c->cp_comm_type),
               c->cp_comm_type == IT_CP_P2P && !it_cp_ring_available(ctx->dev)
                   ? " (no flash attention here: K/V gathered as all_gather does)"
                   : "",
               c->cp_load_balance ? "two mirrored chunks per rank (load balanced)" : "one contiguous slice per rank");
    ctx->rank = it_dist_rank(ctx->dist);
    ctx->world = it_dist_world(ctx->dist);
    ctx->data_rank = it_dist_grid_coord(ctx->grid, IT_DIST_DP);
    ctx->data_world = it_dist_grid_layout(ctx->grid)->size[IT_DIST_DP];
    /* every rank holding part of one model replica (the same dp and cp): the norm's and the
     * checkpoint's group */
    if (tp > 1 && pp > 1) {
        int replica = it_dist_grid_coord(ctx->grid, IT_DIST_DP) * cp + ctx->cp_rank;
        st = it_dist_split(ctx->job, replica, ctx->grank, &ctx->mp);
        if (st) return it_error_context("model parallel: ");
        it_dist_set_label(ctx->mp, "TPxPP");
    }
    return IT_OK;
}

/* The model-parallel group: TP x PP, or whichever of the two there is. */
static it_dist *model_group(const it_train_ctx *ctx) { return ctx->mp ? ctx->mp : ctx->tp ? ctx->tp : ctx->pp; }

/* All ranks must train the same model on the same data with the same flags. The device may
 * differ (each rank drives its own), so only its backend name takes part. */
static it_status setup_agree(it_train_ctx *ctx) {
    enum { MAX = 64 };
    uint64_t h[MAX];
    const char *names[MAX];
    bool differs[MAX];
    int n = it_train_flags_agree_hashes(ctx->cfg, h, names, MAX - 1);
    const char *backend = ctx->dev.backend->name;
    h[n] = 1469598103934665603ull;
    for (const char *p = backend; *p; p++) h[n] = (h[n] ^ (unsigned char)*p) * 1099511628211ull;
    names[n++] = "device (backend)";
    it_status st = it_dist_check_equal(ctx->dist, h, n, differs);
    if (st) return st;
    char list[512] = "";
    for (int i = 0; i < n; i++)
        if (differs[i])
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s--%s", *list ? ", " : "", names[i]);
    if (*list)
        return it_error(IT_ERR_INVALID_ARG, "data parallel: the ranks were given different flags: %s differ%s", list,
                        strchr(list, ',') ? "" : "s");
    return IT_OK;
}

/* The collective watchdog over the job's ranks (src/dist/watchdog.c): from here on, a rank
 * stuck in a collective says on whom, and past --collective_timeout_s ends. */
static it_status setup_watchdog(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    return it_dist_watchdog_start(ctx->dist, c->app, c->collective_warn_s, c->collective_timeout_s);
}

/* --use_distributed_optimizer: InfiniTrain's older switch (before its --zero_stage alone
 * decided): with it a stage of 0 means 1. */
int train_zero_stage(const it_train_config *c) {
    return c->zero_stage ? c->zero_stage : c->use_distributed_optimizer ? 1 : 0;
}

/* --activation_recompute and its --recompute_* flags, InfiniTrain's rules: without it nothing
 * is recomputed; granularity none means none; selective is not implemented (InfiniTrain stops
 * at its first forward, we before any work). */
static it_status setup_recompute(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    if (!c->activation_recompute || c->recompute_granularity == IT_GRAN_NONE) return IT_OK;
    if (c->recompute_granularity == IT_GRAN_SELECTIVE)
        return it_error(IT_ERR_INVALID_ARG, "--recompute_granularity selective: not implemented (as in InfiniTrain); "
                                            "use full");
    it_status st = it_model_set_recompute(ctx->model, c->recompute_method, c->recompute_num_layers);
    if (!st && !ctx->quiet) {
        if (c->recompute_method == IT_RECOMPUTE_EACH)
            printf("activation recompute: full, every transformer block\n");
        else
            printf("activation recompute: full, %s %d blocks\n",
                   c->recompute_method == IT_RECOMPUTE_UNIFORM ? "uniform groups of" : "per chunk, its first",
                   c->recompute_num_layers);
    }
    return st;
}

/* Build or load the model the flags describe. */
static it_status setup_model(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    bool gpt2 = strcmp(c->app, "gpt2") == 0;
    it_status st;
    it_model_parallel par = {
        ctx->tp, c->sequence_parallel, ctx->pp,           model_group(ctx), c->virtual_pipeline_parallel,
        ctx->cp, c->cp_comm_type,      c->cp_load_balance};
    if (c->max_memory_mb > 0) it_mem_set_limit(ctx->dev, (size_t)c->max_memory_mb << 20);
    /* a size given where the model comes from a file (or is not a GPT-2) would be ignored */
    const struct {
        const char *flag;
        int value;
    } sizing[] = {{"n_layer", c->n_layer},
                  {"n_head", c->n_head},
                  {"n_embd", c->n_embd},
                  {"block_size", c->block_size},
                  {"vocab_size", c->vocab_size}};
    const char *from = c->hf_model ? "hf_model" : c->llmc_filepath ? "llmc_filepath" : NULL;
    for (size_t i = 0; i < sizeof sizing / sizeof sizing[0]; i++) {
        if (!sizing[i].value) continue;
        if (!gpt2)
            return it_error(IT_ERR_INVALID_ARG,
                            "--%s: sizes a GPT-2 built from scratch; %s reads its model's size "
                            "from --llmc_filepath or --hf_model",
                            sizing[i].flag, c->app);
        if (from)
            return it_error(IT_ERR_INVALID_ARG, "--%s and --%s: the model file gives the model's size (drop --%s)",
                            sizing[i].flag, from, sizing[i].flag);
    }
    if (c->hf_model) {
        const char *family = NULL;
        if (c->llmc_filepath)
            return it_error(IT_ERR_INVALID_ARG, "--hf_model and --llmc_filepath: give one model to start from");
        if ((st = it_hf_family(c->hf_model, &family))) return it_error_context("--hf_model: ");
        if (strcmp(family, c->app) != 0)
            return it_error(IT_ERR_INVALID_ARG, "--hf_model %s: a %s model; train it with the %s app, not %s",
                            c->hf_model, family, family, c->app);
        if ((st = it_hf_load(c->hf_model, ctx->dev, &par, &ctx->model))) return it_error_context("--hf_model: ");
    } else if (c->llmc_filepath) {
        if ((st = it_model_load_family(c->app, c->llmc_filepath, ctx->dev, &par, &ctx->model)))
            return it_error_context("--llmc_filepath: ");
    } else {
        if (!gpt2)
            return it_error(IT_ERR_INVALID_ARG, "--llmc_filepath: required for %s (it has no built-in model presets)",
                            c->app);
        it_gpt2_config cfg;
        if ((st = it_gpt2_preset(c->model, &cfg))) return it_error_context("--model: ");
        if (c->n_layer) cfg.n_layer = c->n_layer;
        if (c->n_head) cfg.n_head = c->n_head;
        if (c->n_embd) cfg.n_embd = c->n_embd;
        if (c->block_size) cfg.block_size = c->block_size;
        if (c->vocab_size) {
            cfg.vocab_size = c->vocab_size;
            cfg.padded_vocab_size = (c->vocab_size + 63) / 64 * 64; /* llm.c pads for aligned kernels */
        }
        if ((st = it_gpt2_config_check(&cfg))) return st;
        /* Known before building: refuse before allocating and initializing the parameters. */
        if (c->sequence_length > cfg.block_size)
            return it_error(IT_ERR_INVALID_ARG, "--sequence_length: %lld exceeds the model's block_size %d",
                            (long long)c->sequence_length, cfg.block_size);
        if ((st = it_gpt2_new_tp(&cfg, ctx->dev, c->seed, &par, &ctx->model))) return st;
    }
    it_model_set_aux_loss_coeff(ctx->model, c->moe_aux_loss_coeff);
    ctx->info = it_model_get_info(ctx->model);
    return setup_recompute(ctx);
}

const char *train_lora_targets(const it_train_config *c) {
    return c->lora_target_modules ? c->lora_target_modules : it_model_lora_default_targets(c->app);
}

/* n with thousands separators, as PEFT prints counts ("442,368"). */
static void with_commas(int64_t n, char *buf, size_t cap) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)n), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < cap; i++) {
        if (i > 0 && digits[i - 1] != '-' && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

/* --lora_rank > 0: adapters on the target modules, base weights frozen (every rank alike:
 * the flags agree and the model is the same). */
static it_status setup_lora(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    if (c->lora_rank <= 0) {
        const char *set = c->lora_load_path      ? "lora_load_path"
                          : c->lora_save_path    ? "lora_save_path"
                          : c->lora_merge_output ? "lora_merge_output"
                                                 : NULL;
        if (set) return it_error(IT_ERR_INVALID_ARG, "--%s: needs --lora_rank R > 0 (LoRA is off)", set);
        return IT_OK;
    }
    const char *targets = train_lora_targets(c);
    it_lora_config lc = {c->lora_rank, c->lora_alpha, targets, c->seed};
    it_status st = it_model_lora_apply(ctx->model, &lc);
    if (st) return st;
    if (!ctx->quiet) {
        int64_t trainable, total;
        char a[32], b[32];
        it_model_lora_counts(ctx->model, &trainable, &total);
        with_commas(trainable, a, sizeof a);
        with_commas(total, b, sizeof b);
        printf("LoRA: rank %d, alpha %g, %d linear layers (%s)\n", c->lora_rank, (double)c->lora_alpha,
               it_model_lora_count(ctx->model) / 2, targets);
        printf("trainable params: %s || all params: %s || trainable%%: %.4f\n", a, b,
               100.0 * (double)trainable / (double)total);
    }
    return IT_OK;
}

/* --lora_load_path: this rank's file. */
static it_status setup_lora_load(it_train_ctx *ctx) {
    const char *path = ctx->cfg->lora_load_path;
    if (!path || ctx->cfg->lora_rank <= 0) return IT_OK;
    it_status st = it_hf_lora_is_peft(path) ? it_hf_lora_load(ctx->model, path) : it_model_lora_load(ctx->model, path);
    if (st) return it_error_context("--lora_load_path: ");
    if (!ctx->quiet) printf("LoRA: adapters loaded from %s\n", path);
    return IT_OK;
}

/* B, T, the step's tokens and the accumulation they imply. */
static it_status setup_batch(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    /* the data's ranks: DP's (a context-parallel group shares each sequence) */
    int64_t B = c->batch_size, T = c->sequence_length, world = ctx->data_world;
    int64_t total = c->total_batch_size ? c->total_batch_size : B * T * world;
    if (T > ctx->info->block_size)
        return it_error(IT_ERR_INVALID_ARG, "--sequence_length: %lld exceeds the model's block_size %lld", (long long)T,
                        (long long)ctx->info->block_size);
    if (total % (B * T * world) != 0) {
        if (world > 1)
            return it_error(IT_ERR_INVALID_ARG,
                            "--total_batch_size: %lld is not a multiple of batch_size*sequence_length*ranks = "
                            "%lld*%lld*%lld = %lld",
                            (long long)total, (long long)B, (long long)T, (long long)world, (long long)(B * T * world));
        return it_error(IT_ERR_INVALID_ARG,
                        "--total_batch_size: %lld is not a multiple of batch_size*sequence_length = %lld*%lld = %lld",
                        (long long)total, (long long)B, (long long)T, (long long)(B * T));
    }
    ctx->B = B;
    ctx->T = T;
    ctx->Tl = T / ctx->cp_size;
    ctx->total = total;
    ctx->accum = total / (B * T * world);
    if (train_zero_stage(c) && c->optimizer == IT_OPTIM_SGD && !ctx->quiet)
        printf("note: --zero_stage %d with sgd: no optimizer state to shard\n", train_zero_stage(c));
    return IT_OK;
}

static it_status setup_data(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_status st;
    if ((st = it_loader_new(c->input_bin, ctx->B, ctx->T, ctx->data_rank, ctx->data_world, &ctx->loader)) ||
        (st = it_loader_check_vocab(ctx->loader, ctx->info->vocab_size)))
        return it_error_context("--input_bin: ");
    if (c->tokenizer_bin && c->tokenizer)
        return it_error(IT_ERR_INVALID_ARG, "--tokenizer and --tokenizer_bin: give one tokenizer");
    if (c->tokenizer_bin && (st = it_tokenizer_load(c->tokenizer_bin, &ctx->tok))) return st;
    /* --tokenizer: any format (llm.c's file, a rank file, a tokenizer.json, a model directory) */
    if (c->tokenizer && (st = it_tokenizer_open(c->tokenizer, &ctx->tok))) return it_error_context("--tokenizer: ");
    /* A tokenizer of another vocabulary (a byte-level one beside a 50257-id GPT-2, or the
     * reverse) decodes the samples into nonsense: said once, the run goes on. */
    int64_t tv = ctx->tok ? it_tokenizer_vocab_size(ctx->tok) : 0, mv = ctx->info->vocab_size;
    if (ctx->tok && tv != mv && !ctx->quiet && ctx->grank == 0)
        fprintf(stderr,
                "%s: warning: the tokenizer (--%s) has %lld ids and the model %lld: they are not one vocabulary, "
                "and the samples will not read as text\n",
                c->app, c->tokenizer ? "tokenizer" : "tokenizer_bin", (long long)tv, (long long)mv);
    return IT_OK;
}

/* Parameters: refuse if the ranks loaded different ones (a checkpoint that differs between
 * ranks' file systems), then broadcast rank 0's and check that every rank holds them. */
static it_status sync_params(it_train_ctx *ctx, it_tensor *params, const char *ck);

/* The base parameters, then the adapters (their initial values or --lora_load_path's). */
static it_status setup_sync_params(it_train_ctx *ctx) {
    const char *from = ctx->cfg->hf_model ? ctx->cfg->hf_model : ctx->cfg->llmc_filepath;
    it_status st = sync_params(ctx, it_model_params(ctx->model), from);
    if (!st && it_model_has_lora(ctx->model))
        st = sync_params(ctx, it_model_trainable(ctx->model), ctx->cfg->lora_load_path);
    return st;
}

static it_status sync_params(it_train_ctx *ctx, it_tensor *params, const char *ck) {
    uint64_t h;
    bool differs;
    if (ctx->world == 1) return IT_OK; /* one data-parallel rank: nothing to compare or send */
    it_status st = it_dist_tensor_hash(params, &h);
    if (!st) st = it_dist_check_equal(ctx->dist, &h, 1, &differs);
    if (st) return st;
    if (differs)
        return it_error(IT_ERR_INVALID_ARG,
                        "data parallel: the ranks hold different initial parameters (%s%s differs "
                        "between ranks)",
                        ck ? "the checkpoint " : "the model built from --model/--seed", ck ? ck : "");
    if ((st = it_dist_broadcast(ctx->dist, params, 0))) return st;
    it__weights_written(); /* autocast's copies of the parameters are stale */
    if ((st = it_dist_tensor_hash(params, &h)) || (st = it_dist_check_equal(ctx->dist, &h, 1, &differs))) return st;
    if (differs) return it_error(IT_ERR_INTERNAL, "data parallel: parameters differ after the broadcast from rank 0");
    return IT_OK;
}

static it_status setup_optimizer(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    /* with LoRA, the adapters alone: optimizer state, DDP buckets and ZeRO-1 shards cover them */
    it_tensor *params = it_model_trainable(ctx->model), *grads = it_model_grads(ctx->model);
    it_optim_config ocfg = {c->optimizer, 0.9f, 0.999f, 1e-8f, c->weight_decay};
    it_status st = train_zero_stage(c) ? it_zero_new(ctx->dist, train_zero_stage(c), (size_t)c->ddp_bucket_kb << 10,
                                                     &ocfg, params, grads, &ctx->zero)
                                       : it_optimizer_new(&ocfg, params, grads, &ctx->opt);
    if (!st && ctx->world > 1 && !ctx->zero)
        st = it_grad_sync_new(ctx->dist, grads, (size_t)c->ddp_bucket_kb << 10, &ctx->gsync);
    if (!st && ctx->world > 1 && it_model_has_lora(ctx->model) && !ctx->quiet)
        printf("LoRA: DDP all-reduces %zu bytes of adapter gradients per step (the model's %zu bytes stay local)\n",
               it_tensor_nbytes(grads), it_tensor_nbytes(it_model_params(ctx->model)));
    return st;
}

/* A file written after the last step (by global rank 0): refuse now a path it cannot go to,
 * rather than after hours of training. The check is the write's own first step, a temporary
 * file beside the path, removed again. */
static it_status check_output_path(const char *flag, const char *path) {
    struct stat sb;
    if (!*path) return it_error(IT_ERR_INVALID_ARG, "--%s: empty path", flag);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return it_error(IT_ERR_INVALID_ARG, "--%s %s: is a directory (expected the path of a file to write)", flag,
                        path);
    it_afile *f;
    if (it_afile_open(path, &f)) return it_error_context("--%s: ", flag);
    it_afile_abort(f);
    return IT_OK;
}

/* The learning-rate schedule, from the agreed flags: its refusals (InfiniTrain's CHECKs) come
 * before the model is read, which for a large checkpoint takes a while. */
static it_status setup_schedule(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_lr_scheduler_config lc = {c->lr_decay,        c->learning_rate,  c->min_lr,       c->lr_warmup_init,
                                 c->lr_warmup_iters, c->lr_decay_iters, c->num_iteration};
    return it_lr_scheduler_init(&ctx->sched, &lc);
}

static bool same_file(const char *a, const char *b);

/* An output directory (--output_hf, a PEFT --lora_save_path): not `input`, the one the run
 * reads (its files are replaced one by one: a crash between two would leave neither whole),
 * existing or creatable in an existing parent. */
static it_status check_output_dir(const char *flag, const char *dir, const char *input, const char *input_flag) {
    struct stat sb;
    if (!dir) return IT_OK;
    if (!*dir) return it_error(IT_ERR_INVALID_ARG, "--%s: empty path", flag);
    if (input && same_file(dir, input))
        return it_error(IT_ERR_INVALID_ARG, "--%s %s: is --%s's directory; write to another and move it", flag, dir,
                        input_flag);
    if (stat(dir, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? IT_OK
                                   : it_error(IT_ERR_INVALID_ARG, "--%s %s: exists and is not a directory", flag, dir);
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = 0;
    else
        snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(parent, W_OK) != 0)
        return it_error(IT_ERR_INVALID_ARG, "--%s %s: cannot be created (%s is not a writable directory)", flag, dir,
                        parent);
    return IT_OK;
}

/* --output_hf, --max_shard_size and a PEFT --lora_save_path. */
static it_status check_output_dirs(const it_train_config *c) {
    size_t bytes;
    it_status st;
    if (c->max_shard_size && it_hf_parse_size(c->max_shard_size, &bytes)) return it_error_context("--max_shard_size: ");
    if ((st = check_output_dir("output_hf", c->output_hf, c->hf_model, "hf_model"))) return st;
    if (c->lora_save_format != 1) return IT_OK;
    return check_output_dir("lora_save_path", c->lora_save_path, c->lora_load_path, "lora_load_path");
}

/* Same file: the same path, or two existing paths on one inode. */
static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b) return false;
    if (!strcmp(a, b)) return true;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Global rank 0, before the model is read: each file written after the last step (and the
 * loss log) can be written, is none of the files the run reads, and no two are one file. A
 * checkpoint may replace the model it started from (--output_checkpoint = --llmc_filepath),
 * and adapters the adapters they started from: both are read whole at the start, and written
 * by a rename at the end. */
static it_status setup_outputs(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    if (ctx->grank != 0) return IT_OK;
    const char *out[][3] = {/* flag, path, the input it may replace */
                            {"output_checkpoint", c->output_checkpoint, c->llmc_filepath},
                            {"lora_save_path", c->lora_save_format == 1 ? NULL : c->lora_save_path, c->lora_load_path},
                            {"lora_merge_output", c->lora_merge_output, NULL},
                            {"loss_log", c->loss_log, NULL}};
    const char *in[][2] = {{"input_bin", c->input_bin},          {"input_val_bin", c->input_val_bin},
                           {"tokenizer_bin", c->tokenizer_bin},  {"tokenizer", c->tokenizer},
                           {"llmc_filepath", c->llmc_filepath},  {"hf_model", c->hf_model},
                           {"lora_load_path", c->lora_load_path}};
    const size_t nout = sizeof out / sizeof out[0], nin = sizeof in / sizeof in[0];
    it_status st;
    for (size_t i = 0; i < nout; i++) {
        if (!out[i][1]) continue;
        for (size_t j = 0; j < nin; j++)
            if (in[j][1] && in[j][1] != out[i][2] && same_file(out[i][1], in[j][1]))
                return it_error(IT_ERR_INVALID_ARG, "--%s %s: is the file --%s reads (it would be overwritten)",
                                out[i][0], out[i][1], in[j][0]);
        for (size_t j = 0; j < i; j++)
            if (out[j][1] && same_file(out[i][1], out[j][1]))
                return it_error(IT_ERR_INVALID_ARG, "--%s %s: is also --%s (two outputs on one file)", out[i][0],
                                out[i][1], out[j][0]);
        /* the loss log is opened (and checked) with the run's other buffers */
        if (i + 1 < nout && (st = check_output_path(out[i][0], out[i][1]))) return st;
    }
    return check_output_dirs(c);
}

static it_status setup_buffers(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_tensor *grads = it_model_grads(ctx->model);
    if (ctx->accum > 1) { /* each micro-step's gradient is computed alone, then added in order */
        it_scope_begin();
        ctx->acc =
            it_scope_keep(it_tensor_new(ctx->dev, it_tensor_dtype(grads), 1, (int64_t[]){it_tensor_numel(grads)}));
        it_scope_end();
        if (!ctx->acc) return it_last_status();
    }
    if (c->loss_log && ctx->rank == 0 && it_afile_open(c->loss_log, &ctx->loss_log))
        return it_error_context("--loss_log: ");
    /* a pipeline keeps each micro-batch's tokens until its later chunks have run */
    size_t n = (size_t)(ctx->B * ctx->T) * (size_t)(ctx->pp ? ctx->accum : 1);
    ctx->hx = malloc(sizeof(int32_t) * n);
    ctx->hy = malloc(sizeof(int32_t) * n);
    if (!ctx->hx || !ctx->hy) return it_error(IT_ERR_OOM, "input buffers: out of host memory");
    ctx->rng = c->seed ^ 0x5DEECE66Dull;
    ctx->forward_backward = ctx->pp ? train_pipeline_steps : train_micro_steps;
    return IT_OK;
}

/* After the last step, rank 0: --lora_save_path and --lora_merge_output. */
it_status train_lora_finish(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    it_status st;
    if (ctx->rank != 0 || !it_model_has_lora(ctx->model)) return IT_OK;
    if (c->lora_save_path && c->lora_save_format == 1) {
        if ((st = it_hf_lora_save(ctx->model, c->lora_save_path, c->hf_model)))
            return it_error_context("--lora_save_path: ");
        if (!ctx->quiet && ctx->grank == 0)
            printf("wrote %s (PEFT: adapter_config.json + adapter_model.safetensors)\n", c->lora_save_path);
    } else if (c->lora_save_path) {
        if ((st = it_model_lora_save(ctx->model, c->lora_save_path))) return it_error_context("--lora_save_path: ");
        if (!ctx->quiet) printf("wrote %s (%d LoRA tensors)\n", c->lora_save_path, it_model_lora_count(ctx->model));
    }
    if (c->lora_merge_output) {
        if ((st = it_model_lora_save_merged(ctx->model, c->lora_merge_output)))
            return it_error_context("--lora_merge_output: ");
        if (!ctx->quiet) printf("wrote %s (LoRA merged into the weights)\n", c->lora_merge_output);
    }
    return IT_OK;
}

typedef struct train_stage {
    it_status (*run)(it_train_ctx *ctx);
    train_fail_scope scope;
} train_stage;

/* In order. A stage after the group formed that only reads this rank's files fails this rank
 * alone; one that every rank decides from agreed values or a collective fails them all. */
static const train_stage SETUP[] = {
    {setup_group, TRAIN_FAIL_BEFORE_GROUP},    {setup_agree, TRAIN_FAIL_ALL_RANKS},
    {setup_watchdog, TRAIN_FAIL_ALL_RANKS},    {setup_schedule, TRAIN_FAIL_ALL_RANKS},
    {setup_grid, TRAIN_FAIL_ALL_RANKS},        {setup_outputs, TRAIN_FAIL_THIS_RANK},
    {setup_model, TRAIN_FAIL_THIS_RANK},       {setup_lora, TRAIN_FAIL_ALL_RANKS},
    {setup_lora_load, TRAIN_FAIL_THIS_RANK},   {setup_batch, TRAIN_FAIL_ALL_RANKS},
    {setup_data, TRAIN_FAIL_THIS_RANK},        {train_ckpt_load_model, TRAIN_FAIL_THIS_RANK},
    {setup_sync_params, TRAIN_FAIL_ALL_RANKS}, {setup_optimizer, TRAIN_FAIL_THIS_RANK},
    {setup_buffers, TRAIN_FAIL_THIS_RANK},     {train_ckpt_load_state, TRAIN_FAIL_THIS_RANK},
    {train_val_setup, TRAIN_FAIL_THIS_RANK},   {train_ckpt_prepare, TRAIN_FAIL_THIS_RANK},
};

it_status train_setup(it_train_ctx *ctx, const it_train_config *c, it_train_result *result) {
    memset(ctx, 0, sizeof *ctx);
    ctx->cfg = c;
    ctx->result = result;
    ctx->world = 1;
    for (size_t i = 0; i < sizeof SETUP / sizeof SETUP[0]; i++) {
        ctx->fail_scope = SETUP[i].scope;
        it_status st = SETUP[i].run(ctx);
        if (st) return st;
    }
    ctx->fail_scope = TRAIN_FAIL_THIS_RANK; /* from here on, until the run ends */
    return IT_OK;
}

void train_teardown(it_train_ctx *ctx) {
    train_ckpt_release(ctx);
    it_tensor_release(ctx->acc);
    free(ctx->hx);
    free(ctx->hy);
    it_grad_sync_free(ctx->gsync);
    it_zero_free(ctx->zero);
    it_optimizer_free(ctx->opt);
    it_tokenizer_free(ctx->tok);
    it_loader_free(ctx->loader);
    it_loader_free(ctx->val_loader);
    it_model_free(ctx->model);
    it_dist_free(ctx->mp);
    it_dist_watchdog_stop();      /* before the groups it may be looking at go */
    it_dist_grid_free(ctx->grid); /* its groups before the job's (which finalizes MPI) */
    it_dist_free(ctx->job ? ctx->job : ctx->dist);
    memset(ctx, 0, sizeof *ctx);
}
