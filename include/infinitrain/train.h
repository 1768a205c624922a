/* The training driver shared by every app: InfiniTrain's flags, the loop with gradient
 * accumulation, the step log line, generation and checkpoints. */
#ifndef INFINITRAIN_TRAIN_H
#define INFINITRAIN_TRAIN_H

#include "models.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The order a pipeline stage runs its micro-batches' forwards (F) and backwards (B) in. */
typedef enum it_pp_schedule {
    IT_PP_GPIPE, /* F0 .. F(M-1), then B(M-1) .. B0 */
    IT_PP_1F1B,  /* P-p-1 warm-up forwards, then one forward and one backward in turn, then the rest */
} it_pp_schedule;

/* --recompute_granularity: InfiniTrain's (selective is refused there at the first forward, here
 * at start-up). */
typedef enum it_recompute_granularity { IT_GRAN_NONE, IT_GRAN_FULL, IT_GRAN_SELECTIVE } it_recompute_granularity;

typedef struct it_train_config {
    const char *app;                                     /* "gpt2" */
    const char *device;                                  /* --device (cpu) */
    const char *input_bin;                               /* --input_bin: token shard */
    const char *llmc_filepath;                           /* --llmc_filepath: checkpoint to start from */
    const char *model;                                   /* --model: preset when no checkpoint (d12) */
    int n_layer, n_head, n_embd, block_size, vocab_size; /* custom model shape (0 = from preset) */
    int64_t batch_size;                                  /* --batch_size (4) */
    int64_t sequence_length;                             /* --sequence_length (64) */
    int64_t total_batch_size;         /* --total_batch_size in tokens (B*T); accumulation = total/(B*T) */
    int num_iteration;                /* --num_iteration (10) */
    float learning_rate;              /* --learning_rate (1e-4) */
    it_optim_kind optimizer;          /* --optimizer (sgd) */
    float weight_decay;               /* --weight_decay (0) */
    it_lr_decay lr_decay;             /* --lr_decay_style (none) */
    int64_t lr_warmup_iters;          /* --lr_warmup_iters (0) */
    float lr_warmup_init;             /* --lr_warmup_init: the learning rate warmup starts from (0) */
    int64_t lr_decay_iters;           /* --lr_decay_iters: steps the decay ends at (0 = num_iteration) */
    float min_lr;                     /* --min_lr (0) */
    float grad_clip;                  /* --grad_clip (0 = off) */
    it_dtype dtype;                   /* --dtype (float32) */
    const char *tokenizer_bin;        /* --tokenizer_bin */
    const char *tokenizer;            /* --tokenizer: an llm.c tokenizer file or a tiktoken rank file */
    int freq_generate_txt;            /* --freq_generate_txt (0 = never) */
    int text_length;                  /* --text_length (64) */
    uint64_t seed;                    /* --seed (42) */
    const char *output_checkpoint;    /* --output_checkpoint: written after the last step */
    const char *hf_model;             /* --hf_model: a Hugging Face directory to start from */
    const char *output_hf;            /* --output_hf: the trained model as a Hugging Face directory */
    it_dtype output_hf_dtype;         /* --output_hf_dtype (float32) */
    const char *max_shard_size;       /* --max_shard_size (5GB) */
    int lora_save_format;             /* --lora_save_format: 0 InfiniTrain's file, 1 PEFT's directory */
    int log_interval;                 /* --log_interval: progress/ETA line every N steps (10) */
    int64_t max_memory_mb;            /* --max_memory_mb: allocator limit (0 = none) */
    float moe_aux_loss_coeff;         /* --moe_aux_loss_coeff: Mixtral load-balancing loss weight (0) */
    bool backend_report;              /* --backend_report: kernel coverage/time table at the end */
    bool flash;                       /* --flash: flash attention where the backend has it (true) */
    int zero_stage;                   /* --zero_stage: 0 = plain DDP, 1 = optimizer state sharded (0) */
    int64_t ddp_bucket_kb;            /* --ddp_bucket_kb: gradient all-reduce bucket size (25600 = 25 MiB) */
    int tensor_parallel;              /* --tensor_parallel: TP size (1); DP = ranks / (TP * PP) */
    bool sequence_parallel;           /* --sequence_parallel: with TP, norms and residuals on T/TP rows */
    int pipeline_parallel;            /* --pipeline_parallel: pipeline stages (1) */
    int context_parallel;             /* --context_parallel: the sequence cut over CP ranks (1) */
    float collective_timeout_s;       /* --collective_timeout_s: a longer wait ends the rank (300; 0 never) */
    float collective_warn_s;          /* --collective_warn_s: a longer wait names the late ranks (60; 0 never) */
    bool report_stragglers;           /* --report_stragglers: the step line names the slowest rank */
    bool skip_nonfinite;              /* --skip_nonfinite: a non-finite loss or grad norm skips the update (true) */
    float loss_spike_zscore;          /* --loss_spike_zscore: skip a loss this many sd above the recent mean (0 off) */
    int max_skipped_steps;            /* --max_skipped_steps: stop after this many skips in a row (5; 0 never) */
    int cp_comm_type;                 /* --cp_comm_type: an it_cp_comm (p2p) */
    bool cp_load_balance;             /* --cp_load_balance: two mirrored chunks per CP rank */
    int virtual_pipeline_parallel;    /* --virtual_pipeline_parallel: chunks per stage (1) */
    it_pp_schedule pipeline_schedule; /* --pipeline_schedule: gpipe (InfiniTrain's) or 1f1b */
    bool use_distributed_optimizer;   /* --use_distributed_optimizer: ZeRO (stage 1 unless --zero_stage) */
    bool activation_recompute;        /* --activation_recompute */
    it_recompute_granularity recompute_granularity; /* --recompute_granularity (full) */
    it_recompute recompute_method;                  /* --recompute_method: none (each block), uniform, block */
    int recompute_num_layers;                       /* --recompute_num_layers */
    const char *loss_log;                           /* --loss_log: each step's loss at full precision (rank 0) */
    bool quiet;                                     /* --quiet: no per-step lines (tests) */
    const char *input_val_bin;                      /* --input_val_bin: validation token shard */
    int val_loss_every;              /* --val_loss_every: validation loss every N steps and at the end (0 = never) */
    int val_max_steps;               /* --val_max_steps: batches per rank in one validation (20) */
    const char *profile;             /* --profile: kernel profile PATH.report/.records.log/.trace.json */
    const char *precision_check;     /* --precision_check: InfiniTrain's "level=..,path=..,..." (NULL: off) */
    const char *save;                /* --save: checkpoint root */
    int save_interval;               /* --save_interval: checkpoint every N steps (0 = never) */
    const char *load;                /* --load: a checkpoint_step_NNNNNN directory to resume from */
    int max_checkpoint_keep;         /* --max_checkpoint_keep: newest checkpoints kept (3; 0 = all) */
    bool save_optimizer_state;       /* --save_optimizer_state: write optimizer.ckpt (true) */
    bool load_optimizer_state;       /* --load_optimizer_state: restore it on --load (true) */
    int lora_rank;                   /* --lora_rank: LoRA's r (0 = off) */
    float lora_alpha;                /* --lora_alpha: scaling alpha / r (16) */
    const char *lora_target_modules; /* --lora_target_modules: module-name suffixes (per app) */
    const char *lora_save_path;      /* --lora_save_path: the adapters after the last step */
    const char *lora_load_path;      /* --lora_load_path: adapters to start from */
    const char *lora_merge_output;   /* --lora_merge_output: W + (alpha/r) B A as an llm.c checkpoint */
    void *storage;                   /* values read from --flagfile; freed by it_train_config_release */
} it_train_config;

