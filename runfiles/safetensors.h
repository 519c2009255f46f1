/* .safetensors files (the format PyTorch's `safetensors.torch.load_file`
 * reads): the trained policy exported for Python, and read back. Layout: u64
 * little-endian header length N, N bytes of JSON header padded with spaces
 * (8 + N a multiple of 8), then the raw little-endian data of every tensor,
 * one after another; header entries {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}} with offsets relative to the data section,
 * and an optional "__metadata__" object of strings.
 * Blocking file I/O; any thread (errors are per thread, runfiles/runfiles.h). */
#ifndef TRIB_RUNFILES_SAFETENSORS_H
#define TRIB_RUNFILES_SAFETENSORS_H

#include "tensor/tensor.h"

/* Header size limit (as the reference reader's): a larger header is refused
 * before it is allocated. */
#define SAFETENSORS_MAX_HEADER 100000000
/* Tensors in one file (a policy has at most 21), and JSON values in its
 * header (16 per tensor: an entry has 10 or fewer): more is refused, the
 * values counted as the header is read (in 64 KiB chunks, before it is
 * parsed), so a small file cannot make the reader allocate much more than
 * its own size, nor a large one much more than the bytes that hold its
 * first SAFETENSORS_MAX_VALUES values. */
#define SAFETENSORS_MAX_TENSORS 16384
#define SAFETENSORS_MAX_VALUES (16 * SAFETENSORS_MAX_TENSORS)

struct safetensors_entry {
    const char *name;
    const struct tensor *tensor;
};

struct safetensors_meta {
    const char *key;
    const char *value;
};

/* Writes n tensors (data in the given order, header entries too, after
 * "__metadata__" when n_meta > 0) to path atomically
 * (common/atomic_file.h). Every dtype is accepted (F32 F64 I32 I64 U8); a CUDA
 * tensor is copied to the host first (tensor_copy_to_host, a blocking
 * device copy). Borrows everything. The caller must keep other threads from
 * writing the tensors meanwhile (pass tensor_snapshot()s of live
 * parameters). Returns 0, or -1 with runfiles_last_error "safetensors_save: ..."
 * for a NULL/empty/duplicate name or "__metadata__" as a tensor name, a
 * NULL tensor, a duplicate or NULL metadata key/value, or a write failure
 * (directory missing or unwritable, disk full: "<path>: <strerror>"). */
int safetensors_save(const char *path, const struct safetensors_entry *tensors, int n,
                     const struct safetensors_meta *meta, int n_meta);

/* A loaded file. Everything belongs to it; tensor_retain a tensor to keep it
 * past safetensors_free. */
struct safetensors {
    char *path;                     /* the file it came from */
    int n;
    char **names;                   /* n, in data order */
    struct tensor **tensors;        /* n, CPU, names[i]'s tensor */
    int n_meta;
    struct safetensors_meta *meta;  /* n_meta, in header order */
};

/* Reads and validates path: the header length against the file size (and
 * SAFETENSORS_MAX_HEADER), the header is one JSON object followed only by
 * spaces, every entry has a known dtype, a shape of at most 4 non-negative
 * dims, data_offsets [begin, end] with shape x dtype size == end - begin,
 * inside the data section; tensors do not overlap and leave no byte of the
 * data section unindexed (as the reference reader demands); no duplicate
 * names; "__metadata__" maps strings to strings; at most
 * SAFETENSORS_MAX_TENSORS tensors and SAFETENSORS_MAX_VALUES JSON values
 * (counted while the header is read: "header holds more than 262144 JSON
 * values ..."). Unknown keys inside an entry are ignored.
 * Allocates no more than the file's size for tensors.
 * Returns a new struct safetensors (safetensors_free), or NULL with
 * runfiles_last_error "safetensors_load: <path>: <problem>". */
struct safetensors *safetensors_load(const char *path);

/* The tensor named name (borrowed), or NULL with runfiles_last_error
 * "safetensors: <path>: no tensor \"<name>\"". */
struct tensor *safetensors_get(const struct safetensors *st, const char *name);

/* The metadata value of key (borrowed), or NULL (no error set). */
const char *safetensors_meta_get(const struct safetensors *st, const char *key);

/* Drops the tensors' references and frees st. Accepts NULL. */
void safetensors_free(struct safetensors *st);

#endif
