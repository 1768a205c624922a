/* Checkpoints in InfiniTrain's layout, and exact resume (docs/formats.md, "Checkpoints").
 *
 *   <save>/checkpoint_step_%06d/  model.ckpt  optimizer.ckpt  trainer_state.json
 *
 * Every rank of a data-parallel run holds the same parameters, and ZeRO-1's moments are
 * gathered before a save, so one directory serves every world size: rank 0 writes it, every
 * rank reads it. A save writes a directory under a temporary name (`.checkpoint_step_%06d.tmp-PID`),
 * fsyncs each file and the directory, and only then renames it: a directory with the final
 * name is complete. trainer_state.json, written last, holds InfiniTrain's keys and, under
 * "infinitrain_c", what exact resume needs and each other file's size and CRC-32.
 *
 * A LoRA run saves as InfiniTrain's does (its model's StateDict holds each LoRALinear's
 * weight, bias, lora_A and lora_B; its optimizer covers the trainable parameters alone):
 * model.ckpt holds the frozen base parameters, unmerged, and the adapters under their
 * adapter-file names; optimizer.ckpt holds Adam's moments of the adapters, in layout order;
 * trainer_state.json's infinitrain_c.lora holds rank, alpha and the target list, which a
 * --load must match. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/node.h"
#include "infinitrain/hf.h"
#include "train/ckpt_file.h"
#include "train/train_internal.h"

enum { CKPT_FORMAT = 1 };
#define STEP_PREFIX "checkpoint_step_"

/* Whether s may go into a one-line message as it is. */
static bool printable(const char *s) {
    size_t n = 0;
    for (; *s; s++, n++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return n <= 256;
}

/* ---- file system helpers */

/* --save and --load are refused at setup when longer than PATH_MAX - 128, so the names made
 * here always fit. (A function, unlike snprintf, is not checked for truncation by GCC.) */
static void path_fmt(char *buf, size_t n, const char *fmt, ...) IT_PRINTF(3, 4);
static void path_fmt(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

static it_status fsync_path(const char *path, bool dir) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return it_error(IT_ERR_IO, "%s: opening to fsync: %s", path, strerror(errno));
    /* some file systems refuse fsync on a directory (EINVAL); the data is written anyway */
    int rc = fsync(fd), e = errno;
    close(fd);
    if (rc != 0 && !(dir && (e == EINVAL || e == EROFS)))
        return it_error(IT_ERR_IO, "%s: fsync: %s", path, strerror(e));
    return IT_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* rm -rf, after renaming the tree out of the way, so that it vanishes from its name at once. */
static it_status remove_tree(const char *dir, const char *parent, const char *name) {
    char gone[PATH_MAX];
    path_fmt(gone, sizeof gone, "%s/.%s.del-%ld", parent, name, (long)getpid());
    if (rename(dir, gone) != 0) return it_error(IT_ERR_IO, "%s: renaming to remove it: %s", dir, strerror(errno));
    if (nftw(gone, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return it_error(IT_ERR_IO, "%s: removing: %s", gone, strerror(errno));
    return IT_OK;
}

static it_status write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return it_error(IT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t k = write(fd, text + done, n - done);
        if (k <= 0) {
            int e = errno;
            close(fd);
            return it_error(IT_ERR_IO, "%s: writing: %s", path, strerror(k < 0 ? e : EIO));
        }
        done += (size_t)k;
    }
    int rc = fsync(fd), e = errno;
    if (close(fd) != 0 && !rc) rc = -1, e = errno;
    return rc ? it_error(IT_ERR_IO, "%s: writing: %s", path, strerror(e)) : IT_OK;
}

/* ---- what a checkpoint holds */

/* The model's tensors under InfiniTrain's names, as host copies (freed by free_items). GPT-2
 * also gets what InfiniTrain's GPT-2 state dict holds besides its parameters, so that
 * InfiniTrain loads the file: lm_head.weight (tied to wte, written twice, as InfiniTrain
 * does) and each layer's causal-mask buffer attn.bias (1, 1, block, block). */
typedef struct items {
    it_ckpt_item *v;
    size_t n, cap;
    void **owned;
    size_t n_owned;
} items;

static it_status items_add(items *it, const char *name, it_dtype dt, int ndim, const int64_t *dims, void *data,
                           bool own) {
    if (it->n == it->cap) {
        size_t cap = it->cap ? 2 * it->cap : 64;
        it_ckpt_item *v = realloc(it->v, cap * sizeof *v);
        void **o = realloc(it->owned, cap * sizeof *o);
        if (v) it->v = v;
        if (o) it->owned = o;
        if (!v || !o) return it_error(IT_ERR_OOM, "checkpoint: out of host memory");
        it->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) return it_error(IT_ERR_OOM, "checkpoint: out of host memory");
    it_ckpt_item *e = &it->v[it->n++];
    memset(e, 0, sizeof *e);
    e->name = copy;
    e->dtype = dt;
    e->ndim = (uint32_t)ndim;
    if (ndim > 0) memcpy(e->dims, dims, sizeof(int64_t) * (size_t)ndim);
    e->data = data;
    if (own) it->owned[it->n_owned++] = data;
    return IT_OK;
}

static void items_free(items *it) {
    for (size_t i = 0; i < it->n; i++) free((char *)it->v[i].name);
    for (size_t i = 0; i < it->n_owned; i++) free(it->owned[i]);
    free(it->v);
    free(it->owned);
    memset(it, 0, sizeof *it);
}

static bool has_role(it_model *m, it_param_role role) {
    for (int i = 0; i < it_model_param_count(m); i++)
        if (it_model_param_at(m, i)->role == role) return true;
    return false;
}

/* flat: the model's parameters (or a moment of the same layout) in host memory. */
static it_status model_items(it_model *m, const float *flat, items *it) {
    it_status st = IT_OK;
    for (int i = 0; i < it_model_param_count(m) && !st; i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        st = items_add(it, p->name, IT_DTYPE_FP32, p->ndim, p->shape, (void *)(flat + p->offset), false);
        if (!st && p->tied_name)
            st = items_add(it, p->tied_name, IT_DTYPE_FP32, p->ndim, p->shape, (void *)(flat + p->offset), false);
    }
    if (st || !has_role(m, IT_PARAM_ROLE_POSITION_EMBEDDING)) return st;
    const it_model_info *info = it_model_get_info(m);
    int64_t bs = info->block_size, dims[4] = {1, 1, bs, bs};
    float *mask = malloc(sizeof(float) * (size_t)(bs * bs));
    if (!mask) return it_error(IT_ERR_OOM, "checkpoint: out of host memory");
    for (int64_t r = 0; r < bs; r++)
        for (int64_t c = 0; c < bs; c++) mask[r * bs + c] = c <= r ? 1.0f : 0.0f;
    char name[64];
    if (info->n_layer == 0) free(mask);
    for (int l = 0; l < info->n_layer && !st; l++) {
        snprintf(name, sizeof name, "transformer.h.%d.attn.bias", l);
        st = items_add(it, name, IT_DTYPE_FP32, 4, dims, mask, l == 0); /* one copy, owned by the first */
        if (st && l == 0) free(mask);
    }
    return st;
}

/* The flat parameters, or Adam's moments whole (ZeRO-1's gathered: a collective), on the host. */
typedef struct host_state {
    float *params, *m, *v; /* m, v: the trainable parameters' (the adapters' under LoRA) */
    float *lora;           /* the adapters' flat buffer, NULL without LoRA */
    int64_t step;          /* Adam's t */
    bool adam;
} host_state;

static void host_state_free(host_state *h) {
    free(h->params);
    free(h->m);
    free(h->v);
    free(h->lora);
    memset(h, 0, sizeof *h);
}

static it_status host_state_get(it_train_ctx *ctx, host_state *h) {
    it_tensor *params = it_model_params(ctx->model), *trainable = it_model_trainable(ctx->model);
    size_t bytes = it_tensor_nbytes(trainable);
    bool lora = it_model_has_lora(ctx->model);
    memset(h, 0, sizeof *h);
    h->adam = ctx->cfg->optimizer != IT_OPTIM_SGD;
    if (it_tensor_dtype(params) != IT_DTYPE_FP32)
        return it_error(IT_ERR_UNSUPPORTED, "checkpoint: parameters of dtype %s (float32 only)",
                        it_dtype_name(it_tensor_dtype(params)));
    h->params = malloc(it_tensor_nbytes(params));
    if (lora) h->lora = malloc(bytes);
    if (h->adam) h->m = malloc(bytes), h->v = malloc(bytes);
    if (!h->params || (lora && !h->lora) || (h->adam && (!h->m || !h->v)))
        return it_error(IT_ERR_OOM, "checkpoint: out of host memory");
    it_status st = it_tensor_copy_to_host(params, h->params, it_tensor_nbytes(params));
    if (!st && lora) st = it_tensor_copy_to_host(trainable, h->lora, bytes);
    if (st) return st;
    if (ctx->zero) return it_zero_state_gather(ctx->zero, h->m, h->v, &h->step);
    it_tensor *m, *v;
    int64_t *t;
    it_optimizer_state(ctx->opt, &m, &v, &t);
    h->step = *t;
    if (h->adam && !(st = it_tensor_copy_to_host(m, h->m, bytes))) st = it_tensor_copy_to_host(v, h->v, bytes);
    return st;
}

/* The adapters under their names (model.ckpt of a LoRA run). */
static it_status lora_items(it_model *m, const float *flat, items *it) {
    it_status st = IT_OK;
    for (int i = 0; i < it_model_lora_count(m) && !st; i++) {
        const it_lora_tensor_info *t = it_model_lora_at(m, i);
        st = items_add(it, t->name, IT_DTYPE_FP32, 2, t->shape, (void *)(flat + t->offset), false);
    }
    return st;
}

/* adam.m.<i>, adam.v.<i> of trainable parameter i: the model's parameters in walk order, or
 * under LoRA the adapters in layout order (InfiniTrain's optimizer is built on
 * GetLoRAParameters' list, A then B of each adapted layer). */
static it_status optimizer_items(it_model *m, host_state *h, items *it) {
    it_status st = IT_OK;
    char name[64];
    for (int i = 0; i < it_model_lora_count(m) && !st; i++) {
        const it_lora_tensor_info *t = it_model_lora_at(m, i);
        snprintf(name, sizeof name, "adam.m.%d", i);
        st = items_add(it, name, IT_DTYPE_FP32, 2, t->shape, h->m + t->offset, false);
        snprintf(name, sizeof name, "adam.v.%d", i);
        if (!st) st = items_add(it, name, IT_DTYPE_FP32, 2, t->shape, h->v + t->offset, false);
    }
    for (int i = 0; !it_model_has_lora(m) && i < it_model_param_count(m) && !st; i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        snprintf(name, sizeof name, "adam.m.%d", i);
        st = items_add(it, name, IT_DTYPE_FP32, p->ndim, p->shape, h->m + p->offset, false);
        snprintf(name, sizeof name, "adam.v.%d", i);
        if (!st) st = items_add(it, name, IT_DTYPE_FP32, p->ndim, p->shape, h->v + p->offset, false);
    }
    return st ? st : items_add(it, "adam.t", IT_DTYPE_I64, 0, NULL, &h->step, false);
}

/* ---- trainer_state.json */

static json_t *flags_json(const it_train_config *c) {
    json_t *o = json_object();
    size_t n;
    const it_train_flag *flags = it_train_flags(&n);
    char buf[256];
    for (size_t i = 0; i < n; i++) {
        if (!flags[i].agree) continue;
        if (it_train_flag_format(c, &flags[i], buf, sizeof buf))
            json_object_set_new(o, flags[i].name, json_string(buf));
    }
    return o;
}

static it_status file_json(json_t *files, const char *dir, const char *name) {
    char path[PATH_MAX];
    path_fmt(path, sizeof path, "%s/%s", dir, name);
    uint32_t crc;
    uint64_t bytes;
    it_status st = it_file_crc32(path, &crc, &bytes);
    if (st) return st;
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", crc);
    json_object_set_new(files, name, json_pack("{s:I,s:s}", "bytes", (json_int_t)bytes, "crc32", hex));
    return IT_OK;
}

/* InfiniTrain's scheduler StateDict (last_step, recover_lr, base_lr, scheduler_<i>.*): integers
 * as JSON integers, floats as reals of 9 significant digits, which read back to the same float. */
static json_t *lr_state_json(const it_lr_scheduler *sched) {
    it_lr_state_entry e[IT_LR_STATE_MAX];
    int n = it_lr_scheduler_state(sched, e);
    json_t *o = json_object();
    for (int i = 0; i < n; i++)
        json_object_set_new(o, e[i].key, e[i].is_int ? json_integer((json_int_t)e[i].i) : json_real((double)e[i].f));
    return o;
}

static it_status lr_state_load(const char *path, it_lr_scheduler *sched, json_t *o) {
    it_lr_state_entry e[IT_LR_STATE_MAX];
    int n = 0;
    const char *key;
    json_t *v;
    if (!json_is_object(o)) return it_error(IT_ERR_FORMAT, "%s: infinitrain_c.lr_scheduler is not an object", path);
    json_object_foreach(o, key, v) {
        if (!printable(key)) return it_error(IT_ERR_FORMAT, "%s: lr_scheduler: a key holds control characters", path);
        if (n == IT_LR_STATE_MAX || strlen(key) >= sizeof e[n].key || !json_is_number(v))
            return it_error(IT_ERR_FORMAT, "%s: lr_scheduler: entry '%s' is malformed", path, key);
        memset(&e[n], 0, sizeof e[n]);
        snprintf(e[n].key, sizeof e[n].key, "%s", key);
        e[n].is_int = json_is_integer(v);
        if (e[n].is_int)
            e[n].i = json_integer_value(v);
        else
            e[n].f = (float)json_real_value(v);
        n++;
    }
    it_status st = it_lr_scheduler_load_state(sched, e, n);
    return st ? it_error_context("%s: lr_scheduler: ", path) : IT_OK;
}

/* A target list as LoRAConfig parses it: items trimmed of blanks, empty ones dropped, joined
 * by commas ("c_attn, c_proj," and "c_attn,c_proj" are the same list). */
static void lora_targets_norm(const char *list, char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    for (const char *p = list; *p;) {
        const char *b = p, *e = strchr(p, ',');
        if (!e) e = p + strlen(p);
        p = *e ? e + 1 : e;
        while (b < e && strchr(" \t\r\n", *b)) b++;
        while (e > b && strchr(" \t\r\n", e[-1])) e--;
        if (e == b) continue;
        int n = snprintf(out + o, cap - o, "%s%.*s", o ? "," : "", (int)(e - b), b);
        if (n < 0 || (size_t)n >= cap - o) return; /* truncated: still a prefix that compares unequal */
        o += (size_t)n;
    }
}

static char *trainer_state_text(const it_train_ctx *ctx, json_t *files) {
    const it_model_info *info = ctx->info;
    const it_train_config *c = ctx->cfg;
    int64_t consumed =
        it_loader_step(ctx->loader) * ctx->data_world + ctx->data_rank; /* InfiniTrain's: the next batch */
    char rng[24];
    snprintf(rng, sizeof rng, "%016llx", (unsigned long long)ctx->rng);
    json_t *ours =
        json_pack("{s:i,s:s,s:s,s:I,s:I,s:I,s:s,s:o,s:o,s:o}", "format", CKPT_FORMAT, "app", c->app, "optimizer",
                  it_optim_kind_name(c->optimizer), "consumed_batches_all_ranks",
                  (json_int_t)(it_loader_step(ctx->loader) * ctx->data_world), "loader_step",
                  (json_int_t)it_loader_step(ctx->loader), "accumulation", (json_int_t)ctx->accum, "rng", rng,
                  "lr_scheduler", lr_state_json(&ctx->sched), "flags", flags_json(c), "files", json_incref(files));
    if (ours && it_model_has_lora(ctx->model)) {
        char targets[512];
        lora_targets_norm(train_lora_targets(c), targets, sizeof targets);
        json_object_set_new(ours, "lora",
                            json_pack("{s:i,s:f,s:s}", "rank", c->lora_rank, "alpha", (double)c->lora_alpha,
                                      "target_modules", targets));
    }
    json_t *root =
        json_pack("{s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:f,s:i,s:i,s:i}", "n_layer", info->n_layer, "n_head", info->n_head,
                  "n_kv_head", info->n_kv_head ? info->n_kv_head : info->n_head, "n_embd", info->n_embd, "vocab_size",
                  (json_int_t)info->vocab_size, "global_step", (json_int_t)ctx->step, "consumed_batches",
                  (json_int_t)consumed, "last_lr", (double)ctx->lr, "ddp_size", ctx->data_world, "tp_size",
                  ctx->tp_size, "sp_size", ctx->cfg->sequence_parallel ? ctx->tp_size : 1);
    if (!root) json_decref(ours);
    /* cp_size only under context parallelism: master's keys (pp_size last) are unchanged without */
    if (root && ctx->cp_size > 1) json_object_set_new(root, "cp_size", json_integer(ctx->cp_size));
    if (root && (json_object_set_new(root, "pp_size", json_integer(ctx->pp_size)) ||
                 json_object_set_new(root, "infinitrain_c", ours))) {
        json_decref(root);
        root = NULL;
    }
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    return text;
}

/* ---- saving */

/* IT_CKPT_TEST_PAUSE_MS: sleep this long after each file of a save and before its rename,
 * so that tests/e2e/checkpoint.sh can kill a process in the middle of a save. */
static void test_pause(void) {
    const char *v = getenv("IT_CKPT_TEST_PAUSE_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms > 0 && ms < 10000) usleep((useconds_t)ms * 1000);
}

static it_status write_checkpoint(it_train_ctx *ctx, host_state *h, const char *tmp) {
    const it_train_config *c = ctx->cfg;
    char path[PATH_MAX];
    items it = {0};
    json_t *files = json_object();
    it_status st = model_items(ctx->model, h->params, &it);
    if (!st && h->lora) st = lora_items(ctx->model, h->lora, &it);
    path_fmt(path, sizeof path, "%s/model.ckpt", tmp);
    if (!st) st = it_ckpt_write(path, it.v, it.n, NULL, NULL);
    if (!st) st = file_json(files, tmp, "model.ckpt");
    items_free(&it);
    test_pause();
    if (!st && h->adam && c->save_optimizer_state) {
        st = optimizer_items(ctx->model, h, &it);
        path_fmt(path, sizeof path, "%s/optimizer.ckpt", tmp);
        if (!st) st = it_ckpt_write(path, it.v, it.n, NULL, NULL);
        if (!st) st = file_json(files, tmp, "optimizer.ckpt");
        items_free(&it);
        test_pause();
    }
    if (!st) {
        char *text = trainer_state_text(ctx, files);
        path_fmt(path, sizeof path, "%s/trainer_state.json", tmp);
        size_t len = text ? strlen(text) : 0;
        char *line = text ? realloc(text, len + 2) : NULL;
        if (line) text = line, memcpy(text + len, "\n", 2);
        st = line ? write_text(path, text) : it_error(IT_ERR_OOM, "trainer_state.json: out of host memory");
        free(text);
    }
    json_decref(files);
    test_pause();
    return st ? st : fsync_path(tmp, true);
}

/* The step of a complete checkpoint directory's name, or -1. */
static long step_of(const char *name) {
    size_t n = strlen(STEP_PREFIX);
    if (strncmp(name, STEP_PREFIX, n) != 0 || strlen(name) < n + 6) return -1;
    char *end;
    errno = 0;
    long s = strtol(name + n, &end, 10);
    return *end || errno || s < 0 ? -1 : s;
}

/* Leftovers of saves or removals a crash interrupted. */
static void remove_stale(const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "." STEP_PREFIX, strlen(STEP_PREFIX) + 1) == 0 &&
            (strstr(e->d_name, ".tmp-") || strstr(e->d_name, ".del-"))) {
            path_fmt(path, sizeof path, "%s/%s", root, e->d_name);
            nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        }
    closedir(d);
}

static int by_step(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Keep the newest --max_checkpoint_keep complete checkpoints, and the one resumed from. */
static it_status prune(const it_train_ctx *ctx) {
    int keep = ctx->cfg->max_checkpoint_keep;
    const char *root = ctx->cfg->save;
    if (keep <= 0) return IT_OK;
    DIR *d = opendir(root);
    if (!d) return it_error(IT_ERR_IO, "--save %s: %s", root, strerror(errno));
    long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long s = step_of(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof steps[0], by_step);
    it_status st = IT_OK;
    char name[64], path[PATH_MAX], real[PATH_MAX];
    for (int i = 0; i < n - keep && !st; i++) {
        snprintf(name, sizeof name, STEP_PREFIX "%06ld", steps[i]);
        path_fmt(path, sizeof path, "%s/%s", root, name);
        if (ctx->resumed_from && realpath(path, real) && strcmp(real, ctx->resumed_from) == 0) continue;
        st = remove_tree(path, root, name);
    }
    return st;
}

/* Under TP the ranks of the TP group (DP rank 0's: the DP replicas hold the same) save
 * together: group rank 0 makes the temporary directory, each rank writes its shard into
 * rank_%06d/ (its global rank, InfiniTrain's layout), group rank 0 renames it into place once
 * every shard is complete. `phase` failures are agreed over the group, so all stop together. */
/* The ranks of one model replica: TP x PP (NULL: neither). */
static it_dist *model_group(const it_train_ctx *ctx) { return ctx->mp ? ctx->mp : ctx->tp ? ctx->tp : ctx->pp; }

static it_status tp_agree(it_train_ctx *ctx, it_status st, double *pid) {
    double v[2] = {st ? 1 : 0, pid ? *pid : 0};
    it_status cst = it_dist_all_reduce_host(model_group(ctx), v, 2, IT_DTYPE_FP64, IT_CCL_SUM);
    if (cst) return cst;
    if (pid) *pid = v[1];
    if (v[0] && !st) st = it_error(IT_ERR_IO, "checkpoint at step %d: another TP rank could not save", ctx->step);
    return st;
}

static it_status save_rank0(it_train_ctx *ctx, host_state *h) {
    const char *root = ctx->cfg->save;
    it_dist *mg = model_group(ctx);
    bool lead = it_dist_rank(mg) == 0; /* the one process that makes and renames the directory */
    char name[64], tmp[PATH_MAX], final[PATH_MAX], mine[PATH_MAX];
    snprintf(name, sizeof name, STEP_PREFIX "%06d", ctx->step);
    it_status st = IT_OK;
    double pid = lead ? (double)getpid() : 0;
    if (lead && mkdir(root, 0755) != 0 && errno != EEXIST)
        st = it_error(IT_ERR_IO, "--save %s: %s", root, strerror(errno));
    if (lead && !st) remove_stale(root);
    path_fmt(tmp, sizeof tmp, "%s/.%s.tmp-%ld", root, name, (long)pid);
    if (lead && !st && mkdir(tmp, 0755) != 0) st = it_error(IT_ERR_IO, "%s: %s", tmp, strerror(errno));
    if (mg && (st = tp_agree(ctx, st, &pid))) return st;
    path_fmt(tmp, sizeof tmp, "%s/.%s.tmp-%ld", root, name, (long)pid);
    path_fmt(final, sizeof final, "%s/%s", root, name);
    snprintf(mine, sizeof mine, "%s", tmp);
    if (mg) {
        path_fmt(mine, sizeof mine, "%s/rank_%06d", tmp, ctx->grank);
        if (mkdir(mine, 0755) != 0) st = it_error(IT_ERR_IO, "%s: %s", mine, strerror(errno));
    }
    if (!st) st = write_checkpoint(ctx, h, mine);
    if (mg) st = tp_agree(ctx, st, NULL);
    struct stat sb;
    if (lead && !st && stat(final, &sb) == 0) st = remove_tree(final, root, name); /* an older run's, same step */
    if (lead && !st && rename(tmp, final) != 0)
        st = it_error(IT_ERR_IO, "%s: renaming to %s: %s", tmp, final, strerror(errno));
    if (lead && !st) st = fsync_path(root, true);
    if (mg) st = tp_agree(ctx, st, NULL);
    if (st) {
        it_status keep = st;
        if (lead) nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS); /* the earlier checkpoints stay as they were */
        it_error_context("checkpoint at step %d not saved: ", ctx->step);
        return keep;
    }
    if (!ctx->quiet) printf("checkpoint: saved %s%s\n", final, mg ? " (one rank_%06d/ per TP and PP rank)" : "");
    snprintf(ctx->saved, sizeof ctx->saved, "%s", final);
    return lead ? prune(ctx) : IT_OK;
}

it_status train_ckpt_save(it_train_ctx *ctx) {
    host_state h;
    it_status st = host_state_get(ctx, &h); /* a collective under ZeRO-1 */
    if (!st && ctx->rank == 0) st = save_rank0(ctx, &h);
    host_state_free(&h);
    /* every rank learns whether rank 0 saved, so that all stop together if it did not */
    if (ctx->world > 1) {
        double failed = st ? 1 : 0;
        it_status cst = it_dist_all_reduce_host(ctx->dist, &failed, 1, IT_DTYPE_FP64, IT_CCL_SUM);
        if (cst) return cst;
        ctx->fail_scope = TRAIN_FAIL_ALL_RANKS;
        if (failed && !st) st = it_error(IT_ERR_IO, "checkpoint at step %d: rank 0 could not save it", ctx->step);
        if (!st) ctx->fail_scope = TRAIN_FAIL_THIS_RANK;
    }
    return st;
}

/* --save's directory, made (with its parents) and checked writable before the first step, so
 * that a mistyped path stops the run before any training rather than at the first save. */
it_status train_ckpt_prepare(it_train_ctx *ctx) {
    const char *root = ctx->cfg->save;
    if (!root || ctx->rank != 0) return IT_OK;
    char path[PATH_MAX];
    path_fmt(path, sizeof path, "%s", root);
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return it_error(IT_ERR_IO, "--save %s: cannot create %s: %s", root, path, strerror(errno));
            if (end) break;
            *p = '/';
        }
    }
    struct stat sb;
    if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return it_error(IT_ERR_INVALID_ARG, "--save %s: not a directory", root);
    if (access(root, W_OK | X_OK) != 0) return it_error(IT_ERR_IO, "--save %s: %s", root, strerror(errno));
    return IT_OK;
}

