/* it-ckpt: look into checkpoints and convert their models to and from llm.c files.
 *
 *   it-ckpt show PATH                 a checkpoint directory, or one .ckpt file: its entries
 *   it-ckpt to-llmc DIR OUT.bin [--like FILE]
 *                                     the model of checkpoint DIR as an llm.c file; the llm.c
 *                                     header comes from FILE, by default the --llmc_filepath the
 *                                     run started from (a run without one needs --like)
 *   it-ckpt from-llmc APP IN.bin DIR  an llm.c file (APP gpt2, llama3, mixtral or qwen3) as a
 *                                     checkpoint directory holding the model alone (step 0)
 *   it-ckpt from-hf HFDIR OUT.bin     a Hugging Face model directory as an llm.c file
 *   it-ckpt to-hf IN HFDIR [--dtype float32|bfloat16|float16] [--max_shard_size 5GB]
 *                 [--like FILE|HFDIR] an llm.c file, or a checkpoint directory (its model read
 *                                     as to-llmc reads it, or shaped as the --hf_model its run
 *                                     started from; --like names another llm.c file or HF
 *                                     directory of the same model), as a Hugging Face directory
 *
 * Exit status: 0 done, 2 bad arguments or input, 1 other failures. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infinitrain/hf.h"
#include "infinitrain/train.h"
#include "train/ckpt_file.h"
#include "train/train_internal.h"

static int usage(FILE *f) {
    fprintf(f, "usage: it-ckpt show PATH\n"
               "       it-ckpt to-llmc DIR OUT.bin [--like FILE]\n"
               "       it-ckpt from-llmc gpt2|llama3|mixtral|qwen3 IN.bin DIR\n"
               "       it-ckpt from-hf HFDIR OUT.bin\n"
               "       it-ckpt to-hf IN.bin|CKPT_DIR HFDIR [--dtype float32|bfloat16|float16] [--max_shard_size SIZE]"
               " [--like FILE|HFDIR]\n");
    return f == stdout ? 0 : 2;
}

static int fail(it_status st) {
    fprintf(stderr, "it-ckpt: %s\n", it_last_error());
    return it_train_exit_code(st);
}

static it_status show_file(const char *path) {
    it_ckpt *ck;
    it_status st = it_ckpt_open(path, &ck);
    if (st) return st;
    uint64_t total = 0;
    printf("%s: %zu entries\n", path, it_ckpt_count(ck));
    for (size_t i = 0; i < it_ckpt_count(ck); i++) {
        const it_ckpt_entry *e = it_ckpt_at(ck, i);
        printf("  %-48s %-8s [", e->name, it_dtype_name(e->dtype));
        for (uint32_t d = 0; d < e->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)e->dims[d]);
        printf("]\n");
        total += e->nbytes;
    }
    printf("  %.3f MB of data\n", (double)total / 1e6);
    it_ckpt_close(ck);
    return IT_OK;
}

static it_status show(const char *path) {
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".ckpt") == 0) return show_file(path);
    char file[4096];
    snprintf(file, sizeof file, "%s/trainer_state.json", path);
    FILE *f = fopen(file, "r");
    if (!f) {
        int err = errno;
        struct stat sb;
        if (stat(path, &sb) != 0) return it_error(IT_ERR_NOT_FOUND, "%s: %s", path, strerror(errno));
        if (err != ENOENT && err != ENOTDIR) /* there, but unreadable */
            return it_error(IT_ERR_IO, "%s: %s", file, strerror(err));
        return it_error(IT_ERR_NOT_FOUND, "%s: not a checkpoint directory (%s)", path,
                        S_ISDIR(sb.st_mode) ? "no trainer_state.json" : "a file, and not a .ckpt one");
    }
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, k, stdout);
    fclose(f);
    it_status st = IT_OK;
    const char *names[] = {"model.ckpt", "optimizer.ckpt"};
    for (int i = 0; i < 2 && !st; i++) {
        snprintf(file, sizeof file, "%s/%s", path, names[i]);
        FILE *g = fopen(file, "rb");
        if (!g) continue;
        fclose(g);
        st = show_file(file);
    }
    return st;
}

static it_status load_llmc(const char *app, const char *path, it_model **m) {
    it_device cpu;
    it_status st = it_device_parse("cpu", &cpu);
    if (st) return st;
    return it_model_load_family(app, path, cpu, NULL, m);
}

