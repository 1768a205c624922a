/* Atomic writes (issue 7): every file the project writes goes to "<path>.tmp.<pid>.<n>" beside
 * it, is flushed and fsynced, then renamed over the final name. So:
 *   - a writer SIGKILLed mid-write leaves the previous file byte for byte (a paced writer, killed
 *     at a known point, and a real GPT-2 checkpoint save killed as soon as its temp file grows);
 *   - a writer that fails (the file size limit, here) reports IT_ERR_IO, leaves the previous
 *     file and removes its temp file;
 *   - a completed write replaces the file in one step: a reader that opened the old file still
 *     reads all of the old one, the name then holds all of the new one (a new inode), and no
 *     temp file is left. Checked for checkpoints, token shards and tokenizer files. */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#include "core/afile.h"
#include "infinitrain/data.h"
#include "infinitrain/models.h"
#include "it_test.h"
#include "test_data_util.h"

#define GFIX IT_SOURCE_DIR "/tests/fixtures/gpt2/"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A GPT-2 of about 13M parameters (53 MB): writing it takes long enough to be caught. */
static const it_gpt2_config big = {
    .block_size = 256, .vocab_size = 1000, .padded_vocab_size = 1024, .n_layer = 4, .n_head = 8, .n_embd = 512};

/* The writers run in a fresh process (this program, re-executed with --child MODE PATH): a child
 * that only forked would inherit the parent's OpenMP runtime without its threads and could hang
 * in its first parallel region. */
static pid_t spawn_writer(const char *mode, const char *path) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"test_atomic_write", "--child", (char *)mode, (char *)path, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

/* The child writers; exit status 0 = as expected. */
static int child_main(const char *mode, const char *path) {
    if (strcmp(mode, "paced") == 0) { /* 4 MB in 16 KB pieces, 1 ms apart (~0.25 s) */
        it_afile *f = NULL;
        if (it_afile_open(path, &f)) return 2;
        static unsigned char chunk[16384];
        memset(chunk, 0xAB, sizeof chunk);
        for (int i = 0; i < 256; i++) {
            if (it_afile_write(f, chunk, sizeof chunk)) return 3;
            fflush(NULL); /* make the temp file grow as we go */
            usleep(1000);
        }
        return it_afile_commit(f) ? 4 : 0;
    }
    if (strcmp(mode, "save-big") == 0) {
        it_model *m = NULL;
        if (it_gpt2_new(&big, it_device_cpu(), 7, &m)) return 2;
        it_status st = it_model_save(m, path);
        it_model_free(m);
        return st ? 3 : 0;
    }
    if (strcmp(mode, "save-fsize") == 0) { /* the temp file may not pass 64 KB */
        signal(SIGXFSZ, SIG_IGN);          /* write() fails with EFBIG instead */
        struct rlimit rl = {65536, 65536};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 2;
        it_model *m = NULL;
        if (it_gpt2_load(GFIX "tiny_gpt2.bin", it_device_cpu(), &m)) return 3;
        it_status st = it_model_save(m, path);
        int ok = st == IT_ERR_IO && strstr(it_last_error(), path) != NULL;
        if (!ok) fprintf(stderr, "save past the file size limit: %s: %s\n", it_status_name(st), it_last_error());
        it_model_free(m);
        return ok ? 0 : 4;
    }
    return 127;
}

static bool same_bytes(const char *path, const unsigned char *want, size_t n) {
    size_t got = 0;
    unsigned char *b = read_bytes(path, &got);
    bool same = b && got == n && memcmp(b, want, n) == 0;
    free(b);
    return same;
}

/* The first temp file of writer `pid` for `path` in tmpdir ("" if none); its size in *size. */
static const char *temp_of(const char *path, pid_t pid, off_t *size) {
    static char found[600];
    char prefix[600];
    const char *base = strrchr(path, '/') + 1;
    snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", base, (long)pid);
    found[0] = '\0';
    *size = -1;
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        snprintf(found, sizeof found, "%s/%s", tmpdir, e->d_name);
        struct stat st;
        if (stat(found, &st) == 0) *size = st.st_size;
        break;
    }
    if (d) closedir(d);
    return found;
}

/* Names in tmpdir containing ".tmp." */
static int count_temps(void) {
    int n = 0;
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void remove_temps(void) {
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) unlink(tmp_path(e->d_name));
    if (d) closedir(d);
}

/* Waits until writer `pid`'s temp file for `path` holds at least `min_bytes`, then SIGKILLs the
 * writer. Returns the temp file's size seen just before the kill (-1: the writer ended first or
 * never wrote within `timeout_s`). */