bool train_ckpt_due(const it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    return c->save_interval > 0 && (ctx->step % c->save_interval == 0 || ctx->step == c->num_iteration);
}

/* ---- loading */

/* InfiniTrain's writer leaves out the comma after "vocab_size" (a value ends one line, a key
 * begins the next). Insert a comma wherever that happens: valid JSON never has it, and no
 * JSON string holds a raw newline, so the repair changes nothing else. */
static char *insert_missing_commas(const char *text) {
    size_t n = strlen(text), extra = 0;
    for (size_t i = 0; i < n; i++) extra += text[i] == '\n';
    char *out = malloc(n + extra + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\n') {
            size_t p = k;
            while (p > 0 && (out[p - 1] == ' ' || out[p - 1] == '\t' || out[p - 1] == '\r')) p--;
            size_t q = i + 1;
            while (q < n && (text[q] == ' ' || text[q] == '\t' || text[q] == '\r' || text[q] == '\n')) q++;
            char last = p ? out[p - 1] : '\0';
            bool value_end = last == '"' || last == '}' || last == ']' || (last >= '0' && last <= '9') || last == 'e' ||
                             last == 'l'; /* true, false, null */
            if (value_end && q < n && text[q] == '"') out[k++] = ',';
        }
        out[k++] = text[i];
    }
    out[k] = '\0';
    return out;
}

