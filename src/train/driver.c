/* The training loop every app shares.
 *
 * One step: zero grads; for each of `accum` micro-batches: forward, loss/accum, backward
 * (gradients accumulate in the flat buffer); optional global-norm clipping; optimizer step;
 * log InfiniTrain's line. Everything a step creates lives in a scope that ends with the
 * micro-step, so memory returns to the caching allocator and the next step reuses it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/afile.h"
#include "core/internal.h"
#include "infinitrain/data.h"
#include "infinitrain/dist.h"
#include "infinitrain/train.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void fmt_duration(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%lds", t);
}

/* Build or load the model the flags describe. */
static it_status make_model(const it_train_config *c, it_device dev, it_model **out) {
    bool gpt2 = strcmp(c->app, "gpt2") == 0;
    if (c->llmc_filepath) {
        it_status st;
        if (gpt2)
            st = it_gpt2_load(c->llmc_filepath, dev, out);
        else if (strcmp(c->app, "llama3") == 0)
            st = it_llama3_load(c->llmc_filepath, dev, out);
        else if (strcmp(c->app, "mixtral") == 0)
            st = it_mixtral_load(c->llmc_filepath, dev, out);
        else
            return it_error(IT_ERR_INVALID_ARG, "app '%s' has no checkpoint loader", c->app);
        if (!st) it_model_set_aux_loss_coeff(*out, c->moe_aux_loss_coeff);
        return st ? it_error_context("--llmc_filepath: ") : IT_OK;
    }
    if (!gpt2)
        return it_error(IT_ERR_INVALID_ARG, "--llmc_filepath: required for %s (it has no built-in model presets)",
                        c->app);
    it_gpt2_config cfg;
    it_status st = it_gpt2_preset(c->model, &cfg);
    if (st) return it_error_context("--model: ");
    if (c->n_layer) cfg.n_layer = c->n_layer;
    if (c->n_head) cfg.n_head = c->n_head;
    if (c->n_embd) cfg.n_embd = c->n_embd;
    if (c->block_size) cfg.block_size = c->block_size;
    if (c->vocab_size) {
        cfg.vocab_size = c->vocab_size;
        cfg.padded_vocab_size = (c->vocab_size + 63) / 64 * 64; /* llm.c pads for aligned kernels */
    }
    st = it_gpt2_config_check(&cfg);
    if (st) return st;
    /* Known before building: refuse before allocating and initializing the parameters. */
    if (c->sequence_length > cfg.block_size)
        return it_error(IT_ERR_INVALID_ARG, "--sequence_length: %lld exceeds the model's block_size %d",
                        (long long)c->sequence_length, cfg.block_size);
    return it_gpt2_new(&cfg, dev, c->seed, out);
}

/* Sample `len` tokens after an end-of-text token and print them (decoded when a tokenizer
 * is given). Runs without autograd; the sequence is re-run in full for each new token. */
static it_status generate(it_model *m, const it_train_config *c, it_tokenizer *tok, uint64_t *rng_state) {
    const it_model_info *info = it_model_get_info(m);
    int64_t eot = tok ? it_tokenizer_eot(tok) : info->vocab_size - 1;
    if (eot < 0 || eot >= info->vocab_size) eot = 0;
    int64_t len = c->text_length, maxT = info->block_size;
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
    it_status st = IT_OK;
    printf("generated: ");
    for (int64_t t = 1; t <= len && !st; t++) {
        it_scope_begin();
        int64_t start = t > maxT ? t - maxT : 0, T = t - start;
        int64_t shape[2] = {1, T};
        it_tensor *idx =
            it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, seq + start, sizeof(int32_t) * (size_t)T);
        it_tensor *logits = it_model_forward(m, idx);
        it_tensor *last = logits ? it_tensor_slice(logits, 1, T - 1, T, 1) : NULL;
        st = last ? it_tensor_copy_to_host(last, row, sizeof(float) * (size_t)info->padded_vocab) : it_last_status();
        it_scope_end();
        if (st) break;
        /* softmax over the valid vocabulary, then inverse-CDF sampling */
        float mx = row[0];
        for (int64_t v = 1; v < info->vocab_size; v++) mx = row[v] > mx ? row[v] : mx;
        double sum = 0;
        for (int64_t v = 0; v < info->vocab_size; v++) sum += exp((double)row[v] - mx);
        *rng_state = *rng_state * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(*rng_state >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
        int64_t pick = info->vocab_size - 1;
        for (int64_t v = 0; v < info->vocab_size; v++) {
            acc += exp((double)row[v] - mx);
            if (acc > u) {
                pick = v;
                break;
            }
        }
        seq[t] = (int32_t)pick;
        size_t n = 0;
        const char *s = tok ? it_tokenizer_decode(tok, (uint32_t)pick, &n) : NULL;
        if (s) {
            /* Keep the sample on one line; a single-byte token outside printable ASCII (a
             * stray UTF-8 fragment early in training) prints as '?'. */
            for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)s[i];
                putchar(ch == '\n' ? ' ' : ch < 32 || (n == 1 && ch >= 127) ? '?' : ch);
            }
        } else {
            printf("%s%lld", t > 1 ? " " : "", (long long)pick);
        }
    }
    printf("\n");
    fflush(stdout);
    it_grad_set_enabled(was);
    free(seq);
    free(row);
    return st;
}

