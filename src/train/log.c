/* What a run prints and records: the start-up banner, after each step the --loss_log line,
 * the result, InfiniTrain's step line, the experts' token counts, the progress/ETA line and
 * text samples. Rank 0 alone prints (ctx->quiet on the others). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu_kernels.h"
#include "train/train_internal.h"

static void fmt_duration(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%lds", t);
}

void train_banner(const it_train_ctx *ctx) {
    if (ctx->quiet) return;
    const it_train_config *c = ctx->cfg;
    const it_model_info *info = ctx->info;
    bool custom = c->n_layer || c->n_head || c->n_embd || c->block_size || c->vocab_size;
    char devname[64];
    printf("%s: %s on %s, %lld parameters%s (L=%d, heads=%d, C=%d, V=%lld padded to %lld, block %lld); "
           "B=%lld T=%lld accumulation %lld, %s lr %g%s\n",
           c->app,
           c->hf_model        ? c->hf_model
           : c->llmc_filepath ? c->llmc_filepath
           : custom           ? "custom GPT-2"
                              : c->model,
           it_device_str(ctx->dev, devname, sizeof devname), (long long)info->num_params,
           ctx->tp_size > 1 || ctx->pp_size > 1 ? " on this rank" : "", info->n_layer, info->n_head, info->n_embd,
           (long long)info->vocab_size, (long long)info->padded_vocab, (long long)info->block_size, (long long)ctx->B,
           (long long)ctx->T, (long long)ctx->accum, it_optim_kind_name(c->optimizer), c->learning_rate,
           c->dtype == IT_DTYPE_BF16 ? ", autocast bfloat16 (matmuls; weights, norms, loss float32)" : "");
    if (c->flash && !it_flash_attention_available(ctx->dev))
        printf("attention: composed: the %s backend has no flash attention kernel (flash_attention_fwd/_bwd), "
               "so the probabilities kept for backward grow with T^2\n",
               ctx->dev.backend->name);
    if (it_cpu_threads_note()) printf("threads: %s\n", it_cpu_threads_note()); /* fewer than the cores */
    if (c->input_val_bin && c->val_loss_every <= 0)
        printf("validation: --input_val_bin %s is not read: --val_loss_every is 0 (never)\n", c->input_val_bin);
    if (ctx->pp_size > 1)
        printf("pipeline parallel: PP=%d stages x %d chunk%s, %s schedule, %lld micro-batch%s per step; layers split "
               "as InfiniTrain's GetStageInfo\n",
               ctx->pp_size, c->virtual_pipeline_parallel > 1 ? c->virtual_pipeline_parallel : 1,
               c->virtual_pipeline_parallel > 1 ? "s" : "",
               c->pipeline_schedule == IT_PP_1F1B ? (c->virtual_pipeline_parallel > 1 ? "interleaved 1F1B" : "1F1B")
                                                  : "GPipe",
               (long long)ctx->accum, ctx->accum == 1 ? "" : "es");
    if (ctx->tp_size > 1) {
        int64_t whole = 0;
        for (int i = 0; i < it_model_param_count(ctx->model); i++) {
            const it_model_param_info *p = it_model_param_at(ctx->model, i);
            whole += p->ndim == 1 ? p->full_shape[0] : p->full_shape[0] * p->full_shape[1];
        }
        /* under PP the model holds this stage's layers only: their whole count, not the model's */
        printf("tensor parallel: TP=%d%s over %d ranks (rank = tp + TP*dp); this rank holds %lld of %s %lld "
               "parameters\n",
               ctx->tp_size, c->sequence_parallel ? ", sequence parallel" : "", ctx->gworld,
               (long long)info->num_params, ctx->pp_size > 1 ? "its pipeline stage's" : "the model's",
               (long long)whole);
    }
    if (ctx->world > 1) {
        size_t full = c->optimizer == IT_OPTIM_SGD ? 0 : 2 * it_tensor_nbytes(it_model_params(ctx->model));
        size_t mine = ctx->zero ? it_zero_state_bytes(ctx->zero) : it_optimizer_state_bytes(ctx->opt);
        bool staged = it_dist_staged(ctx->dist);
        char dp[64];
        if (ctx->cp_size > 1)
            snprintf(dp, sizeof dp, "DP=%d x CP=%d, gradients reduced over both", ctx->data_world, ctx->cp_size);
        else
            snprintf(dp, sizeof dp, "DP=%d", ctx->world);
        printf("data parallel: %d ranks (%s), %s collectives%s; optimizer state per rank: %.3f MB "
               "(unsharded %.3f MB)%s\n",
               ctx->world, dp, staged ? "CPU (MPI)" : ctx->dev.backend->name,
               staged ? ", staged through host memory" : "", (double)mine / 1e6, (double)full / 1e6,
               ctx->zero ? it_zero_stage(ctx->zero) == 2 ? ", ZeRO-2" : ", ZeRO-1" : "");
    }
    fflush(stdout);
}