static it_status read_text(const char *path, char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return it_error(errno == ENOENT ? IT_ERR_NOT_FOUND : IT_ERR_IO, "%s: %s", path, strerror(errno));
    enum { MAX = 1 << 20 };
    char *buf = malloc(MAX + 1);
    size_t n = buf ? fread(buf, 1, MAX + 1, f) : 0;
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad || n > MAX || memchr(buf, '\0', n)) {
        free(buf);
        return it_error(buf ? IT_ERR_FORMAT : IT_ERR_OOM, "%s: %s", path,
                        !buf      ? "out of host memory"
                        : n > MAX ? "larger than 1 MiB"
                                  : "a NUL byte or a read error");
    }
    buf[n] = '\0';
    *out = buf;
    return IT_OK;
}

static it_status parse_state(const char *path, json_t **out) {
    char *text = NULL;
    it_status st = read_text(path, &text);
    if (st) return st;
    json_error_t err;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!j) {
        char *fixed = insert_missing_commas(text);
        json_error_t err2;
        j = fixed ? json_loads(fixed, JSON_REJECT_DUPLICATES, &err2) : NULL;
        free(fixed);
    }
    free(text);
    if (!j) it__one_line(err.text);
    if (!j) return it_error(IT_ERR_FORMAT, "%s: not JSON: line %d column %d: %s", path, err.line, err.column, err.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return it_error(IT_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *out = j;
    return IT_OK;
}

/* An integer field; absent: `def` (InfiniTrain's reader falls back to 0, or 1 for the sizes). */
static it_status get_int(const char *path, json_t *o, const char *key, int64_t def, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!v) return *out = def, IT_OK;
    if (json_is_integer(v)) return *out = json_integer_value(v), IT_OK;
    double d = json_is_real(v) ? json_real_value(v) : 0.5;
    if (d > -9.2e18 && d < 9.2e18 && d == (double)(int64_t)d) return *out = (int64_t)d, IT_OK; /* in range first */
    return it_error(IT_ERR_FORMAT, "%s: '%s' is not an integer", path, key);
}