/* ---- data parallelism: checks that every rank runs the same job */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static uint64_t hash_str(const char *s) {
    return hash_bytes(1469598103934665603ull, s ? s : "\x01", s ? strlen(s) + 1 : 1);
}
#define HASH_VAL(x) hash_bytes(1469598103934665603ull, &(x), sizeof(x))

/* All ranks must train the same model on the same data with the same flags. The device may
 * differ (each rank drives its own), so only its backend name takes part. Refuses with the
 * names of the flags that differ. A collective: every rank gets the same answer. */
static it_status check_config(it_dist *d, const it_train_config *c, it_device dev) {
    struct {
        const char *name;
        uint64_t h;
    } f[] = {
        {"app", hash_str(c->app)},
        {"device (backend)", hash_str(dev.backend->name)},
        {"input_bin", hash_str(c->input_bin)},
        {"llmc_filepath", hash_str(c->llmc_filepath)},
        {"model", hash_str(c->llmc_filepath ? NULL : c->model)},
        {"n_layer/n_head/n_embd/block_size/vocab_size",
         hash_bytes(hash_bytes(hash_bytes(hash_bytes(HASH_VAL(c->n_layer), &c->n_head, sizeof c->n_head), &c->n_embd,
                                          sizeof c->n_embd),
                               &c->block_size, sizeof c->block_size),
                    &c->vocab_size, sizeof c->vocab_size)},
        {"batch_size", HASH_VAL(c->batch_size)},
        {"sequence_length", HASH_VAL(c->sequence_length)},
        {"total_batch_size", HASH_VAL(c->total_batch_size)},
        {"num_iteration", HASH_VAL(c->num_iteration)},
        {"learning_rate", HASH_VAL(c->learning_rate)},
        {"optimizer", HASH_VAL(c->optimizer)},
        {"weight_decay", HASH_VAL(c->weight_decay)},
        {"lr_decay_style", HASH_VAL(c->lr_decay)},
        {"lr_warmup_iters", HASH_VAL(c->lr_warmup_iters)},
        {"min_lr", HASH_VAL(c->min_lr)},
        {"grad_clip", HASH_VAL(c->grad_clip)},
        {"dtype", HASH_VAL(c->dtype)},
        {"seed", HASH_VAL(c->seed)},
        {"zero_stage", HASH_VAL(c->zero_stage)},
        {"ddp_bucket_kb", HASH_VAL(c->ddp_bucket_kb)},
        {"moe_aux_loss_coeff", HASH_VAL(c->moe_aux_loss_coeff)},
    };
    enum { NF = sizeof f / sizeof f[0] };
    uint64_t h[NF];
    bool differs[NF];
    for (int i = 0; i < NF; i++) h[i] = f[i].h;
    it_status st = it_dist_check_equal(d, h, NF, differs);
    if (st) return st;
    char names[512] = "";
    for (int i = 0; i < NF; i++)
        if (differs[i])
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s--%s", *names ? ", " : "", f[i].name);
    if (*names)
        return it_error(IT_ERR_INVALID_ARG, "data parallel: the ranks were given different flags: %s differ%s", names,
                        strchr(names, ',') ? "" : "s");
    return IT_OK;
}

/* Parameters: refuse if the ranks loaded different ones (a checkpoint that differs between
 * ranks' file systems), then broadcast rank 0's and check that every rank holds them. */
