/* libFuzzer harness: the input is the trainer_state.json of a --load checkpoint. At the first
 * call a tiny GPT-2 run (tests/fixtures/gpt2, B=2 T=8, AdamW, 1 step) saves a real checkpoint into a
 * temporary directory; each input then replaces that checkpoint's trainer_state.json and
 * it_train_run resumes from it for up to 2 steps (the checkpoint is at step 1, so a valid state
 * trains one). model.ckpt stays the saved one, so an input that keeps
 * "infinitrain_c"."files" intact passes its size and CRC check and reaches the loader.
 *
 * A refusal must be a user's error (IT_ERR_FORMAT, IT_ERR_INVALID_ARG, IT_ERR_IO,
 * IT_ERR_NOT_FOUND; IT_ERR_OOM for what this machine cannot hold) with a one-line message
 * naming the checkpoint; an accepted state must train every step after its global_step to a
 * finite loss. Fixtures are found beside this file (__FILE__ is absolute in the fuzz build), or
 * under $IT_SOURCE_DIR. */
#include <ftw.h>
#include <limits.h>
#include <math.h>

#include "fuzz_common.h"
#include "infinitrain/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { STEPS = 2 };

static char root[] = "/tmp/it_fuzz_trainer_state_XXXXXX";
static char ckpt_dir[PATH_MAX], state_path[PATH_MAX], model_path[PATH_MAX], shard_path[PATH_MAX];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_root(void) { nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void config(it_train_config *c) {
    it_train_config_defaults(c, "gpt2");
    c->llmc_filepath = model_path;
    c->input_bin = shard_path;
    c->batch_size = 2;
    c->sequence_length = 8;
    /* AdamW: the seeds' optimizer.ckpt entry and the moments' loading are fuzzed too */
    c->optimizer = IT_OPTIM_ADAMW;
}

/* The fixtures' directory, and a checkpoint of one step under root. */
static void setup(void) {
    const char *src = getenv("IT_SOURCE_DIR");
    char fixtures[PATH_MAX];
    if (src) {
        snprintf(fixtures, sizeof fixtures, "%s/tests/fixtures/gpt2", src);
    } else {
        snprintf(fixtures, sizeof fixtures, "%s", __FILE__); /* .../tests/fuzz/fuzz_trainer_state.c */
        char *slash = strrchr(fixtures, '/');
        FUZZ_ASSERT(slash != NULL, "__FILE__ %s is not a path: set IT_SOURCE_DIR", __FILE__);
        snprintf(slash, sizeof fixtures - (size_t)(slash - fixtures), "/../fixtures/gpt2");
    }
    snprintf(model_path, sizeof model_path, "%s/tiny_gpt2.bin", fixtures);
    snprintf(shard_path, sizeof shard_path, "%s/tiny_shard.bin", fixtures);
    FUZZ_ASSERT(access(model_path, R_OK) == 0, "no fixture %s (set IT_SOURCE_DIR)", model_path);
    FUZZ_ASSERT(mkdtemp(root) != NULL, "mkdtemp %s", root);
    atexit(remove_root);

    it_train_config c;
    config(&c);
    c.save = root;
    c.save_interval = 1;
    c.num_iteration = 1;
    c.quiet = true;
    FUZZ_ASSERT(it_train_run(&c, NULL) == IT_OK, "saving the checkpoint to resume from");
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/checkpoint_step_000001", root);
    snprintf(state_path, sizeof state_path, "%s/trainer_state.json", ckpt_dir);
    FUZZ_ASSERT(access(state_path, R_OK) == 0, "the save wrote no %s", state_path);
    /* The resumed runs are not quiet (so that the notes on changed flags run too): their
     * lines go nowhere. */
    FUZZ_ASSERT(freopen("/dev/null", "w", stdout) != NULL, "stdout to /dev/null");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) setup(), ready = true;
    FILE *f = fopen(state_path, "wb");
    FUZZ_ASSERT(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "writing %s", state_path);

    it_train_config c;
    config(&c);
    c.load = ckpt_dir;
    c.num_iteration = STEPS;
    c.log_interval = 1000;           /* the ETA line: not per step */
    double losses[STEPS] = {-1, -1}; /* a cross-entropy is never negative: -1 is "not trained" */
    it_train_result res = {.losses = losses};
    it_error_clear();
    it_status st = it_train_run(&c, &res);
    if (st) {
        const char *msg = it_last_error();
        FUZZ_ASSERT(st == IT_ERR_FORMAT || st == IT_ERR_INVALID_ARG || st == IT_ERR_IO || st == IT_ERR_NOT_FOUND ||
                        st == IT_ERR_OOM,
                    "status %s", it_status_name(st));
        FUZZ_ASSERT(it_last_status() == st, "recorded status %s, returned %s", it_status_name(it_last_status()),
                    it_status_name(st));
        FUZZ_ASSERT(strstr(msg, ckpt_dir) != NULL, "message does not name the checkpoint %s: %s", ckpt_dir, msg);
        FUZZ_ASSERT(strchr(msg, '\n') == NULL, "message spans lines: %s", msg);
        return 0;
    }
    /* steps after the state's global_step were trained, each to a finite loss */
    bool trained = false;
    for (int s = 0; s < STEPS; s++) {
        FUZZ_ASSERT(losses[s] == -1 || (isfinite(losses[s]) && losses[s] >= 0), "step %d: loss %g", s + 1, losses[s]);
        FUZZ_ASSERT(!trained || losses[s] != -1, "step %d not trained after step %d was", s + 1, s);
        trained |= losses[s] != -1;
    }
    return 0;
}