static it_status get_str(const char *path, json_t *o, const char *key, const char **out) {
    json_t *v = json_object_get(o, key);
    if (!v) return it_error(IT_ERR_FORMAT, "%s: no '%s'", path, key);
    if (!json_is_string(v)) return it_error(IT_ERR_FORMAT, "%s: '%s' is not a string", path, key);
    if (!printable(json_string_value(v)))
        return it_error(IT_ERR_FORMAT, "%s: '%s' holds control characters or is over 256 bytes", path, key);
    *out = json_string_value(v);
    return IT_OK;
}

static it_status expect_int(const char *path, json_t *o, const char *key, int64_t def, int64_t want,
                            const char *whose) {
    int64_t got;
    it_status st = get_int(path, o, key, def, &got);
    if (st) return st;
    if (got != want)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s: expected %lld (%s), found %lld", path, key, (long long)want, whose,
                        (long long)got);
    return IT_OK;
}

/* Each file the state lists, by size and CRC-32. */
static it_status check_files(const char *dir, const char *path, json_t *files) {
    const char *name;
    json_t *f;
    json_object_foreach(files, name, f) {
        if (!printable(name)) return it_error(IT_ERR_FORMAT, "%s: files: a name holds control characters", path);
        char file[PATH_MAX], hex[16];
        path_fmt(file, sizeof file, "%s/%s", dir, name);
        int64_t bytes;
        const char *want;
        uint32_t crc;
        uint64_t got;
        it_status st;
        if (strchr(name, '/') || !json_is_object(f) || (st = get_int(path, f, "bytes", -1, &bytes)) ||
            (st = get_str(path, f, "crc32", &want)))
            return it_error(IT_ERR_FORMAT, "%s: files: entry '%s' is malformed", path, name);
        if ((st = it_file_crc32(file, &crc, &got))) return it_error_context("checkpoint is incomplete: ");
        if ((int64_t)got != bytes)
            return it_error(IT_ERR_FORMAT,
                            "%s: size: expected %lld bytes (trainer_state.json), found %llu (truncated?)", file,
                            (long long)bytes, (unsigned long long)got);
        snprintf(hex, sizeof hex, "%08x", crc);
        if (strcmp(hex, want) != 0)
            return it_error(IT_ERR_FORMAT, "%s: checksum: expected crc32 %s (trainer_state.json), found %s (damaged?)",
                            file, want, hex);
    }
    return IT_OK;
}

