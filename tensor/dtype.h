/* Element types and devices: the two enums shared by tensor.h and the kernel
 * interface (backend.h), and what each is called and weighs (dtype.c), kept
 * apart so CUDA (C++) sources can include them without C11 atomics, and so
 * a backend needs no tensor.c to size an element. */
#ifndef TRIB_TENSOR_DTYPE_H
#define TRIB_TENSOR_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dtype { DTYPE_F32, DTYPE_F64, DTYPE_I32, DTYPE_I64, DTYPE_U8, DTYPE_COUNT };
enum device { DEVICE_CPU, DEVICE_CUDA };

size_t dtype_size(enum dtype dt);        /* bytes of one element; 0 if invalid */
const char *dtype_name(enum dtype dt);   /* "f32", ...; "?" if invalid */
const char *device_name(enum device d);  /* "cpu" / "cuda"; "?" if invalid */

#ifdef __cplusplus
}
#endif

#endif
