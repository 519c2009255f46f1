/* Element types and devices: the two enums shared by tensor.h and the kernel
 * interface (backend.h), kept apart so CUDA (C++) sources can include them
 * without C11 atomics. */
#ifndef TRIB_TENSOR_DTYPE_H
#define TRIB_TENSOR_DTYPE_H

enum dtype { DTYPE_F32, DTYPE_F64, DTYPE_I32, DTYPE_I64, DTYPE_U8, DTYPE_COUNT };
enum device { DEVICE_CPU, DEVICE_CUDA };

#endif