/* --load's checkpoint: `latest` is the newest complete checkpoint_step_* under --save, and so is
 * a directory that holds such checkpoints (a save root) rather than being one. *out gets the
 * checkpoint's path, or "" when `latest` finds none yet (the run starts from step 0: a restart
 * loop's first run). A checkpoint is complete when its trainer_state.json (or rank 0's, in a
 * parallel run's rank_000000/) is there: a save renames its directory into place last. */
static it_status pick_load(const it_train_config *c, char *out, size_t n) {
    bool latest = strcmp(c->load, "latest") == 0;
    const char *root = latest ? c->save : c->load;
    struct stat sb;
    char path[PATH_MAX];
    if (latest && !root)
        return it_error(IT_ERR_INVALID_ARG, "--load latest: needs --save ROOT (the directory the checkpoints are in)");
    snprintf(out, n, "%s", root);
    if (!latest && (strstr(root, ".tmp-") || strstr(root, ".del-"))) return IT_OK; /* resolve_dir refuses it */
    path_fmt(path, sizeof path, "%s/trainer_state.json", root);
    bool is_ckpt = stat(path, &sb) == 0;
    path_fmt(path, sizeof path, "%s/rank_000000/trainer_state.json", root);
    is_ckpt = is_ckpt || stat(path, &sb) == 0;
    DIR *d = latest || !is_ckpt ? opendir(root) : NULL;
    if (!d) { /* a checkpoint itself, or not there: resolve_dir says which */
        if (latest && errno == ENOENT) *out = 0;
        return IT_OK;
    }
    long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s = step_of(e->d_name);
        if (s <= best) continue;
        path_fmt(path, sizeof path, "%s/%s/trainer_state.json", root, e->d_name);
        bool whole = stat(path, &sb) == 0;
        path_fmt(path, sizeof path, "%s/%s/rank_000000/trainer_state.json", root, e->d_name);
        if (whole || stat(path, &sb) == 0) best = s;
    }
    closedir(d);
    if (best >= 0)
        path_fmt(out, n, "%s/" STEP_PREFIX "%06ld", root, best);
    else if (latest)
        *out = 0;
    else if (!is_ckpt)
        return it_error(IT_ERR_FORMAT, "--load %s: no trainer_state.json and no complete checkpoint_step_* in it",
                        root);
    return IT_OK;
}

/* The directory a rank reads: DIR, or InfiniTrain's DIR/rank_%06d of a parallel run. */
static it_status resolve_dir(it_train_ctx *ctx, const char *dir, char *out, size_t n) {
    struct stat sb;
    char path[PATH_MAX];
    if (stat(dir, &sb) != 0)
        return it_error(errno == ENOENT ? IT_ERR_NOT_FOUND : IT_ERR_IO, "--load %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return it_error(IT_ERR_INVALID_ARG, "--load %s: not a directory", dir);
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    if (strstr(base, ".tmp-") || strstr(base, ".del-"))
        return it_error(IT_ERR_INVALID_ARG,
                        "--load %s: an incomplete checkpoint (a save or removal that did not finish)", dir);
    snprintf(out, n, "%s", dir);
    /* this TP and PP rank's shard, saved by DP replica 0's rank of the same tp and pp (the
     * replicas share it): global rank tp + TP*DP*pp */
    int shard = it_model_tp_rank(ctx->model) + ctx->tp_size * ctx->world * it_model_pp_rank(ctx->model);
    path_fmt(path, sizeof path, "%s/rank_%06d/trainer_state.json", dir, shard);
    if ((ctx->tp_size > 1 || ctx->pp_size > 1) && stat(path, &sb) == 0) {
        snprintf(out, n, "%s/rank_%06d", dir, shard);
        return IT_OK;
    }
    path_fmt(path, sizeof path, "%s/trainer_state.json", dir);
    if (stat(path, &sb) == 0) return IT_OK;
    for (int r = ctx->rank; r >= 0; r = r ? 0 : -1) {
        path_fmt(path, sizeof path, "%s/rank_%06d/trainer_state.json", dir, r);
        if (stat(path, &sb) == 0) {
            snprintf(out, n, "%s/rank_%06d", dir, r);
            return IT_OK;
        }
    }
    return it_error(IT_ERR_FORMAT, "--load %s: no trainer_state.json: not a complete checkpoint", dir);
}

/* model.ckpt's tensors that are not parameters here, but that InfiniTrain's state dicts hold. */
static bool known_extra(it_model *m, const char *name) {
    size_t n = strlen(name);
    if (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0 && strncmp(name, "transformer.h.", 14) == 0) return true;
    for (int i = 0; i < it_model_param_count(m); i++) {
        const char *t = it_model_param_at(m, i)->tied_name;
        if (t && strcmp(t, name) == 0) return true;
    }
    return false;
}

/* A LoRA model's adapters from model.ckpt, when it holds them (a LoRA run's checkpoint: every
 * adapter then, with its shape); a checkpoint of the base model alone leaves them as they are. */
static it_status load_adapters(it_model *m, it_ckpt *ck, bool *loaded) {
    *loaded = false;
    int n = it_model_lora_count(m);
    bool any = false;
    for (int i = 0; i < n && !any; i++) any = it_ckpt_find(ck, it_model_lora_at(m, i)->name) != NULL;
    if (!any) return IT_OK;
    it_tensor *flat = it_model_trainable(m);
    float *host = malloc(it_tensor_nbytes(flat));
    it_status st = host ? IT_OK : it_error(IT_ERR_OOM, "%s: out of host memory", it_ckpt_path(ck));
    for (int i = 0; i < n && !st; i++) {
        const it_lora_tensor_info *t = it_model_lora_at(m, i);
        const it_ckpt_entry *e;
        if (!(st = it_ckpt_expect(ck, t->name, IT_DTYPE_FP32, 2, t->shape, &e)))
            st = it_ckpt_read(ck, e, host + t->offset, sizeof(float) * (size_t)t->numel);
    }
    if (!st) st = it_tensor_copy_from_host(flat, host, it_tensor_nbytes(flat));
    free(host);
    *loaded = !st;
    return st;
}

static it_status load_model_dir(it_model *m, const char *dir, bool quiet, bool *adapters) {
    char path[PATH_MAX];
    path_fmt(path, sizeof path, "%s/model.ckpt", dir);
    it_ckpt *ck;
    it_status st = it_ckpt_open(path, &ck);
    if (st) return st;
    it_tensor *params = it_model_params(m);
    float *flat = malloc(it_tensor_nbytes(params));
    if (!flat) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    for (int i = 0; i < it_model_param_count(m) && !st; i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        const it_ckpt_entry *e;
        if (!(st = it_ckpt_expect(ck, p->name, IT_DTYPE_FP32, (uint32_t)p->ndim, p->shape, &e)))
            st = it_ckpt_read(ck, e, flat + p->offset, sizeof(float) * (size_t)p->numel);
    }
    char extra[256] = "";
    int n_extra = 0;
    for (size_t i = 0; i < it_ckpt_count(ck) && !st; i++) {
        const char *name = it_ckpt_at(ck, i)->name;
        if (it_model_param_find(m, name) || it_model_lora_find(m, name) || known_extra(m, name)) continue;
        if (n_extra++ < 3)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "%s'%s'", *extra ? ", " : "", name);
    }
    if (!st && n_extra && !quiet)
        fprintf(stderr, "note: %s: %d entr%s this model does not have, ignored: %s%s\n", path, n_extra,
                n_extra == 1 ? "y" : "ies", extra, n_extra > 3 ? ", ..." : "");
    if (!st) st = it_tensor_copy_from_host(params, flat, it_tensor_nbytes(params));
    it__weights_written(); /* parameters written outside an optimizer step: autocast's copies are stale */
    if (!st) st = load_adapters(m, ck, adapters);
    free(flat);
    it_ckpt_close(ck);
    return st;
}

