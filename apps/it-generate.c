/* it-generate: a prompt in, text out, over a KV cache (src/generate/generate.c).
 *
 *   it-generate (--llmc_filepath FILE | --hf_model DIR | --load CKPT_DIR) [--tokenizer PATH]
 *               [--prompt TEXT ...] [--prompt_file FILE] [--prompt_ids 1,2,3 ...] [options]
 *
 * Without --prompt, --prompt_file or --prompt_ids the prompt is standard input. Several prompts
 * run as a batch (prompts of one token length share each forward); one prompt streams its
 * text as the tokens come. The numbers go to standard error: prompt and new tokens, the
 * prompt's forward and the decoding rate in tokens per second.
 *
 * Exit status: 0 done, 2 bad arguments or input, 1 other failures. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/data.h"
#include "infinitrain/generate.h"
#include "infinitrain/hf.h"
#include "train/train_internal.h"

#define MAX_ITEMS 256

typedef struct options {
    const char *llmc, *hf, *load, *tokenizer, *prompt_file, *device;
    const char *prompts[MAX_ITEMS], *prompt_ids[MAX_ITEMS], *stops[MAX_ITEMS];
    int n_prompts, n_prompt_ids, n_stops;
    const char *lora_path, *lora_targets;
    int lora_rank;
    float lora_alpha;
    int64_t max_new_tokens;
    it_sampling sampling;
    int bos; /* -1: the tokenizer's choice */
    bool stream;
} options;

static int usage(FILE *f) {
    fputs("usage: it-generate (--llmc_filepath FILE | --hf_model DIR | --load CKPT_DIR) [options]\n"
          "model:\n"
          "  --llmc_filepath FILE     an llm.c GPT-2, LLaMA-3 or Mixtral file\n"
          "  --hf_model DIR           a Hugging Face model directory (its tokenizer too)\n"
          "  --load DIR               a checkpoint_step_NNNNNN directory of a training run\n"
          "  --lora_load_path PATH    adapters: InfiniTrain's file (with --lora_rank) or a PEFT directory\n"
          "  --lora_rank R            the adapters' rank (a PEFT directory's adapter_config.json gives it)\n"
          "  --lora_alpha A           their alpha (16; a PEFT directory's by default)\n"
          "  --lora_target_modules L  the adapted modules (the app's default list)\n"
          "  --device NAME            backend and device (cpu)\n"
          "text:\n"
          "  --tokenizer PATH         llm.c tokenizer .bin, tiktoken rank file or tokenizer.json\n"
          "                           (default: the --hf_model directory's)\n"
          "  --prompt TEXT            a prompt; repeat for a batch (default: standard input)\n"
          "  --prompt_file FILE       one prompt a line\n"
          "  --prompt_ids 1,2,3       a prompt as token ids (a model without a tokenizer); repeatable\n"
          "  --bos true|false         put the tokenizer's begin-of-text token first (true where it has one)\n"
          "  --stop TEXT              end a row when its text contains TEXT (not printed); repeatable\n"
          "  --stream true|false      print one prompt's text as it comes (true)\n"
          "sampling:\n"
          "  --max_new_tokens N       new tokens per prompt (64)\n"
          "  --temperature T          0 = greedy (0.8)\n"
          "  --top_k K                keep the K most probable ids, 0 = all (40)\n"
          "  --top_p P                then the fewest ids holding P of the mass, 1 = all (0.95)\n"
          "  --seed N                 the draws' seed (42)\n",
          f);
    return f == stdout ? 0 : 2;
}

static it_status parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        return it_error(IT_ERR_INVALID_ARG, "--%s: \"%s\": expected an integer in %lld..%lld", flag, v, (long long)lo,
                        (long long)hi);
    *out = n;
    return IT_OK;
}

static it_status parse_f(const char *flag, const char *v, double lo, double hi, float *out) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi))
        return it_error(IT_ERR_INVALID_ARG, "--%s: \"%s\": expected a number in %g..%g", flag, v, lo, hi);
    *out = (float)x;
    return IT_OK;
}

static it_status parse_bool(const char *flag, const char *v, bool *out) {
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) return *out = true, IT_OK;
    if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) return *out = false, IT_OK;
    return it_error(IT_ERR_INVALID_ARG, "--%s: \"%s\": expected true or false", flag, v);
}

