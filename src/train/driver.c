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

#include "infinitrain/data.h"
#include "infinitrain/train.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void fmt_duration(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

/* Build or load the model the flags describe. */
static it_status make_model(const it_train_config *c, it_device dev, it_model **out) {
    bool gpt2 = strcmp(c->app, "gpt2") == 0;
    if (c->llmc_filepath) {
        it_status st;
        if (gpt2) st = it_gpt2_load(c->llmc_filepath, dev, out);
        else if (strcmp(c->app, "llama3") == 0) st = it_llama3_load(c->llmc_filepath, dev, out);
        else if (strcmp(c->app, "mixtral") == 0) st = it_mixtral_load(c->llmc_filepath, dev, out);
        else return it_error(IT_ERR_INVALID_ARG, "app '%s' has no checkpoint loader", c->app);
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
        it_tensor *idx = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, seq + start,
                                             sizeof(int32_t) * (size_t)T);
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

it_status it_train_run(const it_train_config *c, it_train_result *result) {
    it_status st = IT_OK;
    it_device dev;
    it_model *model = NULL;
    it_loader *loader = NULL;
    it_tokenizer *tok = NULL;
    it_optimizer *opt = NULL;
    int32_t *hx = NULL, *hy = NULL;

    /* ---- validate everything before the first step */
    if (!c->input_bin) return it_error(IT_ERR_INVALID_ARG, "--input_bin: required (an llm.c token shard)");
    if ((st = it_device_parse(c->device, &dev))) return it_error_context("--device: ");
    if (c->max_memory_mb > 0) it_mem_set_limit(dev, (size_t)c->max_memory_mb << 20);
    if ((st = make_model(c, dev, &model))) goto done;
    const it_model_info *info = it_model_get_info(model);
    int64_t B = c->batch_size, T = c->sequence_length;
    int64_t total = c->total_batch_size ? c->total_batch_size : B * T;
    if (T > info->block_size) {
        st = it_error(IT_ERR_INVALID_ARG, "--sequence_length: %lld exceeds the model's block_size %lld", (long long)T,
                      (long long)info->block_size);
        goto done;
    }
    if (total % (B * T) != 0) {
        st = it_error(IT_ERR_INVALID_ARG,
                      "--total_batch_size: %lld is not a multiple of batch_size*sequence_length = %lld*%lld = %lld",
                      (long long)total, (long long)B, (long long)T, (long long)(B * T));
        goto done;
    }
    int64_t accum = total / (B * T);
    if ((st = it_loader_new(c->input_bin, B, T, 0, 1, &loader))) goto done;
    if ((st = it_loader_check_vocab(loader, info->vocab_size))) goto done;
    if (c->tokenizer_bin && (st = it_tokenizer_load(c->tokenizer_bin, &tok))) goto done;
    it_optim_config ocfg = {c->optimizer, 0.9f, 0.999f, 1e-8f, c->weight_decay};
    if ((st = it_optimizer_new(&ocfg, it_model_params(model), it_model_grads(model), &opt))) goto done;
    hx = malloc(sizeof(int32_t) * (size_t)(B * T));
    hy = malloc(sizeof(int32_t) * (size_t)(B * T));
    if (!hx || !hy) {
        st = it_error(IT_ERR_OOM, "input buffers: out of host memory");
        goto done;
    }
    it_lr_schedule sched = {c->learning_rate, c->min_lr, c->lr_warmup_iters, c->num_iteration, c->lr_decay};
    uint64_t rng = c->seed ^ 0x5DEECE66Dull;
    char devname[64];
    if (!c->quiet) {
        printf("%s: %s on %s, %lld parameters (L=%d, heads=%d, C=%d, V=%lld padded to %lld, block %lld); "
               "B=%lld T=%lld accumulation %lld, %s lr %g\n",
               c->app,
               c->llmc_filepath                                                               ? c->llmc_filepath
               : c->n_layer || c->n_head || c->n_embd || c->block_size || c->vocab_size ? "custom GPT-2"
                                                                                         : c->model,
               it_device_str(dev, devname, sizeof devname),
               (long long)info->num_params, info->n_layer, info->n_head, info->n_embd, (long long)info->vocab_size,
               (long long)info->padded_vocab, (long long)info->block_size, (long long)B, (long long)T,
               (long long)accum, it_optim_kind_name(c->optimizer), c->learning_rate);
        fflush(stdout);
    }
    if (c->freq_generate_txt > 0 && !c->quiet && (st = generate(model, c, tok, &rng))) goto done;
    it_backend_stats_reset(dev.backend); /* the report covers training steps only */

    double t_start = now_ms();
    for (int step = 1; step <= c->num_iteration; step++) {
        double t0 = now_ms();
        it_mem_stats_reset_peak(dev);
        if ((st = it_tensor_fill(it_model_grads(model), it_scalar_f64(0.0)))) break;
        double loss_sum = 0.0;
        for (int64_t micro = 0; micro < accum && !st; micro++) {
            if ((st = it_loader_next(loader, hx, hy))) break;
            it_scope_begin();
            int64_t shape[2] = {B, T};
            it_tensor *x = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, hx, sizeof(int32_t) * (size_t)(B * T));
            it_tensor *y = it_tensor_from_host(dev, IT_DTYPE_I32, 2, shape, hy, sizeof(int32_t) * (size_t)(B * T));
            it_tensor *loss = it_model_loss(model, x, y);
            double lv = 0;
            st = loss ? it_tensor_item(loss, NULL, &lv) : it_last_status();
            if (!st) st = it_backward(accum > 1 ? it_scale(loss, 1.0f / (float)accum) : loss);
            it_scope_end();
            it_tape_clear();
            loss_sum += lv;
        }
        if (st) break;
        float scale = 1.0f;
        if (c->grad_clip > 0) {
            double norm = 0;
            if ((st = it_grad_norm(it_model_grads(model), &norm))) break;
            scale = it_clip_scale(norm, c->grad_clip);
        }
        float lr = it_lr_at(&sched, step);
        if ((st = it_optimizer_step(opt, lr, scale))) break;
        if ((st = it_device_synchronize(dev))) break;
        double ms = now_ms() - t0;
        double mean_loss = loss_sum / (double)accum;
        it_mem_stats ms_stats;
        it_mem_stats_get(dev, &ms_stats);
        if (result) {
            if (result->losses) result->losses[step - 1] = mean_loss;
            result->last_step_ms = ms;
            result->peak_used = ms_stats.peak_used;
            result->peak_reserved = ms_stats.peak_reserved;
        }
        if (!c->quiet) {
            printf("step %4d/%d | train loss %.6f | lr %.2e | (%.2f ms | %.0f tok/s | peak used: %zu MB | peak reserved: "
                   "%zu MB, DP=1, TP=1, SP=1, PP=1)\n",
                   step, c->num_iteration, mean_loss, lr, ms, (double)total / (ms / 1000.0), ms_stats.peak_used >> 20,
                   ms_stats.peak_reserved >> 20);
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
            st = it_error(IT_ERR_INTERNAL, "step %d: the loss is %f; stopping (lower --learning_rate?)", step, mean_loss);
            break;
        }
    }
    if (!st && c->backend_report) st = it_backend_report(dev.backend, stdout);
    if (!st && c->output_checkpoint) {
        st = it_model_save(model, c->output_checkpoint);
        if (!st && !c->quiet) printf("wrote %s\n", c->output_checkpoint);
    }
done:
    free(hx);
    free(hy);
    it_optimizer_free(opt);
    it_tokenizer_free(tok);
    it_loader_free(loader);
    it_model_free(model);
    return st;
}

int it_train_main(int argc, char **argv, const char *app) {
    it_train_config c;
    it_train_config_defaults(&c, app);
    bool help = false;
    if (it_train_parse_args(&c, argc, argv, &help)) {
        fprintf(stderr, "%s: %s\n", app, it_last_error());
        return 2;
    }
    if (help) {
        it_train_print_help(app, stdout);
        return 0;
    }
    it_status st = it_train_run(&c, NULL);
    if (st) {
        fprintf(stderr, "%s: %s\n", app, it_last_error());
        /* Bad flags and bad input files are the user's to fix: exit 2, as for flags. */
        return st == IT_ERR_INVALID_ARG || st == IT_ERR_FORMAT || st == IT_ERR_IO || st == IT_ERR_NOT_FOUND ? 2 : 1;
    }
    return 0;
}
