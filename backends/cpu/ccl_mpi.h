/* The CPU backend's collectives over a given MPI communicator, for the core's process groups
 * (src/dist): a group over part of the world has its own communicator (MPI_Comm_split), which
 * the backend's comm_init, bound to MPI_COMM_WORLD, cannot name. */
#ifndef IT_CPU_CCL_MPI_H
#define IT_CPU_CCL_MPI_H

#include <mpi.h>

#include "infinitrain/backend.h"

/* A communicator of the CPU ccl over the ranks of `parent` (duplicated: parent stays the
 * caller's), ranked as in parent; destroyed by the ccl's comm_destroy. Collective over parent.
 * Exported for test plugins whose own collectives are the CPU's (tests/plugin/p2pccl.c). */
IT_API it_status it_cpu_comm_over(MPI_Comm parent, it_comm **out);

/* The CPU backend's own table, for a test plugin that reuses its runtime and kernels: read
 * directly, since a plugin's it_backend_entry runs under the registry's lock, where
 * it_device_cpu() would wait for that lock. */
extern IT_API const it_backend it_cpu_backend;

#endif