/* Softmax over the valid vocabulary, then inverse-CDF sampling with the run's generator. */
static int64_t sample_token(const float *row, int64_t vocab, uint64_t *rng) {
    float mx = row[0];
    for (int64_t v = 1; v < vocab; v++) mx = row[v] > mx ? row[v] : mx;
    double sum = 0;
    for (int64_t v = 0; v < vocab; v++) sum += exp((double)row[v] - mx);
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*rng >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (int64_t v = 0; v < vocab; v++) {
        acc += exp((double)row[v] - mx);
        if (acc > u) return v;
    }
    return vocab - 1;
}

/* Decoded when a tokenizer is given, kept on one line: a single-byte token outside printable
 * ASCII (a stray UTF-8 fragment early in training) prints as '?'. */
static void print_token(it_tokenizer *tok, int64_t id, bool first) {
    size_t n = 0;
    const char *s = tok ? it_tokenizer_decode(tok, (uint32_t)id, &n) : NULL;
    if (!s) {
        printf("%s%lld", first ? "" : " ", (long long)id);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        putchar(ch == '\n' ? ' ' : ch < 32 || (n == 1 && ch >= 127) ? '?' : ch);
    }
}

/* Sample `text_length` tokens after an end-of-text token and print them. Runs without
 * autograd; the sequence is re-run in full for each token. */
it_status train_generate(it_train_ctx *ctx) {
    const it_model_info *info = ctx->info;
    int64_t eot = ctx->tok ? it_tokenizer_eot(ctx->tok) : info->vocab_size - 1;
    if (eot < 0 || eot >= info->vocab_size) eot = 0;
    int64_t len = ctx->cfg->text_length, maxT = info->block_size;
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)(len + 1));
    float *row = malloc(sizeof(float) * (size_t)info->padded_vocab);
    if (!seq || !row) {
        free(seq);
        free(row);
        return it_error(IT_ERR_OOM, "generate: out of host memory");
    }
    seq[0] = (int32_t)eot;
    bool was = it_grad_enabled();
    it_grad_set_enabled(false);
    /* Under TP the group samples together: each rank's vocabulary columns gathered, the same
     * generator on each, so every rank draws the same token; global rank 0 prints. SP is off
     * for sampling (T grows one by one; the weights are the same). */
    bool sp = it_model_set_sequence_parallel(ctx->model, false), say = ctx->grank == 0;
    int64_t vl = info->padded_vocab / ctx->tp_size;
    it_status st = IT_OK;
    if (say) printf("generated: ");
    for (int64_t t = 1; t <= len && !st; t++) {
        it_scope_begin();
        int64_t start = t > maxT ? t - maxT : 0, T = t - start;
        int64_t shape[2] = {1, T};
        it_tensor *idx = it_tensor_from_host(it_model_device(ctx->model), IT_DTYPE_I32, 2, shape, seq + start,
                                             sizeof(int32_t) * (size_t)T);
        it_tensor *logits = it_model_forward(ctx->model, idx);
        it_tensor *last = logits ? it_tensor_contiguous(it_tensor_slice(logits, 1, T - 1, T, 1)) : NULL;
        it_tensor *all = last && ctx->tp ? it_tensor_new(it_model_device(ctx->model), IT_DTYPE_FP32, 1,
                                                         (int64_t[]){info->padded_vocab})
                                         : last;
        st = !all                                                 ? it_last_status()
             : ctx->tp && vl * ctx->tp_size == info->padded_vocab ? it_dist_all_gather(ctx->tp, last, all)
                                                                  : IT_OK;
        if (!st) st = it_tensor_copy_to_host(all, row, sizeof(float) * (size_t)info->padded_vocab);
        it_scope_end();
        if (st) break;
        seq[t] = (int32_t)sample_token(row, info->vocab_size, &ctx->rng);
        if (say) print_token(ctx->tok, seq[t], t == 1);
    }
    if (say) printf("\n");
    fflush(stdout);
    it_model_set_sequence_parallel(ctx->model, sp);
    it_grad_set_enabled(was);
    free(seq);
    free(row);
    return st;
}

