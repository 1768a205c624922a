/* InfiniTrain's command-line flags, from one table. Each entry gives a flag's field, default,
 * range or choices, --help line and whether data-parallel ranks must agree on it; the
 * defaults, the parser, --help and the agreement check all walk it. Every error names the
 * flag and the value, on one line. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "train/train_internal.h"

static const it_flag_choice optimizer_choices[] = {
    {"sgd", IT_OPTIM_SGD, NULL}, {"adam", IT_OPTIM_ADAM, NULL}, {"adamw", IT_OPTIM_ADAMW, NULL}, {NULL, 0, NULL}};
static const it_flag_choice lr_decay_choices[] = {{"none", IT_LR_NONE, NULL},
                                                  {"constant", IT_LR_CONSTANT, NULL},
                                                  {"linear", IT_LR_LINEAR, NULL},
                                                  {"cosine", IT_LR_COSINE, NULL},
                                                  {"inverse-square-root", IT_LR_INVERSE_SQRT, NULL},
                                                  {NULL, 0, NULL}};
static const it_flag_choice schedule_choices[] = {
    {"gpipe", IT_PP_GPIPE, NULL}, {"1f1b", IT_PP_1F1B, NULL}, {NULL, 0, NULL}};
static const it_flag_choice granularity_choices[] = {{"none", IT_GRAN_NONE, NULL},
                                                     {"full", IT_GRAN_FULL, NULL},
                                                     {"selective", IT_GRAN_SELECTIVE, NULL},
                                                     {NULL, 0, NULL}};
static const it_flag_choice method_choices[] = {{"none", IT_RECOMPUTE_EACH, NULL},
                                                {"uniform", IT_RECOMPUTE_UNIFORM, NULL},
                                                {"block", IT_RECOMPUTE_BLOCK, NULL},
                                                {NULL, 0, NULL}};
static const it_flag_choice dtype_choices[] = {
    {"float32", IT_DTYPE_FP32, NULL},
    {"fp32", IT_DTYPE_FP32, NULL},
    {"bfloat16", IT_DTYPE_BF16, NULL}, /* autocast: matmuls in bf16, the rest and the weights fp32 */
    {"bf16", IT_DTYPE_BF16, NULL},
    {"float16", IT_DTYPE_FP16, "float16 training needs loss scaling, not implemented; use bfloat16 or float32"},
    {"fp16", IT_DTYPE_FP16, "float16 training needs loss scaling, not implemented; use bfloat16 or float32"},
    {NULL, 0, NULL}};

static const it_flag_choice cp_comm_choices[] = {
    {"p2p", IT_CP_P2P, NULL}, {"all_gather", IT_CP_ALL_GATHER, NULL}, {"a2a", IT_CP_A2A, NULL}, {NULL, 0, NULL}};

static const it_flag_choice lora_format_choices[] = {{"infinitrain", 0, NULL}, {"peft", 1, NULL}, {NULL, 0, NULL}};
static const it_flag_choice hf_dtype_choices[] = {{"float32", IT_DTYPE_FP32, NULL},
                                                  {"bfloat16", IT_DTYPE_BF16, NULL},
                                                  {"float16", IT_DTYPE_FP16, NULL},
                                                  {NULL, 0, NULL}};

_Static_assert(sizeof(it_optim_kind) == sizeof(int) && sizeof(it_lr_decay) == sizeof(int) &&
                   sizeof(it_dtype) == sizeof(int) && sizeof(it_pp_schedule) == sizeof(int) &&
                   sizeof(it_recompute) == sizeof(int) && sizeof(it_recompute_granularity) == sizeof(int),
               "IT_FLAG_CHOICE stores enums as int");

/* Each macro is one kind of entry; what follows `help` are further designators
 * (`.def_help = ...`). */
#define OFF(field) offsetof(it_train_config, field)
#define ENTRY(kind_, field, grp, agr, meta_, help_, ...)                                                               \
    { .kind = kind_, .offset = OFF(field), .group = grp, .agree = agr, .meta = meta_, .help = help_, __VA_ARGS__ }
#define STR(n, field, meta, grp, agr, help, ...)                                                                       \
    ENTRY(IT_FLAG_STRING, field, grp, agr, meta, help, .name = n, __VA_ARGS__)
#define INT(n, field, d, lo_, hi_, meta, grp, agr, help, ...)                                                          \
    ENTRY(IT_FLAG_INT, field, grp, agr, meta, help, .name = n, .def = d, .lo = lo_, .hi = hi_, __VA_ARGS__)
#define I64(n, field, d, lo_, hi_, meta, grp, agr, help, ...)                                                          \
    ENTRY(IT_FLAG_INT64, field, grp, agr, meta, help, .name = n, .def = d, .lo = lo_, .hi = hi_, __VA_ARGS__)