static it_status push(const char *flag, const char **list, int *n, const char *v) {
    if (*n == MAX_ITEMS) return it_error(IT_ERR_INVALID_ARG, "--%s: more than %d given", flag, MAX_ITEMS);
    list[(*n)++] = v;
    return IT_OK;
}

static it_status parse_args(options *o, int argc, char **argv, bool *help) {
    *o = (options){.device = "cpu",
                   .lora_alpha = -1,
                   .max_new_tokens = 64,
                   .sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 42},
                   .bos = -1,
                   .stream = true};
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return *help = true, IT_OK;
        if (strncmp(a, "--", 2) != 0) return it_error(IT_ERR_INVALID_ARG, "\"%s\": expected a --flag", a);
        const char *f = a + 2;
        if (i + 1 >= argc) return it_error(IT_ERR_INVALID_ARG, "--%s: needs a value", f);
        const char *v = argv[++i];
        int64_t n;
        bool b;
        it_status st = IT_OK;
        if (strcmp(f, "llmc_filepath") == 0)
            o->llmc = v;
        else if (strcmp(f, "hf_model") == 0)
            o->hf = v;
        else if (strcmp(f, "load") == 0)
            o->load = v;
        else if (strcmp(f, "tokenizer") == 0)
            o->tokenizer = v;
        else if (strcmp(f, "device") == 0)
            o->device = v;
        else if (strcmp(f, "prompt") == 0)
            st = push(f, o->prompts, &o->n_prompts, v);
        else if (strcmp(f, "prompt_ids") == 0)
            st = push(f, o->prompt_ids, &o->n_prompt_ids, v);
        else if (strcmp(f, "stop") == 0)
            st = *v ? push(f, o->stops, &o->n_stops, v) : it_error(IT_ERR_INVALID_ARG, "--stop: an empty string");
        else if (strcmp(f, "prompt_file") == 0)
            o->prompt_file = v;
        else if (strcmp(f, "lora_load_path") == 0)
            o->lora_path = v;
        else if (strcmp(f, "lora_target_modules") == 0)
            o->lora_targets = v;
        else if (strcmp(f, "lora_rank") == 0)
            st = parse_i64(f, v, 1, 1 << 16, &n), o->lora_rank = (int)n;
        else if (strcmp(f, "lora_alpha") == 0)
            st = parse_f(f, v, -1e6, 1e6, &o->lora_alpha);
        else if (strcmp(f, "max_new_tokens") == 0)
            st = parse_i64(f, v, 0, 1 << 24, &o->max_new_tokens);
        else if (strcmp(f, "temperature") == 0)
            st = parse_f(f, v, 0, 100, &o->sampling.temperature);
        else if (strcmp(f, "top_k") == 0)
            st = parse_i64(f, v, 0, 1 << 30, &n), o->sampling.top_k = (int)n;
        else if (strcmp(f, "top_p") == 0)
            st = parse_f(f, v, 0, 1, &o->sampling.top_p);
        else if (strcmp(f, "seed") == 0)
            st = parse_i64(f, v, 0, INT64_MAX, &n), o->sampling.seed = (uint64_t)n;
        else if (strcmp(f, "bos") == 0)
            st = parse_bool(f, v, &b), o->bos = b;
        else if (strcmp(f, "stream") == 0)
            st = parse_bool(f, v, &o->stream);
        else
            return it_error(IT_ERR_INVALID_ARG, "--%s: unknown flag (see --help)", f);
        if (st) return st;
    }
    if (!!o->llmc + !!o->hf + !!o->load != 1)
        return it_error(IT_ERR_INVALID_ARG, "give one model: --llmc_filepath FILE, --hf_model DIR or --load DIR");
    if (o->n_prompt_ids && (o->n_prompts || o->prompt_file))
        return it_error(IT_ERR_INVALID_ARG, "--prompt_ids and --prompt/--prompt_file: give prompts one way");
    if ((o->lora_rank || o->lora_targets) && !o->lora_path)
        return it_error(IT_ERR_INVALID_ARG, "--lora_rank / --lora_target_modules: need --lora_load_path");
    return IT_OK;
}

/* ---- the model */

