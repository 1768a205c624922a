/* InfiniTrain's command-line flags: `--name value` or `--name=value`. Every error names
 * the flag and the value, on one line. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/train.h"

void it_train_config_defaults(it_train_config *c, const char *app) {
    memset(c, 0, sizeof *c);
    c->app = app;
    c->device = "cpu";
    c->model = "d12";
    c->batch_size = 4;
    c->sequence_length = 64;
    c->total_batch_size = 0; /* = B*T */
    c->num_iteration = 10;
    c->learning_rate = 1e-4f;
    c->optimizer = IT_OPTIM_SGD;
    c->lr_decay = IT_LR_NONE;
    c->dtype = IT_DTYPE_FP32;
    c->text_length = 64;
    c->seed = 42;
    c->log_interval = 10;
    c->ddp_bucket_kb = 25600;
    /* InfiniTrain's per-app defaults */
    if (strcmp(app, "llama3") == 0) {
        c->optimizer = IT_OPTIM_ADAM;
        c->learning_rate = 1e-5f;
    } else if (strcmp(app, "mixtral") == 0) {
        c->optimizer = IT_OPTIM_ADAM;
        c->learning_rate = 1e-4f;
    }
}

static it_status parse_i64(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno) return it_error(IT_ERR_INVALID_ARG, "--%s: '%s' is not an integer", flag, v);
    if (x < lo || x > hi)
        return it_error(IT_ERR_INVALID_ARG, "--%s: %lld is out of range %lld..%lld", flag, x, (long long)lo,
                        (long long)hi);
    *out = x;
    return IT_OK;
}

static it_status parse_int(const char *flag, const char *v, int lo, int hi, int *out) {
    int64_t x;
    it_status st = parse_i64(flag, v, lo, hi, &x);
    if (!st) *out = (int)x;
    return st;
}

static it_status parse_float(const char *flag, const char *v, double lo, double hi, float *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x))
        return it_error(IT_ERR_INVALID_ARG, "--%s: '%s' is not a finite number", flag, v);
    if (x < lo || x > hi) return it_error(IT_ERR_INVALID_ARG, "--%s: %g is out of range %g..%g", flag, x, lo, hi);
    *out = (float)x;
    return IT_OK;
}

void it_train_print_help(const char *app, FILE *f) {
    fprintf(f,
            "usage: %s [flags]   (flags take `--name value` or `--name=value`)\n"
            "  --device NAME[:I]         backend device: cpu, sim:1, mlu:0, ... (cpu)\n"
            "  --input_bin PATH          llm.c token shard to train on (required)\n"
            "  --llmc_filepath PATH      llm.c checkpoint to start from (otherwise a new model)\n"
            "  --model NAME              preset when no checkpoint: d12, d24, d36, d48 (d12)\n"
            "  --n_layer/--n_head/--n_embd/--block_size/--vocab_size N\n"
            "                            a custom model shape instead of a preset\n"
            "  --batch_size B            sequences per micro-step (4)\n"
            "  --sequence_length T       tokens per sequence, <= block_size (64)\n"
            "  --total_batch_size N      tokens per step; accumulation = N/(B*T) (B*T)\n"
            "  --num_iteration N         training steps (10)\n"
            "  --learning_rate LR        (gpt2 1e-4, llama3 1e-5, mixtral 1e-4)\n"
            "  --optimizer sgd|adam|adamw (gpt2 sgd, llama3 and mixtral adam)\n"
            "  --weight_decay WD         adam: L2 in the gradient; adamw: decoupled (0)\n"
            "  --lr_decay_style none|linear|cosine (none)\n"
            "  --lr_warmup_iters N       linear warmup steps (0)\n"
            "  --min_lr LR               learning rate at the end of decay (0)\n"
            "  --grad_clip G             clip the global gradient norm to G, 0 = off (0)\n"
            "  --dtype float32|bfloat16  training dtype: bfloat16 = autocast, matmuls in bf16 (float32)\n"
            "  --tokenizer_bin PATH      llm.c tokenizer file, to print generated text\n"
            "  --freq_generate_txt N     sample text every N steps, 0 = never (0)\n"
            "  --text_length N           tokens per sample (64)\n"
            "  --seed N                  initialization and sampling seed (42)\n"
            "  --output_checkpoint PATH  write the trained model (llm.c format) at the end\n"
            "  --log_interval N          progress/ETA line every N steps (10)\n"
            "  --max_memory_mb N         device allocator limit in MiB, 0 = none (0)\n"
            "  --backend_report          print each kernel slot: native or CPU fallback, calls, time\n"
            "  --moe_aux_loss_coeff C    mixtral: weight of the load-balancing loss (0)\n"
            "  --zero_stage 0|1          data-parallel runs: 1 shards Adam's state over the ranks (0)\n"
            "  --ddp_bucket_kb N         data-parallel runs: gradient all-reduce bucket size in KiB (25600)\n"
            "  --loss_log PATH           write each step's loss at full precision (%%.17g), rank 0\n"
            "  --help                    this text\n"
            "data parallelism: mpirun -np N %s ... runs N ranks, one device each (--device sim gives\n"
            "rank r sim:(r mod count)); --total_batch_size counts all ranks' tokens\n",
            app, app);
}