#define U64(n, field, d, lo_, hi_, meta, grp, agr, help, ...)                                                          \
    ENTRY(IT_FLAG_UINT64, field, grp, agr, meta, help, .name = n, .def = d, .lo = lo_, .hi = hi_, __VA_ARGS__)
#define FLT(n, field, d, lo_, hi_, meta, grp, agr, help, ...)                                                          \
    ENTRY(IT_FLAG_FLOAT, field, grp, agr, meta, help, .name = n, .def = d, .flo = lo_, .fhi = hi_, __VA_ARGS__)
#define BOOL(n, field, grp, agr, help, ...) ENTRY(IT_FLAG_BOOL, field, grp, agr, NULL, help, .name = n, __VA_ARGS__)
#define CHOICE(n, field, d, ch, what_, grp, agr, help, ...)                                                            \
    ENTRY(IT_FLAG_CHOICE, field, grp, agr, "NAME", help, .name = n, .def = d, .choices = ch, .what = what_, __VA_ARGS__)
#define ACTION(n, meta_, grp, help_)                                                                                   \
    { .name = n, .kind = IT_FLAG_ACTION, .meta = meta_, .help = help_, .group = grp }

static const char G_MODEL[] = "model", G_DATA[] = "data", G_OPT[] = "optimization", G_PAR[] = "parallelism",
                  G_CKPT[] = "checkpoints", G_OUT[] = "output", G_PROG[] = "program";

/* The order is --help's; each group's flags are contiguous. Ranges are what the code can
 * hold and check, not what is sensible. */