static it_status load_lora(const options *o, it_model *m) {
    if (!o->lora_path) return IT_OK;
    if (it_model_has_lora(m))
        return it_error(IT_ERR_INVALID_ARG, "--lora_load_path: the checkpoint's model already has adapters");
    bool peft = it_hf_lora_is_peft(o->lora_path);
    int rank = o->lora_rank;
    double alpha = o->lora_alpha;
    it_status st;
    if (peft && (!rank || alpha < 0)) {
        int r;
        double a;
        if ((st = it_hf_lora_config(o->lora_path, &r, &a))) return st;
        if (!rank) rank = r;
        if (alpha < 0) alpha = a;
    }
    if (!rank) return it_error(IT_ERR_INVALID_ARG, "--lora_load_path %s: give its --lora_rank", o->lora_path);
    const char *targets =
        o->lora_targets ? o->lora_targets : it_model_lora_default_targets(it_model_get_info(m)->family);
    it_lora_config lc = {rank, alpha < 0 ? 16.0f : (float)alpha, targets, 0};
    if ((st = it_model_lora_apply(m, &lc))) return it_error_context("--lora_load_path: ");
    st = peft ? it_hf_lora_load(m, o->lora_path) : it_model_lora_load(m, o->lora_path);
    return st ? it_error_context("--lora_load_path: ") : IT_OK;
}

static it_status load_model(const options *o, it_model **m) {
    it_device dev;
    it_status st = it_device_parse(o->device, &dev);
    if (st) return it_error_context("--device: ");
    if (o->hf)
        st = it_hf_load(o->hf, dev, NULL, m);
    else if (o->llmc)
        st = it_model_load(o->llmc, dev, m);
    else
        st = it_ckpt_model_new(o->load, dev, m);
    if (st) return it_error_context("--%s: ", o->hf ? "hf_model" : o->llmc ? "llmc_filepath" : "load");
    return load_lora(o, *m);
}

/* The tokenizer: --tokenizer, else the --hf_model directory's (or that of the run --load
 * names); none is fine with --prompt_ids. */
static it_status open_tokenizer(const options *o, it_tokenizer **tok) {
    *tok = NULL;
    char hf[4096] = "";
    const char *path = o->tokenizer ? o->tokenizer : o->hf;
    if (!path && o->load && !it_ckpt_origin_hf(o->load, hf, sizeof hf) && *hf) path = hf;
    if (!path) {
        if (o->n_prompt_ids) return IT_OK;
        return it_error(IT_ERR_INVALID_ARG,
                        "no tokenizer for the text: give --tokenizer PATH, or the prompt as --prompt_ids 1,2,3");
    }
    it_status st = it_tokenizer_open(path, tok);
    if (st && !o->tokenizer && o->n_prompt_ids) { /* the model's directory has none: ids are enough */
        it_error_clear();
        return IT_OK;
    }
    if (st) return it_error_context("--tokenizer: ");
    if (!o->n_prompt_ids && !it_tokenizer_can_encode(*tok))
        return it_error(IT_ERR_INVALID_ARG,
                        "--tokenizer %s decodes only (llm.c's .bin); give a tokenizer.json or tiktoken file to "
                        "encode the prompt, or --prompt_ids",
                        path);
    return IT_OK;
}

/* ---- prompts */

typedef struct prompt {
    uint32_t *ids;
    int64_t n;
    int index; /* its place among the prompts given */
    /* what it gave: the new text (with a tokenizer) or the new ids */
    char *text;
    size_t text_len;
    uint32_t *out;
    int64_t n_out;
} prompt;

static it_status read_all(FILE *f, const char *what, char **text, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    if (!buf) return it_error(IT_ERR_OOM, "%s: out of host memory", what);
    if (ferror(f)) {
        free(buf);
        return it_error(IT_ERR_IO, "%s: read error", what);
    }
    buf[n] = 0;
    *text = buf, *len = n;
    return IT_OK;
}

static it_status parse_ids(const char *text, int64_t vocab, prompt *p) {
    size_t n = 1;
    for (const char *c = text; *c; c++) n += *c == ',';
    p->ids = malloc(n * sizeof *p->ids);
    p->n = 0;
    if (!p->ids) return it_error(IT_ERR_OOM, "--prompt_ids: out of host memory");
    for (const char *c = text; *c;) {
        char *end;
        errno = 0;
        long long v = strtoll(c, &end, 10);
        if (errno || end == c || v < 0 || v >= vocab || (*end && *end != ','))
            return it_error(IT_ERR_INVALID_ARG, "--prompt_ids \"%s\": expected ids in 0..%lld separated by commas",
                            text, (long long)vocab - 1);
        p->ids[p->n++] = (uint32_t)v;
        c = *end ? end + 1 : end;
    }
    return p->n ? IT_OK : it_error(IT_ERR_INVALID_ARG, "--prompt_ids: empty");
}

