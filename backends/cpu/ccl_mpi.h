/* The CPU backend's collectives over a given MPI communicator, for the core's process groups
 * (src/dist): a group over part of the world has its own communicator (MPI_Comm_split), which
 * the backend's comm_init, bound to MPI_COMM_WORLD, cannot name. */
#ifndef IT_CPU_CCL_MPI_H
#define IT_CPU_CCL_MPI_H

#include <mpi.h>

#include "infinitrain/backend.h"

/* A communicator of the CPU ccl over the ranks of `parent` (duplicated: parent stays the
 * caller's), ranked as in parent; destroyed by the ccl's comm_destroy. Collective over parent. */
it_status it_cpu_comm_over(MPI_Comm parent, it_comm **out);

#endif
