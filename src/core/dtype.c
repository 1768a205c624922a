/* placeholder until dtype.c lands */
#include "infinitrain/dtype.h"
size_t it_dtype_size(it_dtype dtype) { static const size_t s[] = {1,1,1,2,2,4,4,8,8,2,2,4,8}; return (unsigned)dtype < 13 ? s[dtype] : 0; }