/* The flags, one table (src/train/flags.c): it gives the defaults, parses, prints --help and
 * says which flags every data-parallel rank must agree on. Adding a flag is one entry. */
typedef enum it_flag_kind {
    IT_FLAG_STRING, /* const char * (points into argv or the flagfile's storage) */
    IT_FLAG_INT,    /* int, decimal, within [lo, hi] */
    IT_FLAG_INT64,  /* int64_t, decimal, within [lo, hi] */
    IT_FLAG_UINT64, /* uint64_t, decimal, within [lo, hi] */
    IT_FLAG_FLOAT,  /* float, finite, within [flo, fhi] */
    IT_FLAG_BOOL,   /* bool: --name, --name=true|false|1|0|yes|no, --noname; never takes the next argument */
    IT_FLAG_CHOICE, /* an enum stored as int: one of `choices` */
    IT_FLAG_ACTION  /* --help, --flagfile: handled by the parser itself, no field */
} it_flag_kind;

typedef struct it_flag_choice {
    const char *name; /* NULL ends the list */
    int value;
    const char *refusal; /* non-NULL: a known value refused with IT_ERR_UNSUPPORTED and this reason */
} it_flag_choice;

typedef struct it_train_flag {
    const char *name; /* without the leading "--" */
    it_flag_kind kind;
    size_t offset;   /* of the field in it_train_config */
    const char *def; /* the default as a command-line value (NULL: zero, false or none) */
    int64_t lo, hi;  /* integers: the accepted range */
    double flo, fhi; /* floats: the accepted range */
    const it_flag_choice *choices;
    const char *what;     /* choices: what a value is, for errors ("a training dtype") */
    const char *meta;     /* the value's placeholder in --help ("N", "PATH") */
    const char *help;     /* one line */
    const char *def_help; /* shown as the default where `def` does not say it ("B*T*ranks") */
    const char *group;    /* --help section */
    bool agree;           /* data parallel: every rank must be given the same value */
} it_train_flag;

