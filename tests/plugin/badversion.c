/* The `badversion` test plugin: built against a newer backend API than the core's, so the
 * loader must refuse it and say both version numbers. The loader reads api_version (and name,
 * for its message) before anything else, so the tables, whose layout would differ in a real
 * newer plugin, are left NULL. */
#include "infinitrain/backend.h"

static const it_backend bad_backend = {
    .api_version = IT_BACKEND_API_VERSION + 1,
    .name = "badversion",
    .default_autocast_dtype = IT_DTYPE_BF16,
    .host_memory = false,
    .runtime = NULL,
    .kernels = NULL,
    .ccl = NULL,
};

IT_BACKEND_EXPORT const it_backend *it_backend_entry(void) { return &bad_backend; }