static it_status sync_params(it_dist *d, it_tensor *params, const it_train_config *c) {
    uint64_t h;
    bool differs;
    it_status st = it_dist_tensor_hash(params, &h);
    if (!st) st = it_dist_check_equal(d, &h, 1, &differs);
    if (st) return st;
    if (differs)
        return it_error(IT_ERR_INVALID_ARG,
                        "data parallel: the ranks hold different initial parameters (%s%s differs "
                        "between ranks)",
                        c->llmc_filepath ? "the checkpoint " : "the model built from --model/--seed",
                        c->llmc_filepath ? c->llmc_filepath : "");
    if ((st = it_dist_broadcast(d, params, 0))) return st;
    if ((st = it_dist_tensor_hash(params, &h)) || (st = it_dist_check_equal(d, &h, 1, &differs))) return st;
    if (differs) return it_error(IT_ERR_INTERNAL, "data parallel: parameters differ after the broadcast from rank 0");
    return IT_OK;
}

/* grads = acc + grads, elementwise (in place). */
static it_status add_into(it_tensor *grads, it_tensor *acc) {
    it_device dev = it_tensor_device(grads);
    it_tdesc a = it_tensor_desc(acc), g = it_tensor_desc(grads);
    return KCALL(dev, binary, IT_BINARY_ADD, &a, &g, &g);
}

/* Errors every rank reaches together (bad flags, differing configs) end with a clean exit
 * and one message from rank 0; any other error in a data-parallel run aborts the job so
 * that no rank waits forever on one that has stopped. */