it_status it_ckpt_load_model_dir(it_model *m, const char *dir, bool quiet) {
    bool adapters;
    return load_model_dir(m, dir, quiet, &adapters);
}

/* "rank 4, alpha 8, targets c_attn,c_proj", or "no LoRA". */
static void lora_describe(char *buf, size_t n, int64_t rank, double alpha, const char *targets) {
    if (rank <= 0)
        snprintf(buf, n, "no LoRA");
    else
        snprintf(buf, n, "LoRA rank %lld, alpha %g, targets %s", (long long)rank, alpha, targets);
}

/* The checkpoint's LoRA settings (infinitrain_c.lora; absent: no LoRA) must be this run's:
 * its adapters and their moments mean nothing to another rank or target list. A model alone
 * (it-ckpt from-llmc: no optimizer, no adapters) is a base model that any run may adapt. */
static it_status check_lora(const it_train_ctx *ctx, const char *path, json_t *ours) {
    const it_train_config *c = ctx->cfg;
    json_t *l = json_object_get(ours, "lora");
    if (!l && !json_object_get(ours, "optimizer")) return IT_OK;
    int64_t rank = 0;
    double alpha = 0;
    const char *targets = "";
    it_status st;
    if (l) {
        if (!json_is_object(l)) return it_error(IT_ERR_FORMAT, "%s: infinitrain_c.lora is not an object", path);
        json_t *a = json_object_get(l, "alpha");
        if ((st = get_int(path, l, "rank", 0, &rank)) || (st = get_str(path, l, "target_modules", &targets))) return st;
        if (!json_is_number(a)) return it_error(IT_ERR_FORMAT, "%s: infinitrain_c.lora.alpha is not a number", path);
        alpha = json_number_value(a);
    }
    bool on = it_model_has_lora(ctx->model);
    char mine[512] = "";
    if (on) lora_targets_norm(train_lora_targets(c), mine, sizeof mine);
    if (rank == (on ? c->lora_rank : 0) && (!on || ((float)alpha == c->lora_alpha && strcmp(targets, mine) == 0)))
        return IT_OK;
    char saved[600], here[600];
    lora_describe(saved, sizeof saved, rank, alpha, targets);
    lora_describe(here, sizeof here, on ? c->lora_rank : 0, (double)c->lora_alpha, mine);
    return it_error(IT_ERR_INVALID_ARG,
                    "--load %s: the checkpoint was saved with %s, this run has %s (resume with the same "
                    "--lora_rank, --lora_alpha and --lora_target_modules)",
                    ctx->load_dir, saved, here);
}

it_status train_ckpt_load_model(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    if (!c->load) return IT_OK;
    char dir[PATH_MAX], path[PATH_MAX], load[PATH_MAX - 64]; /* (room for resolve_dir's rank_%06d/...) */
    it_status st = pick_load(c, load, sizeof load);
    if (st) return st;
    if (!*load) { /* --load latest before any checkpoint */
        if (!ctx->quiet) printf("--load latest: no complete checkpoint under %s yet: starting from step 0\n", c->save);
        return IT_OK;
    }
    if ((st = resolve_dir(ctx, load, dir, sizeof dir))) return st;
    path_fmt(path, sizeof path, "%s/trainer_state.json", dir);
    json_t *j = NULL;
    if ((st = parse_state(path, &j))) return st;
    ctx->resume = j;
    ctx->resume_dir = strdup(dir);
    ctx->resumed_from = realpath(load, NULL);
    ctx->load_dir = strdup(load);
    if (!ctx->resume_dir || !ctx->load_dir) return it_error(IT_ERR_OOM, "--load: out of host memory");
    const it_model_info *info = ctx->info;
    const char *whose = "this model";
    json_t *ours = json_object_get(j, "infinitrain_c");
    const char *app;
    /* another program's checkpoint (a GPT-2 one given to llama3): say so, not which of its
     * dimensions happens to differ first */
    if (ours && (st = get_str(path, ours, "app", &app))) return st;
    if (ours && strcmp(app, c->app) != 0)
        return it_error(IT_ERR_INVALID_ARG, "%s: app: expected %s (this program), found %s", path, c->app, app);
    if ((st = expect_int(path, j, "n_layer", 0, info->n_layer, whose)) ||
        (st = expect_int(path, j, "n_head", 0, info->n_head, whose)) ||
        (st = expect_int(path, j, "n_kv_head", 0, info->n_kv_head ? info->n_kv_head : info->n_head, whose)) ||
        (st = expect_int(path, j, "n_embd", 0, info->n_embd, whose)) ||
        (st = expect_int(path, j, "vocab_size", 0, info->vocab_size, whose)) ||
        (st = expect_int(path, j, "tp_size", 1, ctx->tp_size,
                         ctx->tp_size > 1 ? "this run's --tensor_parallel" : "this run: no tensor parallelism")) ||
        (st = expect_int(path, j, "sp_size", 1, c->sequence_parallel ? ctx->tp_size : 1,
                         c->sequence_parallel ? "this run: --sequence_parallel"
                                              : "this run: no sequence parallelism")) ||
        (st = expect_int(path, j, "pp_size", 1, ctx->pp_size,
                         ctx->pp_size > 1 ? "this run's --pipeline_parallel" : "this run: no pipeline parallelism")))
        return st;
    if (ours) {
        json_t *files = json_object_get(ours, "files");
        if (!json_is_object(files)) return it_error(IT_ERR_FORMAT, "%s: infinitrain_c.files is not an object", path);
        if ((st = check_files(dir, path, files))) return st;
        if ((st = check_lora(ctx, path, ours))) return st;
    }
    bool adapters;
    if ((st = load_model_dir(ctx->model, dir, ctx->quiet, &adapters))) return st;
    if (adapters && c->lora_load_path && !ctx->quiet)
        printf("note: --load: the checkpoint's adapters replace those of --lora_load_path %s\n", c->lora_load_path);
    return IT_OK;
}