static off_t kill_when_grown(pid_t pid, const char *path, off_t min_bytes, double timeout_s) {
    double t0 = now_s();
    off_t size = -1;
    int status;
    while (now_s() - t0 < timeout_s) {
        temp_of(path, pid, &size);
        if (size >= min_bytes) break;
        if (waitpid(pid, &status, WNOHANG) == pid) return -1; /* finished (or died) first */
        if (size < 0) usleep(500);                            /* not started: poll gently */
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return size >= min_bytes ? size : -1;
}

/* ---- a writer killed mid-write ------------------------------------------------------------------ */

/* The paced writer, killed once 1 MB of its 4 MB is written. */
static void test_paced_writer_killed(const unsigned char *old, size_t old_n, const char *path) {
    pid_t pid = spawn_writer("paced", path);
    off_t seen = kill_when_grown(pid, path, 1 << 20, 30.0);
    CHECK_MSG(seen >= (1 << 20) && seen < (4 << 20), "paced writer: temp file at %lld bytes when killed",
              (long long)seen);
    CHECK_MSG(same_bytes(path, old, old_n), "paced writer killed mid-write: %s is not the previous file", path);
    off_t left = -1;
    temp_of(path, pid, &left);
    CHECK_MSG(left >= (1 << 20), "the killed writer's torn temp file should remain beside it (%lld bytes)",
              (long long)left);
    remove_temps();
}

/* it_model_save of a real checkpoint, killed as soon as its temp file has bytes. The kill may
 * land after the rename (the writer won the race): then the name must hold the whole new file. */
static void test_checkpoint_save_killed(const unsigned char *old, size_t old_n, const char *path) {
    int mid_write = 0;
    for (int attempt = 0; attempt < 3 && mid_write == 0; attempt++) {
        pid_t pid = spawn_writer("save-big", path);
        off_t seen = kill_when_grown(pid, path, 1, 60.0);
        off_t left = -1;
        temp_of(path, pid, &left);
        if (seen > 0 && left >= 0) { /* killed before the rename */
            mid_write++;
            CHECK_MSG(same_bytes(path, old, old_n), "checkpoint save killed at %lld bytes: %s changed", (long long)seen,
                      path);
        } else { /* finished first: all of the new file, or the old one */
            it_model *m = NULL;
            size_t n = 0;
            unsigned char *b = read_bytes(path, &n);
            bool old_file = b && n == old_n && memcmp(b, old, n) == 0;
            free(b);
            CHECK_MSG(old_file || it_gpt2_load(path, it_device_cpu(), &m) == IT_OK,
                      "after the writer ended, %s is neither the old nor a whole new checkpoint: %s", path,
                      it_last_error());
            it_model_free(m);
            /* put the old file back for the next attempt */
            write_bytes(path, old, old_n);
        }
        remove_temps();
    }
    printf("checkpoint save: killed mid-write %d time(s)\n", mid_write);
    CHECK_MSG(mid_write > 0, "never caught it_model_save mid-write in 3 attempts");
}

/* A write that fails (RLIMIT_FSIZE: the temp file may not pass 64 KB) reports IT_ERR_IO naming
 * the file, keeps the previous file and removes the temp file. In a child: the limit is
 * process-wide. */
static void test_failed_write(const unsigned char *old, size_t old_n, const char *path) {
    pid_t pid = spawn_writer("save-fsize", path);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "failed save: child status %d", status);
    CHECK_MSG(same_bytes(path, old, old_n), "a failed save changed %s", path);
    CHECK_MSG(count_temps() == 0, "a failed save left %d temp file(s)", count_temps());
    remove_temps();
}

/* ---- a completed write ------------------------------------------------------------------------ */

/* `write_new` replaces `path`: a reader of the old file keeps reading it whole, the name holds
 * the new bytes under a new inode, and no temp file remains. */
static void check_replace(const char *what, const char *path, it_status (*write_new)(const char *path),
                          const unsigned char *new_bytes, size_t new_n) {
    size_t old_n = 0;
    unsigned char *old = read_bytes(path, &old_n);
    FILE *reader = fopen(path, "rb");
    struct stat before, after;
    CHECK(old && reader && stat(path, &before) == 0);
    CHECK_OK(write_new(path));
    CHECK(stat(path, &after) == 0);
    CHECK_MSG(after.st_ino != before.st_ino, "%s: the new file should be a new inode (renamed into place)", what);
    unsigned char *seen = malloc(old_n + 1);
    size_t got = reader ? fread(seen, 1, old_n + 1, reader) : 0;
    CHECK_MSG(got == old_n && memcmp(seen, old, old_n) == 0, "%s: a reader of the old file read %zu of %zu old bytes",
              what, got, old_n);
    if (new_bytes) CHECK_MSG(same_bytes(path, new_bytes, new_n), "%s: the name does not hold the new bytes", what);
    CHECK_MSG(count_temps() == 0, "%s: %d temp file(s) left", what, count_temps());
    if (reader) fclose(reader);
    free(seen);
    free(old);
}