static it_status encode(it_tokenizer *tok, bool bos, const char *text, size_t len, prompt *p) {
    uint32_t *ids = NULL;
    size_t n = 0;
    it_status st = it_tokenizer_encode(tok, text, len, &ids, &n);
    if (st) return st;
    int64_t b = bos ? it_tokenizer_bos(tok) : -1;
    p->ids = malloc((n + 1) * sizeof *p->ids);
    if (!p->ids) {
        free(ids);
        return it_error(IT_ERR_OOM, "prompt: out of host memory");
    }
    p->n = 0;
    if (b >= 0) p->ids[p->n++] = (uint32_t)b;
    if (n) memcpy(p->ids + p->n, ids, n * sizeof *ids);
    p->n += (int64_t)n;
    free(ids);
    return p->n ? IT_OK : it_error(IT_ERR_INVALID_ARG, "an empty prompt (and no begin-of-text token to start from)");
}

/* Every prompt, as ids. */
static it_status gather_prompts(const options *o, it_tokenizer *tok, int64_t vocab, prompt **out, int *count) {
    bool bos = o->bos != 0 && tok && it_tokenizer_bos(tok) >= 0;
    if (o->bos == 1 && !(tok && it_tokenizer_bos(tok) >= 0))
        return it_error(IT_ERR_INVALID_ARG, "--bos true: the tokenizer has no begin-of-text token");
    char *file = NULL;
    size_t flen = 0;
    it_status st = IT_OK;
    if (o->prompt_file) {
        FILE *f = fopen(o->prompt_file, "rb");
        if (!f) return it_error(IT_ERR_IO, "--prompt_file %s: %s", o->prompt_file, strerror(errno));
        st = read_all(f, o->prompt_file, &file, &flen);
        fclose(f);
    } else if (!o->n_prompts && !o->n_prompt_ids) {
        st = read_all(stdin, "standard input", &file, &flen);
        while (!st && flen && (file[flen - 1] == '\n' || file[flen - 1] == '\r')) file[--flen] = 0; /* echo's */
    }
    int lines = 0;
    if (o->prompt_file)
        for (size_t i = 0; i < flen; i++) lines += file[i] == '\n';
    int cap = o->n_prompts + o->n_prompt_ids + lines + 2;
    prompt *p = st ? NULL : calloc((size_t)cap, sizeof *p);
    if (!st && !p) st = it_error(IT_ERR_OOM, "prompts: out of host memory");
    int n = 0;
    for (int i = 0; !st && i < o->n_prompt_ids; i++) st = parse_ids(o->prompt_ids[i], vocab, &p[n++]);
    for (int i = 0; !st && i < o->n_prompts; i++) st = encode(tok, bos, o->prompts[i], strlen(o->prompts[i]), &p[n++]);
    if (!st && o->prompt_file) {
        for (char *line = file, *end; !st && line < file + flen; line = end + 1) {
            end = memchr(line, '\n', (size_t)(file + flen - line));
            if (!end) end = file + flen;
            size_t len = (size_t)(end - line);
            if (len && line[len - 1] == '\r') len--;
            if (len && n < cap) st = encode(tok, bos, line, len, &p[n++]);
        }
        if (!st && !n) st = it_error(IT_ERR_INVALID_ARG, "--prompt_file %s: no prompt in it", o->prompt_file);
    } else if (!st && file) {
        st = encode(tok, bos, file, flen, &p[n++]);
    }
    free(file);
    for (int i = 0; i < n; i++) p[i].index = i;
    *out = p, *count = n;
    return st;
}

/* ---- output */

typedef struct row_text {
    char *buf; /* the row's decoded new text */
    size_t len, cap, printed;
    bool stopped;
} row_text;

typedef struct gen_ctx {
    const options *o;
    it_tokenizer *tok;
    int64_t eos[6]; /* ids that end a row (-1: unused) */
    row_text *rows;
    int64_t first; /* the batch's first prompt index */
    bool stream;
    size_t hold; /* bytes a stop string could still be completing */
} gen_ctx;

static void emit(gen_ctx *g, row_text *r, size_t upto) {
    if (g->stream && upto > r->printed) {
        fwrite(r->buf + r->printed, 1, upto - r->printed, stdout);
        fflush(stdout);
    }
    if (upto > r->printed) r->printed = upto;
}