static it_status load_optimizer(it_train_ctx *ctx, const char *dir) {
    char path[PATH_MAX];
    path_fmt(path, sizeof path, "%s/optimizer.ckpt", dir);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return it_error(IT_ERR_INVALID_ARG,
                        "%s: missing (saved with --save_optimizer_state=false?); resume with "
                        "--load_optimizer_state=false to start Adam's moments afresh",
                        path);
    it_ckpt *ck;
    it_status st = it_ckpt_open(path, &ck);
    if (st) return st;
    size_t bytes = it_tensor_nbytes(it_model_trainable(ctx->model));
    host_state h = {.m = malloc(bytes), .v = malloc(bytes), .adam = true};
    if (!h.m || !h.v) st = it_error(IT_ERR_OOM, "%s: out of host memory", path);
    char name[64];
    for (int i = 0; i < it_model_lora_count(ctx->model) && !st; i++) { /* see optimizer_items */
        const it_lora_tensor_info *p = it_model_lora_at(ctx->model, i);
        const it_ckpt_entry *e;
        for (int k = 0; k < 2 && !st; k++) {
            snprintf(name, sizeof name, "adam.%c.%d", k ? 'v' : 'm', i);
            if (!(st = it_ckpt_expect(ck, name, IT_DTYPE_FP32, 2, p->shape, &e)))
                st = it_ckpt_read(ck, e, (k ? h.v : h.m) + p->offset, sizeof(float) * (size_t)p->numel);
        }
    }
    for (int i = 0; !it_model_has_lora(ctx->model) && i < it_model_param_count(ctx->model) && !st; i++) {
        const it_model_param_info *p = it_model_param_at(ctx->model, i);
        const it_ckpt_entry *e;
        for (int k = 0; k < 2 && !st; k++) {
            snprintf(name, sizeof name, "adam.%c.%d", k ? 'v' : 'm', i);
            if (!(st = it_ckpt_expect(ck, name, IT_DTYPE_FP32, (uint32_t)p->ndim, p->shape, &e)))
                st = it_ckpt_read(ck, e, (k ? h.v : h.m) + p->offset, sizeof(float) * (size_t)p->numel);
        }
    }
    const it_ckpt_entry *t;
    if (!st && !(st = it_ckpt_expect(ck, "adam.t", IT_DTYPE_I64, 0, NULL, &t)))
        st = it_ckpt_read(ck, t, &h.step, sizeof h.step);
    it_ckpt_close(ck);
    if (!st && ctx->zero) st = it_zero_state_scatter(ctx->zero, h.m, h.v, h.step);
    if (!st && !ctx->zero) {
        it_tensor *m, *v;
        int64_t *step;
        it_optimizer_state(ctx->opt, &m, &v, &step);
        if (!(st = it_tensor_copy_from_host(m, h.m, bytes)) && !(st = it_tensor_copy_from_host(v, h.v, bytes)))
            *step = h.step;
    }
    host_state_free(&h);
    return st;
}

/* Say which trajectory-changing flags differ from the checkpoint's: the run then continues,
 * but it is not the one that was saved. */
static void note_flag_changes(const it_train_ctx *ctx, json_t *saved) {
    if (ctx->quiet || !json_is_object(saved)) return;
    json_t *now = flags_json(ctx->cfg);
    const char *name;
    json_t *v;
    json_object_foreach(saved, name, v) {
        json_t *w = json_object_get(now, name);
        if (strcmp(name, "num_iteration") == 0 || strcmp(name, "save_interval") == 0) continue;
        if (!w || !json_is_string(v) || strcmp(json_string_value(v), json_string_value(w)) != 0)
            printf("note: --%s is %s here, %s in the checkpoint: the resumed run is not the one saved\n", name,
                   w ? json_string_value(w) : "unset", json_is_string(v) ? json_string_value(v) : "?");
    }
    json_decref(now);
}

it_status train_ckpt_load_state(it_train_ctx *ctx) {
    const it_train_config *c = ctx->cfg;
    json_t *j = ctx->resume;
    if (!j) return IT_OK;
    char path[PATH_MAX];
    path_fmt(path, sizeof path, "%s/trainer_state.json", ctx->resume_dir);
    json_t *ours = json_object_get(j, "infinitrain_c");
    int64_t step, consumed, rank0_consumed;
    it_status st;
    /* without global_step the run would start again from step 0 on trained weights */
    if (!json_object_get(j, "global_step"))
        return it_error(IT_ERR_FORMAT, "%s: no 'global_step' (the step the checkpoint was saved after)", path);
    if ((st = get_int(path, j, "global_step", 0, &step)) ||
        (st = get_int(path, j, "consumed_batches", 0, &rank0_consumed)))
        return st;
    consumed = rank0_consumed;
    /* written by it-ckpt from-llmc: the model alone, no optimizer, data position or RNG */
    bool model_only = ours && !json_object_get(ours, "optimizer");
    bool lr_restored = false;
    if (ours && !model_only) {
        const char *opt, *rng;
        if ((st = get_str(path, ours, "optimizer", &opt)) || (st = get_str(path, ours, "rng", &rng)) ||
            (st = get_int(path, ours, "consumed_batches_all_ranks", 0, &consumed)))
            return st;
        if (strcmp(opt, it_optim_kind_name(c->optimizer)) != 0 && c->load_optimizer_state)
            return it_error(IT_ERR_INVALID_ARG,
                            "%s: optimizer: expected %s (--optimizer), found %s (resume with --optimizer %s, or "
                            "--load_optimizer_state=false)",
                            path, it_optim_kind_name(c->optimizer), opt, opt);
        ctx->rng = strtoull(rng, NULL, 16);
        json_t *lrs = json_object_get(ours, "lr_scheduler");
        if (lrs && (st = lr_state_load(path, &ctx->sched, lrs))) return st;
        lr_restored = lrs != NULL;
        note_flag_changes(ctx, json_object_get(ours, "flags"));
    }
    if (step < 0 || step >= INT_MAX || consumed < 0)
        return it_error(IT_ERR_FORMAT, "%s: global_step %lld / consumed_batches %lld", path, (long long)step,
                        (long long)consumed);
    /* steps taken and batches consumed go together: one without the other is a state edited or
     * written by something else (a run resumed with another --total_batch_size changes their
     * ratio, so only this is checked) */
    if (ours && !model_only && (step == 0) != (consumed == 0))
        return it_error(IT_ERR_FORMAT,
                        "%s: global_step %lld but consumed_batches_all_ranks %lld: one says steps were "
                        "taken, the other not",
                        path, (long long)step, (long long)consumed);
    if (consumed % ctx->data_world != 0)
        return it_error(IT_ERR_INVALID_ARG, "%s: %lld consumed batches do not divide among %d data-parallel ranks",
                        path, (long long)consumed, ctx->data_world);
    if (c->optimizer != IT_OPTIM_SGD && c->load_optimizer_state && !model_only &&
        (st = load_optimizer(ctx, ctx->resume_dir)))
        return st;
    it_loader_set_step(ctx->loader, consumed / ctx->data_world); /* no token of the skipped batches is read */
    ctx->start_step = (int)step;
    /* a checkpoint without the scheduler's state (InfiniTrain master's, a model alone): the
     * schedule is a function of the step, so replay it to the step */
    if (!lr_restored) it_lr_scheduler_advance(&ctx->sched, step);
    if (!ctx->quiet)
        printf("resumed from %s: step %lld, %lld batches consumed%s\n", ctx->load_dir, (long long)step,
               (long long)consumed,
               step >= c->num_iteration ? " (nothing left to train: --num_iteration is not beyond it)" : "");
    return IT_OK;
}

void train_ckpt_release(it_train_ctx *ctx) {
    json_decref(ctx->resume);
    free(ctx->resume_dir);
    free(ctx->resumed_from);
    free(ctx->load_dir);
    ctx->load_dir = NULL;
    ctx->resume = NULL;
    ctx->resume_dir = ctx->resumed_from = NULL;
}

/* ---- a model alone (it-ckpt from-llmc) */