static const it_train_flag FLAGS[] = {
    STR("llmc_filepath", llmc_filepath, "PATH", G_MODEL, true, "llm.c checkpoint to start from",
        .def_help = "none: a new model"),
    STR("hf_model", hf_model, "DIR", G_MODEL, true,
        "Hugging Face model to start from (config.json + safetensors), in place of --llmc_filepath"),
    STR("model", model, "NAME", G_MODEL, true, "preset when no checkpoint: d12, d24, d36, d48"),
    INT("n_layer", n_layer, NULL, 1, 1024, "N", G_MODEL, true, "layers of a custom GPT-2", .def_help = "--model's"),
    INT("n_head", n_head, NULL, 1, 1024, "N", G_MODEL, true, "attention heads of a custom GPT-2",
        .def_help = "--model's"),
    INT("n_embd", n_embd, NULL, 1, 65536, "N", G_MODEL, true, "width of a custom GPT-2", .def_help = "--model's"),
    INT("block_size", block_size, NULL, 1, 1 << 20, "N", G_MODEL, true, "context length of a custom GPT-2",
        .def_help = "--model's"),
    INT("vocab_size", vocab_size, NULL, 1, 1 << 24, "N", G_MODEL, true,
        "vocabulary of a custom GPT-2, padded to a multiple of 64", .def_help = "--model's"),
    BOOL("flash", flash, G_MODEL, true,
         "flash attention where the device's backend has it: memory linear in the sequence (InfiniTrain's flag; "
         "false composes attention and keeps its T x T probabilities)",
         .def = "true"),
    STR("input_bin", input_bin, "PATH", G_DATA, true, "llm.c token shard to train on", .def_help = "required"),
    STR("input_val_bin", input_val_bin, "PATH", G_DATA, false, "llm.c token shard for the validation loss"),
    INT("val_loss_every", val_loss_every, "0", 0, INT_MAX, "N", G_DATA, true,
        "validation loss every N steps and after the last, 0 = never; needs --input_val_bin"),
    INT("val_max_steps", val_max_steps, "20", 1, INT_MAX, "K", G_DATA, true,
        "batches each rank evaluates in one validation"),
    I64("batch_size", batch_size, "4", 1, 1 << 20, "B", G_DATA, true, "sequences per micro-step"),
    I64("sequence_length", sequence_length, "64", 1, 1 << 20, "T", G_DATA, true, "tokens per sequence, <= block_size"),
    I64("total_batch_size", total_batch_size, NULL, 1, (int64_t)1 << 40, "N", G_DATA, true,
        "tokens per step over all ranks; accumulation = N/(B*T*ranks)", .def_help = "B*T*ranks"),
    INT("num_iteration", num_iteration, "10", 0, INT_MAX, "N", G_OPT, true, "training steps"),
    FLT("learning_rate", learning_rate, "1e-4", 0.0, 1e3, "LR", G_OPT, true, "peak learning rate"),
    CHOICE("optimizer", optimizer, "sgd", optimizer_choices, "an optimizer", G_OPT, true, "sgd, adam or adamw"),
    FLT("weight_decay", weight_decay, "0", 0.0, 1e3, "WD", G_OPT, true, "adam: L2 in the gradient; adamw: decoupled"),
    CHOICE("lr_decay_style", lr_decay, "constant", lr_decay_choices, "a decay style", G_OPT, true,
           "none (the flag LR, no schedule), constant, linear, cosine or inverse-square-root"),
    I64("lr_warmup_iters", lr_warmup_iters, "0", 0, INT64_MAX, "N", G_OPT, true,
        "linear warmup steps (a schedule's own, before the decay)"),
    FLT("lr_warmup_init", lr_warmup_init, "0", 0.0, 1e3, "LR", G_OPT, true, "learning rate the warmup starts from"),
    I64("lr_decay_iters", lr_decay_iters, "0", 0, INT64_MAX, "N", G_OPT, true,
        "step the decay ends at, 0 = --num_iteration"),
    FLT("min_lr", min_lr, "0", 0.0, 1e3, "LR", G_OPT, true, "learning rate at the end of decay"),
    FLT("grad_clip", grad_clip, "0", 0.0, 1e9, "G", G_OPT, true, "clip the global gradient norm to G, 0 = off"),
    BOOL("skip_nonfinite", skip_nonfinite, G_OPT, true,
         "a step whose loss (or, with --grad_clip, gradient norm) is NaN or infinite skips its update: no parameter, "
         "moment or schedule change",
         .def = "true"),
    FLT("loss_spike_zscore", loss_spike_zscore, "0", 0.0, 1e6, "Z", G_OPT, true,
        "skip the update of a step whose loss is more than Z standard deviations above the mean of the last 128 "
        "updated steps (llm.c's -sl); 0 = off"),
    INT("max_skipped_steps", max_skipped_steps, "5", 0, 1 << 30, "K", G_OPT, true,
        "stop the run (with a checkpoint under --save, exit status 1) after K skipped updates in a row; 0 = never"),
    CHOICE("dtype", dtype, "float32", dtype_choices, "a training dtype", G_OPT, true,
           "float32, or bfloat16: autocast, matmuls in bf16, weights and the rest float32"),
    U64("seed", seed, "42", 0, INT64_MAX, "N", G_OPT, true, "initialization and sampling seed"),
    FLT("moe_aux_loss_coeff", moe_aux_loss_coeff, "0", 0.0, 1e3, "C", G_OPT, true,
        "mixtral: weight of the load-balancing loss"),
    INT("zero_stage", zero_stage, "0", 0, 2, "0|1|2", G_PAR, true,
        "1 shards Adam's state over the ranks (ZeRO-1); 2 also the reduced gradient (ZeRO-2)"),
    I64("ddp_bucket_kb", ddp_bucket_kb, "25600", 1, (int64_t)1 << 30, "N", G_PAR, true,
        "gradient all-reduce bucket size in KiB"),
    INT("tensor_parallel", tensor_parallel, "1", 1, 1 << 16, "N", G_PAR, true,
        "tensor parallel size (Megatron style): heads, FFN columns and the vocabulary cut over N ranks; "
        "DP = ranks / N"),
    BOOL("sequence_parallel", sequence_parallel, G_PAR, true,
         "with --tensor_parallel: norms and residuals on T/N rows of the sequence each"),
    INT("pipeline_parallel", pipeline_parallel, "1", 1, 1 << 16, "P", G_PAR, true,
        "pipeline stages: the layers split over P ranks (embedding on the first, head and loss on the last); "
        "DP = ranks / (TP*P)"),
    INT("context_parallel", context_parallel, "1", 1, 1 << 16, "N", G_PAR, true,
        "context parallel size: every sequence cut over N ranks (ranks ordered TP, CP, DP, PP); DP = ranks / "
        "(TP*N*PP)"),
    CHOICE("cp_comm_type", cp_comm_type, "p2p", cp_comm_choices, "a context-parallel communication", G_PAR, true,
           "p2p (ring attention, K/V passed round the CP ranks), all_gather (K/V gathered) or a2a (Ulysses: "
           "sequence to heads and back)"),
    BOOL("cp_load_balance", cp_load_balance, G_PAR, true,
         "with --context_parallel: two mirrored chunks per rank (Megatron's and torchtitan's) so causal work is even; "
         "InfiniTrain keeps one contiguous slice"),
    INT("virtual_pipeline_parallel", virtual_pipeline_parallel, "1", 1, 1 << 16, "V", G_PAR, true,
        "chunks per pipeline stage: stage p holds chunks v*P + p of P*V (interleaved with --pipeline_schedule 1f1b)"),
    CHOICE("pipeline_schedule", pipeline_schedule, "gpipe", schedule_choices, "a pipeline schedule", G_PAR, true,
           "gpipe (all forwards, then all backwards: InfiniTrain's) or 1f1b (interleaved with V > 1); micro-batches = "
           "the accumulation"),
    BOOL("use_distributed_optimizer", use_distributed_optimizer, G_PAR, true,
         "InfiniTrain's older switch for ZeRO: --zero_stage's stage, 1 when it is 0"),
    BOOL("activation_recompute", activation_recompute, G_PAR, true,
         "recompute transformer blocks' activations at backward (Megatron's full recomputation)"),
    CHOICE("recompute_granularity", recompute_granularity, "full", granularity_choices, "a granularity", G_PAR, true,
           "none, full or selective (not implemented, as in InfiniTrain)"),
    CHOICE("recompute_method", recompute_method, "none", method_choices, "a recompute method", G_PAR, true,
           "none (every block), uniform (groups of N blocks) or block (the first N blocks of each pipeline chunk)"),
    INT("recompute_num_layers", recompute_num_layers, "0", 0, 1 << 20, "N", G_PAR, true,
        "N for --recompute_method uniform or block"),
    FLT("collective_timeout_s", collective_timeout_s, "300", 0.0, 1e7, "S", G_PAR, false,
        "a rank that waits longer than S seconds in one collective or receive names the ranks it waits for and "
        "ends (exit status 75, mpirun then ends the job); 0 = wait forever"),
    FLT("collective_warn_s", collective_warn_s, "60", 0.0, 1e7, "S", G_PAR, false,
        "a wait longer than S seconds prints once which ranks have not arrived (step, collective, bytes, their "
        "hosts); 0 = never"),
    BOOL("report_stragglers", report_stragglers, G_PAR, true,
         "the step line names the slowest rank, its host and its step time (one small all-reduce per step)"),
    INT("lora_rank", lora_rank, "0", 0, 1 << 16, "R", "lora", true, "LoRA rank r, 0 = off (full fine-tuning)"),
    FLT("lora_alpha", lora_alpha, "16", -1e6, 1e6, "A", "lora", true, "LoRA scaling numerator: scaling = alpha / r"),
    STR("lora_target_modules", lora_target_modules, "LIST", "lora", true,
        "comma list of module-name suffixes to adapt (c_attn, attn.c_proj, c_fc, c_fc2, c_proj, mlp.c_proj)",
        .def_help = "gpt2 c_attn,c_proj; llama3, qwen3 c_attn,c_proj,c_fc,c_fc2; mixtral c_attn,attn.c_proj"),
    STR("lora_save_path", lora_save_path, "PATH", "lora", false,
        "write the adapters at the end: InfiniTrain's file, or with --lora_save_format peft a PEFT directory"),
    CHOICE("lora_save_format", lora_save_format, "infinitrain", lora_format_choices, "an adapter format", "lora", false,
           "infinitrain (one file) or peft (adapter_config.json + adapter_model.safetensors)"),
    STR("lora_load_path", lora_load_path, "PATH", "lora", false,
        "start from the adapters in PATH: InfiniTrain's file or a PEFT directory"),
    STR("lora_merge_output", lora_merge_output, "PATH", "lora", false,
        "write W + (alpha/r) B A as an llm.c checkpoint at the end"),
    STR("save", save, "DIR", G_CKPT, false, "checkpoint root: DIR/checkpoint_step_NNNNNN/ every --save_interval steps"),
    INT("save_interval", save_interval, "0", 0, INT_MAX, "N", G_CKPT, true,
        "save every N steps and after the last, 0 = never; needs --save"),
    STR("load", load, "DIR", G_CKPT, false,
        "resume from a checkpoint_step_NNNNNN directory; a save root or `latest` (--save's root) takes its newest "
        "complete one (latest with none yet starts from step 0)"),
    INT("max_checkpoint_keep", max_checkpoint_keep, "3", 0, INT_MAX, "K", G_CKPT, false,
        "keep the newest K checkpoints (and the one resumed from), 0 = all"),
    BOOL("save_optimizer_state", save_optimizer_state, G_CKPT, true, "write optimizer.ckpt (Adam's moments)",
         .def = "true"),
    BOOL("load_optimizer_state", load_optimizer_state, G_CKPT, true,
         "restore the optimizer on --load (without it the resumed run differs)", .def = "true"),
    STR("tokenizer_bin", tokenizer_bin, "PATH", G_OUT, false, "llm.c tokenizer file, to print generated text"),
    STR("tokenizer", tokenizer, "PATH", G_OUT, false,
        "tokenizer to print generated text: an llm.c tokenizer file or a tiktoken rank file (LLaMA-3's "
        "tokenizer.model)"),
    INT("freq_generate_txt", freq_generate_txt, "0", 0, INT_MAX, "N", G_OUT, false,
        "sample text every N steps, 0 = never"),
    INT("text_length", text_length, "64", 1, 1 << 20, "N", G_OUT, false, "tokens per sample"),
    INT("log_interval", log_interval, "10", 1, INT_MAX, "N", G_OUT, false, "progress/ETA line every N steps"),
    STR("loss_log", loss_log, "PATH", G_OUT, false, "write each step's loss at full precision (%.17g), rank 0"),
    STR("output_checkpoint", output_checkpoint, "PATH", G_OUT, false,
        "write the trained model (llm.c format) at the end"),
    STR("output_hf", output_hf, "DIR", G_OUT, false,
        "write the trained model as a Hugging Face directory at the end (config.json + safetensors)"),
    CHOICE("output_hf_dtype", output_hf_dtype, "float32", hf_dtype_choices, "a dtype", G_OUT, false,
           "dtype of --output_hf's tensors: float32, bfloat16 or float16"),
    STR("max_shard_size", max_shard_size, "SIZE", G_OUT, false,
        "--output_hf shards above SIZE (5GB, 500MB; transformers' units)", .def_help = "5GB"),
    STR("profile", profile, "PATH", G_OUT, false,
        "profile every kernel call: PATH.report.rankR, PATH.records.log.rankR, PATH.trace.rankR.json (Perfetto)"),
    STR("precision_check", precision_check, "SPEC", G_OUT, false,
        "level=1|2,path=DIR,format=simple|md5,save_tensors=true,md5_tolerance=T: log (and save) every module's "
        "(1) or op's (2) outputs and gradients"),
    BOOL("backend_report", backend_report, G_OUT, false, "print each kernel slot: native or CPU fallback, calls, time"),
    BOOL("quiet", quiet, G_OUT, false, "no banner and no per-step lines"),
    STR("device", device, "NAME[:I]", G_PROG, false, "backend and device: cpu, sim:1, mlu:0, ..."),
    I64("max_memory_mb", max_memory_mb, "0", 0, (int64_t)1 << 40, "N", G_PROG, false,
        "device allocator limit in MiB, 0 = none"),
    ACTION("flagfile", "PATH", G_PROG,
           "read flags from PATH: one --name=value a line, # comments; the command "
           "line overrides them"),
    ACTION("help", NULL, G_PROG, "this text"),
};
enum { NFLAGS = sizeof FLAGS / sizeof FLAGS[0] };