static it_status log_loss_line(it_train_ctx *ctx) {
    char line[64];
    int n = snprintf(line, sizeof line, "%d %.17g\n", ctx->step, ctx->loss);
    if (!it_afile_write(ctx->loss_log, line, (size_t)n)) return IT_OK;
    it_status st = it_error_context("--loss_log: ");
    it_afile_abort(ctx->loss_log); /* the previous file under that name stays */
    ctx->loss_log = NULL;
    return st;
}

/* Mixtral: tokens routed to each expert since the last such line, layer by layer. Every rank
 * takes its counts (a collective under PP: each stage counted its own layers, the rest are 0,
 * and the sum over the stages is the whole model's); rank 0 prints them. */
static it_status expert_counts(const it_train_ctx *ctx) {
    int64_t counts[4096];
    int n = it_model_expert_tokens(ctx->model, counts, 4096, true);
    if (n <= 0) return IT_OK;
    if (ctx->pp) {
        double sum[4096];
        for (int i = 0; i < n; i++) sum[i] = (double)counts[i];
        it_status st = it_dist_all_reduce_host(ctx->pp, sum, (size_t)n, IT_DTYPE_FP64, IT_CCL_SUM);
        if (st) return it_error_context("expert counts: ");
        for (int i = 0; i < n; i++) counts[i] = (int64_t)sum[i];
    }
    if (ctx->quiet) return IT_OK;
    int E = ctx->info->n_expert, every = ctx->cfg->log_interval;
    printf("experts: tokens per expert over the last %d step%s:", every, every == 1 ? "" : "s");
    for (int i = 0; i < n; i++) printf("%s%lld", i % E == 0 ? (i ? " | L" : " L") : " ", (long long)counts[i]);
    printf("\n");
    return IT_OK;
}

static void print_progress(const it_train_ctx *ctx, double now) {
    int step = ctx->step, steps = ctx->cfg->num_iteration, done = step - ctx->start_step;
    double el = (now - ctx->t_start) / 1000.0, eta = el / done * (steps - step);
    char a[32], b[32];
    fmt_duration(el, a, sizeof a);
    fmt_duration(eta, b, sizeof b);
    printf("progress: %d/%d steps (%.0f%%) | elapsed %s | ETA %s\n", step, steps, 100.0 * step / steps, a, b);
}

/* --report_stragglers: every rank's busy time in the step (its step time less its waits in
 * collectives and receives: the others wait for the rank with the most), gathered by one
 * all-reduce of a slot per rank; for the step line " | slowest rank R (HOST) X ms busy, the
 * fastest Y ms". */
static it_status slowest_rank(it_train_ctx *ctx, char *out, size_t cap) {
    int n = ctx->gworld;
    *out = 0;
    if (!ctx->cfg->report_stragglers || n <= 1) return IT_OK;
    double *ms = calloc((size_t)n, sizeof *ms);
    if (!ms) return it_error(IT_ERR_OOM, "--report_stragglers: out of host memory");
    ms[ctx->grank] = ctx->step_ms - ctx->wait_ms;
    it_status st = it_dist_all_reduce_host(ctx->job ? ctx->job : ctx->dist, ms, (size_t)n, IT_DTYPE_FP64, IT_CCL_MAX);
    int r = 0, f = 0;
    for (int i = 1; i < n && !st; i++) {
        if (ms[i] > ms[r]) r = i;
        if (ms[i] < ms[f]) f = i;
    }
    if (!st)
        snprintf(out, cap, " | slowest rank %d (%s) %.2f ms busy, fastest %.2f ms", r, it_dist_host_of(r), ms[r],
                 ms[f]);
    free(ms);
    return st;
}

