/* safetensors.h - a checkpoint's tensors, mmapped and validated, never copied.
 *
 * Opens one .safetensors file or a directory (model.safetensors, or the shards named
 * by model.safetensors.index.json). Every header is parsed with jansson and checked
 * before any tensor is exposed: dtype known, shape x dtype size == byte length,
 * offsets inside the file, no overlapping ranges, names unique across shards, and
 * the index's weight_map agrees with the shards. Errors name the file and tensor.
 * Thread: any; a st_model is read-only after st_open. */
#ifndef STRATA_SAFETENSORS_H
#define STRATA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype.h"
#include "engine/base/err.h"

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name; /* owned by the st_model */
    dtype dt;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* inside the mmap; nbytes long */
    size_t nbytes;
    const char *file; /* path of the file holding it (for messages) */
} st_tensor;

typedef struct st_model st_model;

/* path: a directory or a single .safetensors file. Caller frees with st_close. */
int st_open(st_model **out, const char *path, strata_err *err);
void st_close(st_model *m);

/* NULL when absent. */
const st_tensor *st_find(const st_model *m, const char *name);
int st_count(const st_model *m);
const st_tensor *st_get(const st_model *m, int i);

/* Parses a header (the JSON after the 8-byte length) for a data section of data_len
 * bytes and reports the first problem. Exposed for the fuzz harness and tests. */
int st_check_header(const char *json, size_t json_len, size_t data_len, const char *file,
                    strata_err *err);

#endif