static it_status train_run(const it_train_config *c, it_train_result *result, bool *reported) {
    it_status st = IT_OK;
    it_device dev;
    it_dist *dist = NULL;
    it_model *model = NULL;
    it_loader *loader = NULL;
    it_tokenizer *tok = NULL;
    it_optimizer *opt = NULL;
    it_zero1 *zero = NULL;
    it_grad_sync *gsync = NULL; /* DDP without ZeRO: buckets reduced while backward runs */
    it_tensor *acc = NULL;
    it_afile *loss_log = NULL; /* written under a temporary name, renamed at the end */
    int32_t *hx = NULL, *hy = NULL;
    int rank = 0, world = 1;
    bool collective = true, *collective_error = &collective;
    *reported = false;

    /* ---- validate everything before the first step */
    if (!c->input_bin) return it_error(IT_ERR_INVALID_ARG, "--input_bin: required (an llm.c token shard)");
    if ((st = it_device_parse(c->device, &dev))) return it_error_context("--device: ");
    it_dist_env(&rank, &world);
    if (world > 1 && !strchr(c->device, ':')) { /* each rank drives one device */
        int count = 1;
        if ((st = it_device_count(dev.backend, &count))) return st;
        dev.index = rank % (count > 0 ? count : 1);
    }
    if ((st = it_dist_new(dev, &dist))) return it_error_context("data parallel: ");
    rank = it_dist_rank(dist);
    world = it_dist_world(dist);
    bool quiet = c->quiet || rank != 0;
    if ((st = check_config(dist, c, dev))) goto done;
    if (c->max_memory_mb > 0) it_mem_set_limit(dev, (size_t)c->max_memory_mb << 20);
    *collective_error = false; /* a file only one rank cannot read fails that rank alone */
    if ((st = make_model(c, dev, &model))) goto done;
    *collective_error = true;
    const it_model_info *info = it_model_get_info(model);
    int64_t B = c->batch_size, T = c->sequence_length;
    int64_t total = c->total_batch_size ? c->total_batch_size : B * T * world;
    if (T > info->block_size) {
        st = it_error(IT_ERR_INVALID_ARG, "--sequence_length: %lld exceeds the model's block_size %lld", (long long)T,
                      (long long)info->block_size);
        goto done;
    }
    if (total % (B * T * world) != 0) {
        if (world > 1)
            st = it_error(IT_ERR_INVALID_ARG,
                          "--total_batch_size: %lld is not a multiple of batch_size*sequence_length*ranks = "
                          "%lld*%lld*%d = %lld",
                          (long long)total, (long long)B, (long long)T, world, (long long)(B * T * world));
        else
            st = it_error(IT_ERR_INVALID_ARG,
                          "--total_batch_size: %lld is not a multiple of batch_size*sequence_length = %lld*%lld = %lld",
                          (long long)total, (long long)B, (long long)T, (long long)(B * T));
        goto done;
    }
    int64_t accum = total / (B * T * world);
    if (c->zero_stage && c->optimizer == IT_OPTIM_SGD && !quiet)
        printf("note: --zero_stage 1 with sgd: no optimizer state to shard\n");
    *collective_error = false;
    if ((st = it_loader_new(c->input_bin, B, T, rank, world, &loader))) goto done;
    if ((st = it_loader_check_vocab(loader, info->vocab_size))) goto done;
    if (c->tokenizer_bin && (st = it_tokenizer_load(c->tokenizer_bin, &tok))) goto done;
    *collective_error = true;
    if ((st = sync_params(dist, it_model_params(model), c))) goto done;
    *collective_error = false;
    it_optim_config ocfg = {c->optimizer, 0.9f, 0.999f, 1e-8f, c->weight_decay};
    if (c->zero_stage)
        st = it_zero1_new(dist, &ocfg, it_model_params(model), it_model_grads(model), &zero);
    else
        st = it_optimizer_new(&ocfg, it_model_params(model), it_model_grads(model), &opt);
    if (!st && world > 1 && !zero) st = it_grad_sync_new(dist, it_model_grads(model), (size_t)c->ddp_bucket_kb << 10, &gsync);
    if (st) goto done;
    if (accum > 1) { /* each micro-step's gradient is computed alone, then added in order */
        it_scope_begin();
        acc = it_scope_keep(it_tensor_new(dev, it_tensor_dtype(it_model_grads(model)), 1,
                                          (int64_t[]){it_tensor_numel(it_model_grads(model))}));
        it_scope_end();
        if (!acc) {
            st = it_last_status();
            goto done;
        }
    }
    if (c->loss_log && rank == 0 && (st = it_afile_open(c->loss_log, &loss_log))) {
        it_error_context("--loss_log: ");
        goto done;
    }
    hx = malloc(sizeof(int32_t) * (size_t)(B * T));
    hy = malloc(sizeof(int32_t) * (size_t)(B * T));
    if (!hx || !hy) {
        st = it_error(IT_ERR_OOM, "input buffers: out of host memory");
        goto done;
    }
    it_lr_schedule sched = {c->learning_rate, c->min_lr, c->lr_warmup_iters, c->num_iteration, c->lr_decay};
    uint64_t rng = c->seed ^ 0x5DEECE66Dull;
    char devname[64];
    if (!quiet) {
        printf("%s: %s on %s, %lld parameters (L=%d, heads=%d, C=%d, V=%lld padded to %lld, block %lld); "
               "B=%lld T=%lld accumulation %lld, %s lr %g%s\n",
               c->app,
               c->llmc_filepath                                                         ? c->llmc_filepath
               : c->n_layer || c->n_head || c->n_embd || c->block_size || c->vocab_size ? "custom GPT-2"
                                                                                        : c->model,
               it_device_str(dev, devname, sizeof devname), (long long)info->num_params, info->n_layer, info->n_head,
               info->n_embd, (long long)info->vocab_size, (long long)info->padded_vocab, (long long)info->block_size,
               (long long)B, (long long)T, (long long)accum, it_optim_kind_name(c->optimizer), c->learning_rate,
               c->dtype == IT_DTYPE_BF16 ? ", autocast bfloat16 (matmuls; weights, norms, loss float32)" : "");
        if (world > 1) {
            size_t full = c->optimizer == IT_OPTIM_SGD ? 0 : 2 * it_tensor_nbytes(it_model_params(model));
            size_t mine = zero ? it_zero1_state_bytes(zero) : it_optimizer_state_bytes(opt);
            printf("data parallel: %d ranks (DP=%d), %s collectives%s; optimizer state per rank: %.3f MB "
                   "(unsharded %.3f MB)%s\n",
                   world, world, it_dist_staged(dist) ? "CPU (MPI)" : dev.backend->name,
                   it_dist_staged(dist) ? ", staged through host memory" : "", (double)mine / 1e6, (double)full / 1e6,
                   zero ? ", ZeRO-1" : "");
        }
        fflush(stdout);
    }
    if (c->freq_generate_txt > 0 && !quiet && (st = generate(model, c, tok, &rng))) goto done;
    it_backend_stats_reset(dev.backend); /* the report covers training steps only */
    it_autocast_set(c->dtype == IT_DTYPE_BF16, IT_DTYPE_BF16);

    double t_start = now_ms();
    for (int step = 1; step <= c->num_iteration; step++) {
        double t0 = now_ms();
        it_mem_stats_reset_peak(dev);
        if ((st = it_model_zero_grad(model))) break; /* lazily: the first backward writes them */
        double loss_sum = 0.0;
        /* 1/(accum*world) is a power of two when both are: then the rank-ordered sums below
         * reproduce a 1-rank run with accumulation accum*world bitwise (README). */
        float loss_scale = 1.0f / (float)(accum * world);
        for (int64_t micro = 0; micro < accum && !st; micro++) {
            if (micro > 0 && ((st = it_tensor_copy_(acc, it_model_grads(model))) || (st = it_model_zero_grad(model))))
                break;
            if ((st = it_loader_next(loader, hx, hy))) break;
            it_scope_begin();
            int64_t shape[2] = {B, T};
            it_tensor *x = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, hx, sizeof(int32_t) * (size_t)(B * T));
            it_tensor *y = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, hy, sizeof(int32_t) * (size_t)(B * T));
            it_tensor *loss = it_model_loss(model, x, y);
            double lv = 0;
            st = loss ? it_tensor_item(loss, NULL, &lv) : it_last_status();
            bool last = micro == accum - 1;
            it_tensor *root = loss && accum * world > 1 ? it_scale(loss, loss_scale) : loss;
            /* DDP: the last micro-step's backward hands each 25 MB bucket of the gradient to
             * the all-reduce (deterministic, rank order) as soon as it is final; the bucket
             * first gets the earlier micro-steps' sum added. */
            if (!st && last && gsync && !(st = it_grad_sync_begin(gsync, micro > 0 ? acc : NULL)))
                st = it_backward_hooked(root, it_grad_sync_ready, gsync);
            else if (!st)
                st = it_backward(root);
            it_scope_end();
            it_tape_clear();
            if (!st) st = it_model_grads_final(model); /* zeros where no node wrote */
            loss_sum += lv;
            if (!st && micro > 0 && !(last && gsync))
                st = add_into(it_model_grads(model), acc); /* ((g0 + g1) + g2) ... */
        }
        if (st) break;
        int early = 0, buckets = 0;
        if (gsync && (st = it_grad_sync_finish(gsync, &early, &buckets))) break;
        if (gsync && step == 1 && !quiet)
            printf("DDP: %d of %d gradient buckets all-reduced while backward ran\n", early, buckets);
        /* the logged loss is the all-rank mean */
        if (world > 1 && (st = it_dist_all_reduce_host(dist, &loss_sum, 1, IT_DTYPE_FP64, IT_CCL_SUM))) break;
        if (zero && (st = it_zero1_reduce_grads(zero))) break;
        float scale = 1.0f;
        if (c->grad_clip > 0) {
            double norm = 0;
            if ((st = zero ? it_zero1_grad_norm(zero, &norm) : it_grad_norm(it_model_grads(model), &norm))) break;
            scale = it_clip_scale(norm, c->grad_clip);
        }
        float lr = it_lr_at(&sched, step);
        if ((st = zero ? it_zero1_step(zero, lr, scale) : it_optimizer_step(opt, lr, scale))) break;
        if ((st = it_device_synchronize(dev))) break;
        double ms = now_ms() - t0;
        double mean_loss = loss_sum / (double)(accum * world);
        if (loss_log) {
            char line[64];
            int n = snprintf(line, sizeof line, "%d %.17g\n", step, mean_loss);
            if ((st = it_afile_write(loss_log, line, (size_t)n))) {
                it_error_context("--loss_log: ");
                it_afile_abort(loss_log); /* the previous file under that name stays */
                loss_log = NULL;
                break;
            }
        }
        it_mem_stats ms_stats;
        it_mem_stats_get(dev, &ms_stats);
        if (result) {
            if (result->losses) result->losses[step - 1] = mean_loss;
            result->last_step_ms = ms;
            result->peak_used = ms_stats.peak_used;
            result->peak_reserved = ms_stats.peak_reserved;
        }
        if (!quiet) {
            printf(
                "step %4d/%d | train loss %.6f | lr %.2e | (%.2f ms | %.0f tok/s | peak used: %zu MB | peak reserved: "
                "%zu MB, DP=%d, TP=1, SP=1, PP=1)\n",
                step, c->num_iteration, mean_loss, lr, ms, (double)total / (ms / 1000.0), ms_stats.peak_used >> 20,
                ms_stats.peak_reserved >> 20, world);
            if (step % c->log_interval == 0) { /* Mixtral: tokens routed per expert, layer by layer */
                int64_t counts[4096];
                int n = it_model_expert_tokens(model, counts, 4096, true);
                if (n > 0) {
                    int E = info->n_expert;
                    printf("experts: tokens per expert over the last %d step%s:", c->log_interval,
                           c->log_interval == 1 ? "" : "s");
                    for (int i = 0; i < n; i++)
                        printf("%s%lld", i % E == 0 ? (i ? " | L" : " L") : " ", (long long)counts[i]);
                    printf("\n");
                }
            }
            if (step % c->log_interval == 0 && step < c->num_iteration) {
                double el = (now_ms() - t_start) / 1000.0, eta = el / step * (c->num_iteration - step);
                char a[32], b[32];
                fmt_duration(el, a, sizeof a);
                fmt_duration(eta, b, sizeof b);
                printf("progress: %d/%d steps (%.0f%%) | elapsed %s | ETA %s\n", step, c->num_iteration,
                       100.0 * step / c->num_iteration, a, b);
            }
            fflush(stdout);
            if (c->freq_generate_txt > 0 && step % c->freq_generate_txt == 0 && (st = generate(model, c, tok, &rng)))
                break;
        }
        if (!isfinite(mean_loss)) {
            st = it_error(IT_ERR_INTERNAL, "step %d: the loss is %f; stopping (lower --learning_rate?)", step,
                          mean_loss);
            break;
        }
    }
    if (!st && c->backend_report && rank == 0) st = it_backend_report(dev.backend, stdout);
    if (!st && c->output_checkpoint && rank == 0) {
        st = it_model_save(model, c->output_checkpoint);
        if (!st && !quiet) printf("wrote %s\n", c->output_checkpoint);
    }