static it_status to_llmc(const char *dir, const char *out, const char *like) {
    char app[32], source[4096];
    it_status st = it_ckpt_origin(dir, app, sizeof app, source, sizeof source);
    if (st) return st;
    if (!like && !*source)
        return it_error(IT_ERR_INVALID_ARG,
                        "%s: the run did not start from an llm.c file; give one of the same model with --like FILE",
                        dir);
    it_model *m = NULL;
    if ((st = load_llmc(app, like ? like : source, &m)))
        return it_error_context("the llm.c header (--like, or the run's --llmc_filepath): ");
    if (!(st = it_ckpt_load_model_dir(m, dir, false))) st = it_model_save(m, out);
    it_model_free(m);
    return st;
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static it_status to_hf(const char *in, const char *out, const char *dtype, const char *shard, const char *like) {
    it_hf_save_options o = {IT_DTYPE_FP32, 0};
    it_status st = it_hf_parse_size(shard ? shard : "5GB", &o.max_shard_bytes);
    if (st) return it_error_context("--max_shard_size: ");
    if (dtype && (st = it_dtype_from_name(dtype, &o.dtype))) return it_error_context("--dtype: ");
    it_model *m = NULL;
    if (!is_dir(in)) {
        it_device cpu;
        if (!(st = it_device_parse("cpu", &cpu))) st = it_model_load(in, cpu, &m);
    } else {
        char app[32], source[4096], hf[4096];
        if ((st = it_ckpt_origin(in, app, sizeof app, source, sizeof source))) return st;
        if ((st = it_ckpt_origin_hf(in, hf, sizeof hf))) return st;
        if (!like && !*source && *hf) like = hf; /* the run's --hf_model gives the model's shape */
        if (!like && !*source)
            return it_error(IT_ERR_INVALID_ARG,
                            "%s: the run started from no model file; give the model it started "
                            "from with --like FILE|HFDIR",
                            in);
        if (like && is_dir(like)) {
            it_device cpu;
            if (!(st = it_device_parse("cpu", &cpu))) st = it_hf_load(like, cpu, NULL, &m);
        } else {
            st = load_llmc(app, like ? like : source, &m);
        }
        if (st) return it_error_context("the model's shape (--like, or the run's --llmc_filepath): ");
        st = it_ckpt_load_model_dir(m, in, false);
    }
    if (!st) st = it_hf_save(m, out, &o);
    it_model_free(m);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    const char *cmd = argv[1];
    it_status st;
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) return usage(stdout);
    if (strcmp(cmd, "show") == 0 && argc == 3) {
        st = show(argv[2]);
    } else if (strcmp(cmd, "to-llmc") == 0 && (argc == 4 || (argc == 6 && strcmp(argv[4], "--like") == 0))) {
        st = to_llmc(argv[2], argv[3], argc == 6 ? argv[5] : NULL);
        if (!st) printf("wrote %s\n", argv[3]);
    } else if (strcmp(cmd, "from-llmc") == 0 && argc == 5) {
        it_model *m = NULL;
        st = load_llmc(argv[2], argv[3], &m);
        char *real = st ? NULL : realpath(argv[3], NULL); /* later conversions find it from anywhere */
        if (!st) st = it_ckpt_save_model_dir(m, argv[2], real ? real : argv[3], argv[4]);
        free(real);
        it_model_free(m);
        if (!st) printf("wrote %s\n", argv[4]);
    } else if (strcmp(cmd, "from-hf") == 0 && argc == 4) {
        it_device cpu;
        it_model *m = NULL;
        if (!(st = it_device_parse("cpu", &cpu)) && !(st = it_hf_load(argv[2], cpu, NULL, &m)))
            st = it_model_save(m, argv[3]);
        it_model_free(m);
        if (!st) printf("wrote %s\n", argv[3]);
    } else if (strcmp(cmd, "to-hf") == 0 && argc >= 4 && argc % 2 == 0) {
        const char *dtype = NULL, *shard = NULL, *like = NULL;
        for (int i = 4; i < argc; i += 2) {
            if (strcmp(argv[i], "--dtype") == 0)
                dtype = argv[i + 1];
            else if (strcmp(argv[i], "--max_shard_size") == 0)
                shard = argv[i + 1];
            else if (strcmp(argv[i], "--like") == 0)
                like = argv[i + 1];
            else
                return usage(stderr);
        }
        st = to_hf(argv[2], argv[3], dtype, shard, like);
        if (!st) printf("wrote %s\n", argv[3]);
    } else {
        return usage(stderr);
    }
    return st ? fail(st) : 0;
}