/* A new token of a row: end of text, or its bytes appended and checked for stop strings. */
static bool on_token(void *ctx, int64_t row, int64_t step, uint32_t token) {
    gen_ctx *g = ctx;
    (void)step;
    row_text *r = &g->rows[row];
    if (!g->tok) return false;
    for (int i = 0; i < 6; i++)
        if ((int64_t)token == g->eos[i]) return r->stopped = true;
    size_t n = 0;
    const char *bytes = it_tokenizer_decode(g->tok, token, &n);
    if (!bytes) return false;
    if (r->len + n + 1 > r->cap) {
        size_t cap = (r->len + n + 1) * 2;
        char *b = realloc(r->buf, cap);
        if (!b) return true;
        r->buf = b, r->cap = cap;
    }
    memcpy(r->buf + r->len, bytes, n);
    r->len += n;
    r->buf[r->len] = 0;
    size_t cut = r->len;
    for (int i = 0; i < g->o->n_stops; i++) {
        const char *at = strstr(r->buf, g->o->stops[i]); /* text with a NUL byte in it stops early: harmless */
        if (at && (size_t)(at - r->buf) < cut) cut = (size_t)(at - r->buf);
    }
    if (cut < r->len) {
        r->len = cut;
        emit(g, r, cut);
        return r->stopped = true;
    }
    emit(g, r, r->len > g->hold ? r->len - g->hold : 0);
    return false;
}

static void print_ids(const uint32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) printf("%s%u", i ? "," : "", ids[i]);
    putchar('\n');
}

/* Prompts [lo, hi) (one token length) as one batch. */
static it_status run_batch(it_model *m, gen_ctx *g, prompt *p, int lo, int hi, int total, it_generate_result *sum) {
    int64_t B = hi - lo, T = p[lo].n, want = g->o->max_new_tokens;
    uint32_t *ids = malloc((size_t)(B * T) * sizeof *ids), *out = malloc((size_t)(B * (want ? want : 1)) * sizeof *out);
    int64_t *n_out = calloc((size_t)B, sizeof *n_out);
    g->rows = calloc((size_t)B, sizeof *g->rows);
    it_status st = ids && out && n_out && g->rows ? IT_OK : it_error(IT_ERR_OOM, "out of host memory");
    for (int64_t b = 0; !st && b < B; b++) memcpy(ids + b * T, p[lo + b].ids, (size_t)T * sizeof *ids);
    g->stream = g->o->stream && total == 1 && g->tok;
    it_generate_options go = {.max_new_tokens = want, .sampling = g->o->sampling, .on_token = on_token, .ctx = g};
    it_generate_result r = {0};
    if (!st) st = it_generate(m, ids, B, T, &go, out, n_out, &r);
    for (int64_t b = 0; !st && b < B; b++) { /* kept for printing in the prompts' order */
        row_text *rt = &g->rows[b];
        prompt *q = &p[lo + b];
        if (g->stream) emit(g, rt, rt->len);
        q->text = rt->buf, q->text_len = rt->len, rt->buf = NULL;
        q->out = malloc((size_t)(n_out[b] ? n_out[b] : 1) * sizeof *q->out);
        if (!q->out)
            st = it_error(IT_ERR_OOM, "out of host memory");
        else
            memcpy(q->out, out + b * want, (size_t)n_out[b] * sizeof *q->out), q->n_out = n_out[b];
    }
    if (!st) {
        sum->new_tokens += r.new_tokens, sum->steps += r.steps;
        sum->prompt_seconds += r.prompt_seconds, sum->decode_seconds += r.decode_seconds;
        sum->hit_block_size |= r.hit_block_size;
    }
    for (int64_t b = 0; g->rows && b < B; b++) free(g->rows[b].buf);
    free(g->rows);
    g->rows = NULL;
    free(ids);
    free(out);
    free(n_out);
    return st;
}

/* By length, then as given. */
static int by_index(const void *a, const void *b) {
    return (((const prompt *)a)->index > ((const prompt *)b)->index) -
           (((const prompt *)a)->index < ((const prompt *)b)->index);
}

static int by_length(const void *a, const void *b) {
    const prompt *x = a, *y = b;
    if (x->n != y->n) return (x->n > y->n) - (x->n < y->n);
    return (x->index > y->index) - (x->index < y->index);
}