it_status train_log(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    int step = ctx->step;
    it_status st;
    if (ctx->loss_log && (st = log_loss_line(ctx))) return st;
    it_mem_stats mem;
    it_mem_stats_get(ctx->dev, &mem);
    if (ctx->result) {
        if (ctx->result->losses) ctx->result->losses[step - 1] = ctx->loss;
        ctx->result->last_step_ms = ctx->step_ms;
        ctx->result->peak_used = mem.peak_used;
        ctx->result->peak_reserved = mem.peak_reserved;
    }
    char cp_field[32] = "", skips[48] = "", slowest[128];
    if ((st = slowest_rank(ctx, slowest, sizeof slowest))) return st;
    if (ctx->guard.total)
        snprintf(skips, sizeof skips, " | %s, %d skipped", ctx->skipped ? "update skipped" : "updated",
                 ctx->guard.total);
    if (ctx->cp_size > 1) snprintf(cp_field, sizeof cp_field, "CP=%d, ", ctx->cp_size);
    if (!ctx->quiet)
        printf("step %4d/%d | train loss %.6f | lr %.2e | (%.2f ms | %.0f tok/s | peak used: %5zu MB | peak reserved: "
               "%5zu MB, DP=%d, TP=%d, SP=%d, %sPP=%d)%s%s\n",
               step, c->num_iteration, ctx->loss, ctx->lr, ctx->step_ms, (double)ctx->total / (ctx->step_ms / 1000.0),
               mem.peak_used >> 20, mem.peak_reserved >> 20, ctx->data_world, ctx->tp_size,
               c->sequence_parallel ? ctx->tp_size : 1, /* InfiniTrain: SP printed as TP when on */
               cp_field, ctx->pp_size, /* "CP=N, " where the context_parallel branch prints it, under CP only */
               skips,                  /* " | skipped N": once a step skipped its update (guard.c) */
               slowest);
    if (step % c->log_interval == 0 && (st = expert_counts(ctx))) return st;
    if (!ctx->quiet) {
        if (step % c->log_interval == 0 && step < c->num_iteration) print_progress(ctx, train_now_ms());
        fflush(stdout);
    }
    /* DP rank 0 samples (under TP its whole group, together); global rank 0 prints */
    if (!c->quiet && ctx->rank == 0 && c->freq_generate_txt > 0 && step % c->freq_generate_txt == 0 &&
        (st = train_generate(ctx)))
        return st;
    /* a non-finite loss whose update ran (--skip_nonfinite false) stops the run; a skipped one
     * is guard.c's (--max_skipped_steps) */
    if (!isfinite(ctx->loss) && !ctx->skipped)
        return it_error(IT_ERR_NUMERIC, "step %d: the loss is %f; stopping (lower --learning_rate?)", step, ctx->loss);
    return IT_OK;
}

/* dir/name of this executable's directory, relative to the working directory when below it
 * ("build/it-generate"), else absolute; name alone when /proc/self/exe is unreadable. */
static void sibling_app(const char *name, char *buf, size_t n) {
    char exe[4096], cwd[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        snprintf(buf, n, "%s", name);
        return;
    }
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    size_t cl = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    const char *dir = cl && strncmp(exe, cwd, cl) == 0 && exe[cl] == '/' ? exe + cl + 1 : exe;
    snprintf(buf, n, "%s/%s", dir, name);
}

void train_summary(const it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    if (ctx->quiet || ctx->grank != 0) return;
    int steps = c->num_iteration - ctx->start_step;
    char took[32], val[64] = "";
    fmt_duration(steps > 0 ? (train_now_ms() - ctx->t_start) / 1000.0 : 0, took, sizeof took);
    if (ctx->val_step) snprintf(val, sizeof val, ", val loss %.6f (step %d)", ctx->val_loss, ctx->val_step);
    printf("done: %d step%s in %s; train loss %.6f (step %d)%s\n", steps, steps == 1 ? "" : "s", took, ctx->loss,
           c->num_iteration, val);
    if (ctx->cp && steps > 0) /* K/V (and their gradients) moved by attention, counted as it_dist_bytes_sent does */
        printf("context parallel: this rank sent %.3f MB per step over its CP group (%s%s)\n",
               (double)it_dist_bytes_sent(ctx->cp) / steps / 1e6, it_cp_comm_name((it_cp_comm)c->cp_comm_type),
               c->cp_load_balance ? ", load balanced" : "");
    const char *tok = c->tokenizer ? c->tokenizer : c->tokenizer_bin;
    if (*ctx->saved) {
        char gen[4200];
        sibling_app("it-generate", gen, sizeof gen);
        printf("saved: %s (resume with --load it)\n", ctx->saved);
        if (tok)
            printf("write text with it: %s --load %s --tokenizer %s --prompt \"...\"\n", gen, ctx->saved, tok);
        else
            printf("write text with it: %s --load %s --prompt_ids 1,2,3 (no --tokenizer in this run)\n", gen,
                   ctx->saved);
    } else if (!c->output_checkpoint && !c->output_hf && !c->lora_save_path && !c->lora_merge_output) {
        printf("saved: nothing (--save DIR keeps checkpoints, --output_checkpoint FILE the model)\n");
    }
    fflush(stdout);
}