/* InfiniTrain's per-app defaults, applied over the table's. */
static const struct {
    const char *app, *flag, *value;
} APP_DEFAULTS[] = {
    {"llama3", "optimizer", "adam"},      {"llama3", "learning_rate", "1e-5"}, {"mixtral", "optimizer", "adam"},
    {"mixtral", "learning_rate", "1e-4"}, {"qwen3", "optimizer", "adam"},      {"qwen3", "learning_rate", "1e-5"},
};

const it_train_flag *it_train_flags(size_t *count) {
    *count = NFLAGS;
    return FLAGS;
}

const it_train_flag *it_train_flag_find(const char *name) {
    for (int i = 0; i < NFLAGS; i++)
        if (strcmp(FLAGS[i].name, name) == 0) return &FLAGS[i];
    return NULL;
}

/* ---- values */

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

static it_status parse_bool(const char *flag, const char *v, bool *out) {
    static const char *const yes[] = {"true", "t", "yes", "y", "1"}, *const no[] = {"false", "f", "no", "n", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(v, yes[i]) == 0) return *out = true, IT_OK;
        if (strcasecmp(v, no[i]) == 0) return *out = false, IT_OK;
    }
    return it_error(IT_ERR_INVALID_ARG, "--%s: '%s' is not a boolean (true or false)", flag, v);
}