IT_API const it_train_flag *it_train_flags(size_t *count);
IT_API const it_train_flag *it_train_flag_find(const char *name);
/* Whether a flag sizes a GPT-2 built from scratch (--model, --n_layer, ...): only gpt2's --help
 * lists them, and they are refused beside a model file. */
IT_API bool it_train_flag_gpt2_sizing(const char *name);
/* c's value of flag f as a command-line value ("4", "adamw", "true"; floats to 9 digits, which
 * parse back to the same float). False when it has none (a string not given). */
IT_API bool it_train_flag_format(const it_train_config *c, const it_train_flag *f, char *buf, size_t n);

IT_API void it_train_config_defaults(it_train_config *c, const char *app);
/* Frees what parsing a --flagfile kept (its values); the config's strings from it dangle after. */
IT_API void it_train_config_release(it_train_config *c);
/* Parse argv into c: `--name value`, `--name=value`, booleans as gflags takes them, and
 * `--flagfile PATH` (one `--name=value` per line, `#` comments; read before the command line,
 * so the command line overrides it). Unknown flags, malformed or out-of-range values:
 * IT_ERR_INVALID_ARG with a one-line message naming the flag (and the nearest flag's name
 * when one is within two edits). *help is set for --help. */
IT_API it_status it_train_parse_args(it_train_config *c, int argc, char **argv, bool *help);
IT_API void it_train_print_help(const char *app, FILE *f);

typedef struct it_train_result {
    double *losses; /* num_iteration entries, caller-allocated (may be NULL) */
    double last_step_ms;
    size_t peak_used, peak_reserved;
    double val_loss; /* the last validation loss (--val_loss_every), else untouched */
} it_train_result;

/* Validate everything (files, shapes, flags against the model), then train. Input errors
 * come back as IT_ERR_INVALID_ARG / IT_ERR_FORMAT / IT_ERR_IO before any step runs. */
IT_API it_status it_train_run(const it_train_config *c, it_train_result *result);
/* The process exit status for a run that ended with `st`: 0 ok; 2 bad flags or input (invalid
 * argument, file format, I/O, not found): the user's to fix; 1 a failure during training. */
IT_API int it_train_exit_code(it_status st);
/* The whole CLI: parse, run, print errors. Returns it_train_exit_code's status. */
IT_API int it_train_main(int argc, char **argv, const char *app);

#ifdef __cplusplus
}
#endif
#endif