it_status it_ckpt_save_model_dir(it_model *m, const char *app, const char *source, const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) == 0) return it_error(IT_ERR_INVALID_ARG, "%s: exists (not overwritten)", dir);
    if (strlen(dir) > PATH_MAX - 128) return it_error(IT_ERR_INVALID_ARG, "%s: too long a path", dir);
    char tmp[PATH_MAX], path[PATH_MAX];
    path_fmt(tmp, sizeof tmp, "%s.tmp-%ld", dir, (long)getpid());
    if (mkdir(tmp, 0755) != 0) return it_error(IT_ERR_IO, "%s: %s", tmp, strerror(errno));
    it_tensor *params = it_model_params(m);
    float *flat = malloc(it_tensor_nbytes(params));
    items it = {0};
    json_t *files = json_object(), *root = NULL;
    it_status st = flat ? it_tensor_copy_to_host(params, flat, it_tensor_nbytes(params))
                        : it_error(IT_ERR_OOM, "%s: out of host memory", dir);
    if (!st) st = model_items(m, flat, &it);
    path_fmt(path, sizeof path, "%s/model.ckpt", tmp);
    if (!st) st = it_ckpt_write(path, it.v, it.n, NULL, NULL);
    if (!st) st = file_json(files, tmp, "model.ckpt");
    if (!st) {
        const it_model_info *info = it_model_get_info(m);
        json_t *ours = json_pack("{s:i,s:s,s:{s:s?},s:O}", "format", CKPT_FORMAT, "app", app, "flags", "llmc_filepath",
                                 source, "files", files);
        root = json_pack("{s:i,s:i,s:i,s:i,s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:o}", "n_layer", info->n_layer, "n_head",
                         info->n_head, "n_kv_head", info->n_kv_head ? info->n_kv_head : info->n_head, "n_embd",
                         info->n_embd, "vocab_size", (json_int_t)info->vocab_size, "global_step", 0, "consumed_batches",
                         0, "ddp_size", 1, "tp_size", 1, "sp_size", 1, "pp_size", 1, "infinitrain_c", ours);
        char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        path_fmt(path, sizeof path, "%s/trainer_state.json", tmp);
        st = text ? write_text(path, text) : it_error(IT_ERR_OOM, "%s: out of host memory", dir);
        free(text);
    }
    if (!st) st = fsync_path(tmp, true);
    if (!st && rename(tmp, dir) != 0) st = it_error(IT_ERR_IO, "%s: renaming to %s: %s", tmp, dir, strerror(errno));
    if (st) nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    json_decref(root);
    json_decref(files);
    items_free(&it);
    free(flat);
    return st;
}

/* A checkpoint's trainer_state.json, parsed into *j (the caller decrefs it), with its
 * infinitrain_c object and that object's recorded flags (either may be NULL). */
static it_status state_flags(const char *dir, char *path, size_t n, json_t **j, json_t **ours, json_t **flags) {
    if (strlen(dir) > PATH_MAX - 128) return it_error(IT_ERR_INVALID_ARG, "%s: too long a path", dir);
    path_fmt(path, n, "%s/trainer_state.json", dir);
    it_status st = parse_state(path, j);
    if (st) return st;
    *ours = json_object_get(*j, "infinitrain_c");
    *flags = *ours ? json_object_get(*ours, "flags") : NULL;
    return IT_OK;
}

/* The app and the llm.c file a checkpoint's model came from, as its trainer_state.json says. */
it_status it_ckpt_origin(const char *dir, char *app, size_t napp, char *source, size_t nsource) {
    char path[PATH_MAX];
    json_t *j = NULL, *ours, *flags;
    it_status st = state_flags(dir, path, sizeof path, &j, &ours, &flags);
    if (st) return st;
    const char *a = NULL, *s = NULL;
    if (!ours || (st = get_str(path, ours, "app", &a)))
        st = it_error(IT_ERR_FORMAT, "%s: no infinitrain_c.app: not written by this project", path);
    json_t *sv = flags ? json_object_get(flags, "llmc_filepath") : NULL;
    if (json_is_string(sv)) s = json_string_value(sv);
    if (!st) {
        snprintf(app, napp, "%s", a);
        snprintf(source, nsource, "%s", s ? s : "");
    }
    json_decref(j);
    return st;
}

it_status it_ckpt_origin_hf(const char *dir, char *hf, size_t n) {
    char path[PATH_MAX];
    json_t *j = NULL, *ours, *flags;
    it_status st = state_flags(dir, path, sizeof path, &j, &ours, &flags);
    if (st) return st;
    json_t *v = flags ? json_object_get(flags, "hf_model") : NULL;
    snprintf(hf, n, "%s", json_is_string(v) ? json_string_value(v) : "");
    json_decref(j);
    return IT_OK;
}

/* A recorded flag's value as text ("" when absent). */
static const char *flag_text(json_t *flags, const char *name) {
    json_t *v = flags ? json_object_get(flags, name) : NULL;
    return json_is_string(v) ? json_string_value(v) : "";
}

/* A GPT-2 built from scratch: its preset and sizing flags as the run recorded them. */
static it_status scratch_gpt2(const char *path, json_t *flags, it_device dev, it_model **m) {
    it_gpt2_config cfg;
    const char *model = flag_text(flags, "model");
    it_status st = it_gpt2_preset(*model ? model : "d12", &cfg);
    if (st) return it_error_context("%s: flags.model: ", path);
    struct {
        const char *name;
        int *field;
    } sizes[] = {{"n_layer", &cfg.n_layer},
                 {"n_head", &cfg.n_head},
                 {"n_embd", &cfg.n_embd},
                 {"block_size", &cfg.block_size},
                 {"vocab_size", &cfg.vocab_size}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = flag_text(flags, sizes[i].name);
        char *end;
        long n = strtol(v, &end, 10);
        if (!*v || n == 0) continue; /* the preset's */
        if (*end || n < 0 || n > INT_MAX)
            return it_error(IT_ERR_FORMAT, "%s: flags.%s: \"%s\" is not a size", path, sizes[i].name, v);
        *sizes[i].field = (int)n;
        if (sizes[i].field == &cfg.vocab_size) cfg.padded_vocab_size = (cfg.vocab_size + 63) / 64 * 64;
    }
    return it_gpt2_new(&cfg, dev, 0, m);
}

it_status it_ckpt_model_new(const char *dir, it_device dev, it_model **out) {
    *out = NULL;
    char path[PATH_MAX];
    json_t *j = NULL, *ours, *flags;
    it_status st = state_flags(dir, path, sizeof path, &j, &ours, &flags);
    if (st) return st;
    const char *app = NULL;
    if (!ours || get_str(path, ours, "app", &app)) {
        json_decref(j);
        return it_error(IT_ERR_FORMAT, "%s: no infinitrain_c.app: not written by this project", path);
    }
    const char *hf = flag_text(flags, "hf_model"), *llmc = flag_text(flags, "llmc_filepath");
    it_model *m = NULL;
    bool gpt2 = strcmp(app, "gpt2") == 0;
    if (!it_model_family_known(app)) {
        st =
            it_error(IT_ERR_FORMAT, "%s: infinitrain_c.app \"%s\": expected gpt2, llama3, mixtral or qwen3", path, app);
    } else if (*hf) {
        if ((st = it_hf_load(hf, dev, NULL, &m))) it_error_context("%s: the run's --hf_model: ", path);
    } else if (*llmc) {
        if ((st = it_model_load_family(app, llmc, dev, NULL, &m)))
            it_error_context("%s: the run's --llmc_filepath (it gives the model's shape): ", path);
    } else if (gpt2) {
        st = scratch_gpt2(path, flags, dev, &m);
    } else {
        st = it_error(IT_ERR_FORMAT, "%s: a %s run with neither --llmc_filepath nor --hf_model recorded", path, app);
    }
    /* a LoRA run's checkpoint: its adapters, as trainer_state.json describes them */
    json_t *l = st ? NULL : json_object_get(ours, "lora");
    if (l) {
        int64_t rank = 0;
        const char *targets = NULL;
        json_t *a = json_object_get(l, "alpha");
        if (!(st = get_int(path, l, "rank", 0, &rank)) && !(st = get_str(path, l, "target_modules", &targets)) &&
            !json_is_number(a))
            st = it_error(IT_ERR_FORMAT, "%s: infinitrain_c.lora.alpha is not a number", path);
        if (!st) {
            it_lora_config lc = {(int)rank, (float)json_number_value(a), targets, 0};
            st = it_model_lora_apply(m, &lc);
        }
    }
    json_decref(j);
    if (!st) st = it_ckpt_load_model_dir(m, dir, true);
    if (st) {
        it_model_free(m);
        return st;
    }
    *out = m;
    return IT_OK;
}