static it_status parse_choice(const it_train_flag *f, const char *v, int *out) {
    char names[256] = "";
    for (const it_flag_choice *ch = f->choices; ch->name; ch++) {
        if (strcmp(v, ch->name) == 0) {
            if (ch->refusal) return it_error(IT_ERR_UNSUPPORTED, "--%s: %s", f->name, ch->refusal);
            *out = ch->value;
            return IT_OK;
        }
        if (!ch->refusal)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "", ch->name);
    }
    return it_error(IT_ERR_INVALID_ARG, "--%s: '%s' is not %s (%s)", f->name, v, f->what, names);
}

/* Store `v` (NULL: a boolean given without a value) into f's field of c. */
static it_status set_value(it_train_config *c, const it_train_flag *f, const char *v) {
    char *field = (char *)c + f->offset;
    int64_t x = 0;
    it_status st = IT_OK;
    switch (f->kind) {
    case IT_FLAG_STRING: *(const char **)field = v; break;
    case IT_FLAG_INT:
        if (!(st = parse_i64(f->name, v, f->lo, f->hi, &x))) *(int *)field = (int)x;
        break;
    case IT_FLAG_INT64:
        if (!(st = parse_i64(f->name, v, f->lo, f->hi, &x))) *(int64_t *)field = x;
        break;
    case IT_FLAG_UINT64:
        if (!(st = parse_i64(f->name, v, f->lo, f->hi, &x))) *(uint64_t *)field = (uint64_t)x;
        break;
    case IT_FLAG_FLOAT: {
        char *end = NULL;
        errno = 0;
        double d = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(d))
            return it_error(IT_ERR_INVALID_ARG, "--%s: '%s' is not a finite number", f->name, v);
        if (d < f->flo || d > f->fhi)
            return it_error(IT_ERR_INVALID_ARG, "--%s: %g is out of range %g..%g", f->name, d, f->flo, f->fhi);
        *(float *)field = (float)d;
        break;
    }
    case IT_FLAG_BOOL: {
        bool b = true;
        if (v && (st = parse_bool(f->name, v, &b))) return st;
        *(bool *)field = b;
        break;
    }
    case IT_FLAG_CHOICE: st = parse_choice(f, v, (int *)field); break;
    case IT_FLAG_ACTION: return it_error(IT_ERR_INTERNAL, "--%s has no field", f->name);
    }
    return st;
}

