/* dtype.h: the sizes and names of element types and devices. */
#include "tensor/dtype.h"

size_t dtype_size(enum dtype dt)
{
    static const size_t sizes[DTYPE_COUNT] = {4, 8, 4, 8, 1};
    return (unsigned)dt < DTYPE_COUNT ? sizes[dt] : 0;
}

const char *dtype_name(enum dtype dt)
{
    static const char *names[DTYPE_COUNT] = {"f32", "f64", "i32", "i64", "u8"};
    return (unsigned)dt < DTYPE_COUNT ? names[dt] : "?";
}

const char *device_name(enum device d)
{
    return d == DEVICE_CPU ? "cpu" : d == DEVICE_CUDA ? "cuda" : "?";
}