static it_model *new_model;
static it_status save_new_model(const char *path) { return it_model_save(new_model, path); }
static it_status write_new_shard(const char *path) {
    const uint32_t t[5] = {9, 8, 7, 6, 5};
    return it_shard_write(path, t, 5, false);
}
static it_status write_new_tokenizer(const char *path) {
    const char *toks[3] = {"x", "yy", "<|endoftext|>"};
    const size_t lens[3] = {1, 2, 13};
    return it_tokenizer_write(path, IT_TOKENIZER_MAGIC_GPT2, 3, 2, toks, lens);
}

static void test_completed_writes(const char *path) {
    CHECK_OK(it_gpt2_load(GFIX "tiny_gpt2.bin", it_device_cpu(), &new_model));
    if (!new_model) return;
    /* new contents: the fixture with every parameter negated */
    size_t fn = 0;
    unsigned char *fix = read_bytes(GFIX "tiny_gpt2.bin", &fn);
    for (size_t i = 1024; i + 4 <= fn; i += 4) fix[i + 3] ^= 0x80;
    const char *neg = tmp_path("negated.bin");
    write_bytes(neg, fix, fn);
    it_model_free(new_model);
    CHECK_OK(it_gpt2_load(neg, it_device_cpu(), &new_model));
    unlink(neg);
    check_replace("checkpoint", path, save_new_model, fix, fn);
    it_model_free(new_model);
    free(fix);

    const char *sp = tmp_path("shard.bin");
    const uint32_t t[3] = {1, 2, 3};
    CHECK_OK(it_shard_write(sp, t, 3, true));
    check_replace("token shard", sp, write_new_shard, NULL, 0);
    it_shard *s = NULL;
    CHECK_OK(it_shard_open(sp, &s));
    CHECK(s && it_shard_num_tokens(s) == 5 && it_shard_tokens(s)[0] == 9);
    it_shard_free(s);

    const char *tp = tmp_path("tok.bin");
    const char *toks[2] = {"a", "<|endoftext|>"};
    const size_t lens[2] = {1, 13};
    CHECK_OK(it_tokenizer_write(tp, IT_TOKENIZER_MAGIC_GPT2, 2, 1, toks, lens));
    check_replace("tokenizer", tp, write_new_tokenizer, NULL, 0);
    it_tokenizer *tk = NULL;
    CHECK_OK(it_tokenizer_load(tp, &tk));
    CHECK(tk && it_tokenizer_vocab_size(tk) == 3);
    it_tokenizer_free(tk);

    /* A save into a directory that does not exist fails without creating anything. */
    it_model *m = NULL;
    CHECK_OK(it_gpt2_load(GFIX "tiny_gpt2.bin", it_device_cpu(), &m));
    const char *bad = tmp_path("no_dir/ckpt.bin");
    CHECK_ERR_ALL(it_model_save(m, bad), IT_ERR_IO, bad);
    CHECK(access(bad, F_OK) != 0);
    it_model_free(m);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], argv[3]);
    make_tmpdir("it_test_atomic_write");
    /* the previous file: the fixture checkpoint, saved through it_model_save */
    const char *path = tmp_path("ckpt.bin");
    char keep[512];
    snprintf(keep, sizeof keep, "%s", path);
    it_model *m = NULL;
    CHECK_OK(it_gpt2_load(GFIX "tiny_gpt2.bin", it_device_cpu(), &m));
    if (!m) return it_test_report("test_atomic_write");
    CHECK_OK(it_model_save(m, keep));
    it_model_free(m);
    size_t old_n = 0;
    unsigned char *old = read_bytes(keep, &old_n);
    CHECK(old && old_n == 147968);

    test_paced_writer_killed(old, old_n, keep);
    test_checkpoint_save_killed(old, old_n, keep);
    test_failed_write(old, old_n, keep);
    test_completed_writes(keep);
    free(old);
    remove_tmpdir();
    return it_test_report("test_atomic_write");
}