void it_train_config_defaults(it_train_config *c, const char *app) {
    memset(c, 0, sizeof *c);
    c->app = app;
    c->device = "cpu";
    c->model = "d12";
    /* The table's defaults are command-line values: parsing them cannot fail (test_flags checks
     * every one), so a failure here is a bug in the table. */
    for (int i = 0; i < NFLAGS; i++)
        if (FLAGS[i].def && FLAGS[i].kind != IT_FLAG_STRING) (void)set_value(c, &FLAGS[i], FLAGS[i].def);
    for (size_t i = 0; i < sizeof APP_DEFAULTS / sizeof APP_DEFAULTS[0]; i++)
        if (strcmp(app, APP_DEFAULTS[i].app) == 0)
            (void)set_value(c, it_train_flag_find(APP_DEFAULTS[i].flag), APP_DEFAULTS[i].value);
}

/* ---- --flagfile storage: a chain of blocks, each a file's text with its lines cut in place */

typedef struct storage_block {
    struct storage_block *next;
    char text[];
} storage_block;

void it_train_config_release(it_train_config *c) {
    for (storage_block *b = c->storage, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    c->storage = NULL;
}

/* ---- names */

static it_status unknown_flag(const char *name) {
    const char *near = NULL;
    int best = 3;
    for (int i = 0; i < NFLAGS; i++) {
        int d = it__edit_distance(name, FLAGS[i].name);
        if (d < best) best = d, near = FLAGS[i].name;
    }
    if (near) return it_error(IT_ERR_INVALID_ARG, "unknown flag --%s (did you mean --%s?)", name, near);
    return it_error(IT_ERR_INVALID_ARG, "unknown flag --%s (see --help)", name);
}

/* The flag `arg` names ("--name", "--name=v", "--noname" for a boolean); *value is what
 * follows '=' or NULL, *negated is set for --noname. */
static it_status lookup(const char *arg, const it_train_flag **out, const char **value, bool *negated) {
    if (strncmp(arg, "--", 2) != 0)
        return it_error(IT_ERR_INVALID_ARG, "unexpected argument '%s' (flags start with --; see --help)", arg);
    char name[64];
    const char *eq = strchr(arg + 2, '=');
    size_t nl = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (nl == 0 || nl >= sizeof name) return it_error(IT_ERR_INVALID_ARG, "malformed flag '%s'", arg);
    memcpy(name, arg + 2, nl);
    name[nl] = '\0';
    *value = eq ? eq + 1 : NULL;
    *negated = false;
    *out = it_train_flag_find(name);
    if (!*out && strncmp(name, "no", 2) == 0) {
        const it_train_flag *f = it_train_flag_find(name + 2);
        if (f && f->kind == IT_FLAG_BOOL) {
            if (eq) return it_error(IT_ERR_INVALID_ARG, "--%s takes no value ('%s')", name, arg);
            *out = f;
            *negated = true;
        }
    }
    return *out ? IT_OK : unknown_flag(name);
}

enum { MAX_FLAGFILE_DEPTH = 8 };
static it_status parse_flagfile(it_train_config *c, const char *path, int depth, bool *help);

/* Apply one flag with its value (NULL for a boolean given bare). */
static it_status apply(it_train_config *c, const it_train_flag *f, const char *v, bool negated, int depth, bool *help) {
    if (strcmp(f->name, "help") == 0) {
        *help = true;
        return IT_OK;
    }
    if (strcmp(f->name, "flagfile") == 0) return parse_flagfile(c, v, depth + 1, help);
    if (negated) {
        *(bool *)((char *)c + f->offset) = false;
        return IT_OK;
    }
    return set_value(c, f, v);
}

static it_status parse_flagfile(it_train_config *c, const char *path, int depth, bool *help) {
    if (depth > MAX_FLAGFILE_DEPTH)
        return it_error(IT_ERR_INVALID_ARG, "--flagfile: '%s': flagfiles nest deeper than %d (a cycle?)", path,
                        MAX_FLAGFILE_DEPTH);
    FILE *fp = fopen(path, "rb");
    if (!fp) return it_error(IT_ERR_INVALID_ARG, "--flagfile: cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) { /* a FIFO or a terminal could block forever */
        fclose(fp);
        return it_error(IT_ERR_INVALID_ARG, "--flagfile: '%s' is not a regular file", path);
    }
    enum { MAX_BYTES = 1 << 20 };
    storage_block *b = malloc(sizeof *b + MAX_BYTES + 1);
    if (!b) {
        fclose(fp);
        return it_error(IT_ERR_OOM, "--flagfile: out of host memory");
    }
    size_t n = fread(b->text, 1, MAX_BYTES + 1, fp);
    bool bad = ferror(fp);
    fclose(fp);
    if (bad || n > MAX_BYTES) {
        free(b);
        return it_error(IT_ERR_INVALID_ARG, "--flagfile: '%s': %s", path,
                        bad ? "read error" : "larger than 1 MiB, not a flagfile");
    }
    b->text[n] = '\0';
    b->next = c->storage; /* kept: the config's strings point into it */
    c->storage = b;
    if (memchr(b->text, '\0', n)) return it_error(IT_ERR_INVALID_ARG, "--flagfile: '%s' holds a NUL byte", path);
    int lineno = 0;
    for (char *line = b->text, *next; line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        while (*line == ' ' || *line == '\t') line++;
        size_t len = strlen(line);
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!*line || *line == '#') continue;
        const it_train_flag *f;
        const char *v;
        bool negated;
        size_t name_end = strcspn(line, "=");
        it_status st = strcspn(line, " \t") < name_end
                           ? it_error(IT_ERR_INVALID_ARG, "'%s': a flagfile line is --name=value", line)
                           : lookup(line, &f, &v, &negated);
        if (!st && !v && !negated && f->kind != IT_FLAG_BOOL && strcmp(f->name, "help") != 0)
            st = it_error(IT_ERR_INVALID_ARG, "--%s: missing value (a flagfile line is --name=value)", f->name);
        if (!st) st = apply(c, f, v, negated, depth, help);
        if (st) return it_error_context("--flagfile %s:%d: ", path, lineno);
    }
    return IT_OK;
}