done:
    it_autocast_set(false, IT_DTYPE_BF16);
    /* The steps logged so far are whole lines: they are kept when training stops on an error. */
    if (loss_log) {
        it_status cst = it_afile_commit(loss_log);
        if (cst && !st) st = it_error_context("--loss_log: ");
    }
    if (st && world > 1) {
        if (!*collective_error) {
            /* this rank alone failed: the others may be waiting in a collective */
            fprintf(stderr, "%s: rank %d: %s\n", c->app, rank, it_last_error());
            fflush(stderr);
            it_dist_abort(dist, st == IT_ERR_INVALID_ARG || st == IT_ERR_FORMAT || st == IT_ERR_IO ? 2 : 1);
        }
        /* every rank failed alike: rank 0 says so before MPI_Finalize (after it, mpirun may
         * already be tearing the job down because another rank exited non-zero) */
        if (rank == 0) {
            fprintf(stderr, "%s: %s\n", c->app, it_last_error());
            fflush(stderr);
        }
        *reported = true;
    }
    it_tensor_release(acc);
    free(hx);
    free(hy);
    it_grad_sync_free(gsync);
    it_zero1_free(zero);
    it_optimizer_free(opt);
    it_tokenizer_free(tok);
    it_loader_free(loader);
    it_model_free(model);
    it_dist_free(dist);
    return st;
}