static it_status generate_all(const options *o, it_model *m, it_tokenizer *tok, prompt *p, int n) {
    gen_ctx g = {.o = o, .tok = tok, .eos = {-1, -1, -1, -1, -1, -1}};
    if (tok) { /* the end of text (never the begin-of-text a LLaMA-3 shard puts between documents) */
        int64_t eot = it_tokenizer_eot(tok);
        g.eos[0] = eot == it_tokenizer_bos(tok) ? -1 : eot;
        g.eos[1] = it_tokenizer_token_id(tok, "<|end_of_text|>"); /* LLaMA-3 */
        g.eos[2] = it_tokenizer_token_id(tok, "<|endoftext|>");   /* GPT-2, Qwen */
        g.eos[3] = it_tokenizer_token_id(tok, "<|eot_id|>");      /* LLaMA-3 Instruct's end of turn */
        g.eos[4] = it_tokenizer_token_id(tok, "<|im_end|>");      /* Qwen's chat turn */
    }
    for (int i = 0; i < o->n_stops; i++) {
        size_t l = strlen(o->stops[i]);
        if (l > g.hold + 1) g.hold = l - 1;
    }
    /* by length, so that each batch's prompts are one length; each prints its index */
    if (n > 1) qsort(p, (size_t)n, sizeof *p, by_length);
    it_generate_result sum = {0};
    int64_t prompt_tokens = 0;
    it_status st = IT_OK;
    for (int lo = 0, hi; !st && lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && p[hi].n == p[lo].n;) hi++;
        for (int i = lo; i < hi; i++) prompt_tokens += p[i].n;
        st = run_batch(m, &g, p, lo, hi, n, &sum);
    }
    if (st) return st;
    if (n > 1) qsort(p, (size_t)n, sizeof *p, by_index);
    for (int i = 0; i < n; i++) {
        if (n > 1) printf("[%d] ", i);
        if (!tok)
            print_ids(p[i].out, p[i].n_out);
        else if (!(o->stream && n == 1))
            fwrite(p[i].text ? p[i].text : "", 1, p[i].text_len, stdout);
        if (tok) putchar('\n');
    }
    fflush(stdout);
    double dec = sum.decode_seconds;
    fprintf(stderr,
            "it-generate: %d prompt%s, %lld prompt tokens in %.3f s (%.1f tok/s); %lld new tokens, decoding %.1f "
            "tok/s (%.2f ms a step)%s\n",
            n, n == 1 ? "" : "s", (long long)prompt_tokens, sum.prompt_seconds,
            sum.prompt_seconds > 0 ? (double)prompt_tokens / sum.prompt_seconds : 0.0, (long long)sum.new_tokens,
            dec > 0 ? (double)(sum.new_tokens - n) / dec : 0.0, sum.steps ? 1e3 * dec / (double)sum.steps : 0.0,
            sum.hit_block_size ? "; stopped at the model's block_size" : "");
    return IT_OK;
}

int main(int argc, char **argv) {
    options o;
    bool help;
    it_status st = parse_args(&o, argc, argv, &help);
    if (help) return usage(stdout);
    it_model *m = NULL;
    it_tokenizer *tok = NULL;
    prompt *p = NULL;
    int n = 0;
    if (!st) st = load_model(&o, &m);
    if (!st) st = open_tokenizer(&o, &tok);
    if (!st) st = gather_prompts(&o, tok, it_model_get_info(m)->vocab_size, &p, &n);
    if (!st && tok && it_tokenizer_vocab_size(tok) > it_model_get_info(m)->vocab_size)
        fprintf(stderr, "note: the tokenizer has %lld ids, the model %lld\n", (long long)it_tokenizer_vocab_size(tok),
                (long long)it_model_get_info(m)->vocab_size);
    if (!st) st = generate_all(&o, m, tok, p, n);
    for (int i = 0; i < n; i++) free(p[i].ids), free(p[i].text), free(p[i].out);
    free(p);
    it_tokenizer_free(tok);
    it_model_free(m);
    if (st) {
        fprintf(stderr, "it-generate: %s\n", it_last_error());
        /* a path that does not open is a bad argument too */
        return st == IT_ERR_INVALID_ARG || st == IT_ERR_FORMAT || st == IT_ERR_NOT_FOUND || st == IT_ERR_IO ? 2 : 1;
    }
    return 0;
}