it_status it_train_parse_args(it_train_config *c, int argc, char **argv, bool *help) {
    *help = false;
    /* Flagfiles first, so that every flag on the command line overrides them. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            const it_train_flag *f;
            const char *v;
            bool negated;
            it_status st = lookup(argv[i], &f, &v, &negated);
            if (st) return st;
            bool takes_next = !v && !negated && f->kind != IT_FLAG_BOOL && strcmp(f->name, "help") != 0;
            if (takes_next) {
                if (i + 1 >= argc) return it_error(IT_ERR_INVALID_ARG, "--%s: missing value", f->name);
                v = argv[++i];
            }
            if ((pass == 0) != (strcmp(f->name, "flagfile") == 0)) continue;
            if ((st = apply(c, f, v, negated, 0, help))) return st;
            if (*help) return IT_OK;
        }
    }
    return IT_OK;
}

/* ---- --help */

static void print_default(const it_train_flag *f, const it_train_config *d, FILE *out) {
    const char *field = (const char *)d + f->offset;
    if (f->def_help) {
        fprintf(out, " (%s)", f->def_help);
        return;
    }
    switch (f->kind) {
    case IT_FLAG_STRING:
        if (*(const char *const *)field) fprintf(out, " (%s)", *(const char *const *)field);
        break;
    case IT_FLAG_INT:
        if (f->def || *(const int *)field) fprintf(out, " (%d)", *(const int *)field);
        break;
    case IT_FLAG_INT64:
        if (f->def || *(const int64_t *)field) fprintf(out, " (%lld)", (long long)*(const int64_t *)field);
        break;
    case IT_FLAG_UINT64: fprintf(out, " (%llu)", (unsigned long long)*(const uint64_t *)field); break;
    case IT_FLAG_FLOAT: fprintf(out, " (%g)", (double)*(const float *)field); break;
    case IT_FLAG_BOOL: fprintf(out, " (%s)", *(const bool *)field ? "true" : "false"); break;
    case IT_FLAG_CHOICE:
        for (const it_flag_choice *ch = f->choices; ch->name; ch++)
            if (ch->value == *(const int *)field && !ch->refusal) {
                fprintf(out, " (%s)", ch->name);
                break;
            }
        break;
    case IT_FLAG_ACTION: break;
    }
}

bool it_train_flag_gpt2_sizing(const char *name) {
    static const char *const sizing[] = {"model", "n_layer", "n_head", "n_embd", "block_size", "vocab_size"};
    for (size_t i = 0; i < sizeof sizing / sizeof sizing[0]; i++)
        if (strcmp(name, sizing[i]) == 0) return true;
    return false;
}

void it_train_print_help(const char *app, FILE *out) {
    it_train_config d;
    it_train_config_defaults(&d, app);
    fprintf(out,
            "usage: %s [flags]   (`--name value` or `--name=value`; booleans: --name, --name=false, --noname)\n"
            "defaults in parentheses\n",
            app);
    const char *group = NULL;
    for (int i = 0; i < NFLAGS; i++) {
        const it_train_flag *f = &FLAGS[i];
        /* GPT-2's presets and sizes build a model from scratch; the others read theirs */
        if (strcmp(app, "gpt2") != 0 && it_train_flag_gpt2_sizing(f->name)) continue;
        if (!group || strcmp(group, f->group) != 0) {
            /* each group's flags are contiguous in the table (test_flags checks it) */
            group = f->group;
            fprintf(out, "%s:\n", group);
        }
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s%s%s", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
        fprintf(out, "  %-26s %s", lhs, f->help);
        print_default(f, &d, out);
        fputc('\n', out);
    }
    fprintf(out,
            "parallelism: mpirun -np N %s ... runs N ranks, one device each (--device sim gives\n"
            "rank r sim:(r mod count)), as DP = N / TP replicas of TP ranks (rank = tp + TP*dp);\n"
            "--total_batch_size counts the DP replicas' tokens\n",
            app);
}

bool it_train_flag_format(const it_train_config *c, const it_train_flag *f, char *buf, size_t n) {
    const char *field = (const char *)c + f->offset;
    switch (f->kind) {
    case IT_FLAG_STRING: {
        const char *s = *(const char *const *)field;
        if (!s) return false;
        snprintf(buf, n, "%s", s);
        return true;
    }
    case IT_FLAG_INT: snprintf(buf, n, "%d", *(const int *)field); return true;
    case IT_FLAG_INT64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)field); return true;
    case IT_FLAG_UINT64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)field); return true;
    case IT_FLAG_FLOAT: { /* the shortest decimal that parses back to the same float */
        float x = *(const float *)field;
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, n, "%.*g", digits, (double)x);
            if ((float)strtod(buf, NULL) == x) break;
        }
        return true;
    }
    case IT_FLAG_BOOL: snprintf(buf, n, "%s", *(const bool *)field ? "true" : "false"); return true;
    case IT_FLAG_CHOICE:
        for (const it_flag_choice *ch = f->choices; ch->name; ch++)
            if (ch->value == *(const int *)field && !ch->refusal) {
                snprintf(buf, n, "%s", ch->name);
                return true;
            }
        return false;
    case IT_FLAG_ACTION: return false;
    }
    return false;
}

/* ---- data parallelism: every rank must be given the same value of each `agree` flag */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static size_t field_size(it_flag_kind k) {
    switch (k) {
    case IT_FLAG_INT:
    case IT_FLAG_CHOICE: return sizeof(int);
    case IT_FLAG_INT64:
    case IT_FLAG_UINT64: return sizeof(int64_t);
    case IT_FLAG_FLOAT: return sizeof(float);
    case IT_FLAG_BOOL: return sizeof(bool);
    default: return 0;
    }
}

int it_train_flags_agree_hashes(const it_train_config *c, uint64_t *hashes, const char **names, int max) {
    int n = 0;
    for (int i = 0; i < NFLAGS && n < max; i++) {
        const it_train_flag *f = &FLAGS[i];
        if (!f->agree) continue;
        const char *field = (const char *)c + f->offset;
        uint64_t h = 1469598103934665603ull;
        if (f->kind == IT_FLAG_STRING) {
            const char *s = *(const char *const *)field;
            h = hash_bytes(h, s ? s : "\x01", s ? strlen(s) + 1 : 1); /* NULL differs from "" */
        } else {
            h = hash_bytes(h, field, field_size(f->kind));
        }
        hashes[n] = h;
        names[n++] = f->name;
    }
    return n;
}
