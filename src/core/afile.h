/* Atomic file writing: write to a temp file beside the target, then fsync + rename over the
 * final name + fsync of the directory. A reader sees either the old file or the whole new one,
 * never a torn write; an aborted or crashed write leaves the old file untouched.
 *
 *   it_afile *f; it_afile_open(path, &f);       creates "<path>.tmp.<pid>.<counter>"
 *   it_afile_write(f, buf, n) ...               on failure call it_afile_abort(f)
 *   it_afile_commit(f);                         always frees f, also on failure (temp removed)
 *
 * Every message names the path and strerror(errno). */
#ifndef IT_CORE_AFILE_H
#define IT_CORE_AFILE_H

#include "infinitrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct it_afile it_afile;

IT_API it_status it_afile_open(const char *path, it_afile **out);
IT_API it_status it_afile_write(it_afile *f, const void *data, size_t n);
IT_API it_status it_afile_commit(it_afile *f);
IT_API void it_afile_abort(it_afile *f);
/* The temp file's path (for tests and messages). */
IT_API const char *it_afile_temp_path(const it_afile *f);

#ifdef __cplusplus
}
#endif
#endif
