/* The `noentry` test plugin: a loadable shared object that exports a symbol, but not
 * it_backend_entry (a typo'd or C++-mangled entry point looks like this to the loader). */
#include "infinitrain/backend.h"

IT_BACKEND_EXPORT const it_backend *it_backend_entry_point(void) { return NULL; }