it_status it_train_run(const it_train_config *c, it_train_result *result) {
    bool reported;
    return train_run(c, result, &reported);
}

int it_train_main(int argc, char **argv, const char *app) {
    it_train_config c;
    it_train_config_defaults(&c, app);
    bool help = false;
    size_t env_limit;
    if (it_train_parse_args(&c, argc, argv, &help) || it_mem_env_limit(&env_limit)) {
        fprintf(stderr, "%s: %s\n", app, it_last_error());
        return 2;
    }
    if (help) {
        it_train_print_help(app, stdout);
        return 0;
    }
    bool reported = false;
    it_status st = train_run(&c, NULL, &reported);
    if (st) {
        /* Failed before the group formed (every rank alike): no rank can wait for another
         * to print, since mpirun ends the job at the first non-zero exit, so each says it. */
        int rank, world;
        it_dist_env(&rank, &world);
        if (!reported && world == 1)
            fprintf(stderr, "%s: %s\n", app, it_last_error());
        else if (!reported)
            fprintf(stderr, "%s: rank %d: %s\n", app, rank, it_last_error());
        /* Bad flags and bad input files are the user's to fix: exit 2, as for flags. */
        return st == IT_ERR_INVALID_ARG || st == IT_ERR_FORMAT || st == IT_ERR_IO || st == IT_ERR_NOT_FOUND ? 2 : 1;
    }
    return 0;
}