it_status it_train_parse_args(it_train_config *c, int argc, char **argv, bool *help) {
    *help = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0)
            return it_error(IT_ERR_INVALID_ARG, "unexpected argument '%s' (flags start with --; see --help)", arg);
        char name[64];
        const char *eq = strchr(arg, '=');
        size_t nl = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (nl == 0 || nl >= sizeof name) return it_error(IT_ERR_INVALID_ARG, "malformed flag '%s'", arg);
        memcpy(name, arg + 2, nl);
        name[nl] = '\0';
        if (strcmp(name, "help") == 0) {
            *help = true;
            return IT_OK;
        }
        if (strcmp(name, "quiet") == 0) {
            c->quiet = true;
            continue;
        }
        if (strcmp(name, "backend_report") == 0 && !eq) {
            c->backend_report = true;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) return it_error(IT_ERR_INVALID_ARG, "--%s: missing value", name);
            v = argv[++i];
        }
        it_status st = IT_OK;
        int64_t i64;
#define IS(n) (strcmp(name, n) == 0)
        if (IS("device"))
            c->device = v;
        else if (IS("input_bin"))
            c->input_bin = v;
        else if (IS("llmc_filepath"))
            c->llmc_filepath = v;
        else if (IS("model"))
            c->model = v;
        else if (IS("tokenizer_bin"))
            c->tokenizer_bin = v;
        else if (IS("output_checkpoint"))
            c->output_checkpoint = v;
        else if (IS("loss_log"))
            c->loss_log = v;
        else if (IS("zero_stage"))
            st = parse_int(name, v, 0, 1, &c->zero_stage);
        else if (IS("ddp_bucket_kb"))
            st = parse_i64(name, v, 1, (int64_t)1 << 30, &c->ddp_bucket_kb);
        else if (IS("n_layer"))
            st = parse_int(name, v, 1, 1024, &c->n_layer);
        else if (IS("n_head"))
            st = parse_int(name, v, 1, 1024, &c->n_head);
        else if (IS("n_embd"))
            st = parse_int(name, v, 1, 65536, &c->n_embd);
        else if (IS("block_size"))
            st = parse_int(name, v, 1, 1 << 20, &c->block_size);
        else if (IS("vocab_size"))
            st = parse_int(name, v, 1, 1 << 24, &c->vocab_size);
        else if (IS("batch_size"))
            st = parse_i64(name, v, 1, 1 << 20, &c->batch_size);
        else if (IS("sequence_length"))
            st = parse_i64(name, v, 1, 1 << 20, &c->sequence_length);
        else if (IS("total_batch_size"))
            st = parse_i64(name, v, 1, (int64_t)1 << 40, &c->total_batch_size);
        else if (IS("num_iteration"))
            st = parse_int(name, v, 0, INT_MAX, &c->num_iteration);
        else if (IS("learning_rate"))
            st = parse_float(name, v, 0.0, 1e3, &c->learning_rate);
        else if (IS("weight_decay"))
            st = parse_float(name, v, 0.0, 1e3, &c->weight_decay);
        else if (IS("min_lr"))
            st = parse_float(name, v, 0.0, 1e3, &c->min_lr);
        else if (IS("grad_clip"))
            st = parse_float(name, v, 0.0, 1e9, &c->grad_clip);
        else if (IS("moe_aux_loss_coeff"))
            st = parse_float(name, v, 0.0, 1e3, &c->moe_aux_loss_coeff);
        else if (IS("lr_warmup_iters"))
            st = parse_int(name, v, 0, INT_MAX, &c->lr_warmup_iters);
        else if (IS("freq_generate_txt"))
            st = parse_int(name, v, 0, INT_MAX, &c->freq_generate_txt);
        else if (IS("text_length"))
            st = parse_int(name, v, 1, 1 << 20, &c->text_length);
        else if (IS("log_interval"))
            st = parse_int(name, v, 1, INT_MAX, &c->log_interval);
        else if (IS("max_memory_mb"))
            st = parse_i64(name, v, 0, (int64_t)1 << 40, &c->max_memory_mb);
        else if (IS("seed")) {
            st = parse_i64(name, v, 0, INT64_MAX, &i64);
            c->seed = (uint64_t)i64;
        } else if (IS("optimizer")) {
            st = it_optim_kind_from_name(v, &c->optimizer);
            if (st) st = it_error_context("--optimizer: ");
        } else if (IS("lr_decay_style")) {
            st = it_lr_decay_from_name(v, &c->lr_decay);
            if (st) st = it_error_context("--lr_decay_style: ");
        } else if (IS("dtype")) {
            if (strcmp(v, "float32") == 0 || strcmp(v, "fp32") == 0)
                c->dtype = IT_DTYPE_FP32;
            else if (strcmp(v, "bfloat16") == 0 || strcmp(v, "bf16") == 0)
                c->dtype = IT_DTYPE_BF16; /* autocast: matmuls in bf16, the rest and the weights fp32 */
            else if (strcmp(v, "float16") == 0 || strcmp(v, "fp16") == 0)
                st = it_error(IT_ERR_UNSUPPORTED,
                              "--dtype: float16 training needs loss scaling, not implemented; use bfloat16 or float32");
            else
                st = it_error(IT_ERR_INVALID_ARG, "--dtype: '%s' is not a training dtype (float32, bfloat16)", v);
        } else {
            return it_error(IT_ERR_INVALID_ARG, "unknown flag --%s (see --help)", name);
        }
#undef IS
        if (st) return st;
    }
    return IT_OK;
}
