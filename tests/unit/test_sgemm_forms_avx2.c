/* test_sgemm_forms.c's checks on the AVX2 sgemm (backends/cpu/sgemm_avx2.c): the swapped
 * form bitwise equal to the plain one, nothing written outside C, within a double
 * reference's bound, the same bits on 1 to 4 threads, rows shared with stealing. It runs on
 * any CPU with AVX2 and FMA, AVX-512 ones included (IT_CPU_SGEMM=avx2). */
#define SGEMM_AVX2
#include "test_sgemm_forms.c"
