/* gguf_write.h - writes a GGUF v3 file (little-endian) that llama.cpp reads: metadata of the
 * value types below, tensor infos, and the tensor data streamed in declaration order, so a
 * model many times the size of memory can be written. The metadata and tensor infos are
 * kept until gguf_write_begin lays out the header (every offset must be known before the
 * first data byte); the data goes to PATH.tmp and is renamed to PATH only by
 * gguf_write_finish, so a failed or abandoned write leaves no file at PATH.
 *
 * Shapes are given outermost first (safetensors order) and stored as ne[] innermost first
 * (gguf.h's note on dims). Every tensor starts at a multiple of general.alignment (written
 * as a key, 32). Thread: one owner at a time. Errors name the file and the key or tensor. */
#ifndef STRATA_GGUF_WRITE_H
#define STRATA_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "models/load/gguf.h"

typedef struct gguf_write gguf_write;

/* Starts a file for path (the data goes to path.tmp, created by gguf_write_begin). Caller
 * frees with gguf_write_destroy. */
int gguf_write_create(gguf_write **out, const char *path, strata_err *err);
/* Removes path.tmp unless gguf_write_finish renamed it; accepts NULL. */
void gguf_write_destroy(gguf_write *w);

/* ---- metadata, before gguf_write_begin; keys must be unique ---- */
int gguf_write_u32(gguf_write *w, const char *key, uint32_t v, strata_err *err);
int gguf_write_i32(gguf_write *w, const char *key, int32_t v, strata_err *err);
int gguf_write_f32(gguf_write *w, const char *key, float v, strata_err *err);
int gguf_write_bool(gguf_write *w, const char *key, int v, strata_err *err);
int gguf_write_str(gguf_write *w, const char *key, const char *s, size_t len, strata_err *err);
/* An array of n elements of GGUF_VT_type (U8..F64 but STRING / ARRAY), little-endian values
 * back to back at data (bool: one byte each, 0 or 1). */
int gguf_write_arr(gguf_write *w, const char *key, int type, const void *data, uint64_t n,
                   strata_err *err);
/* An array of n strings (s[i] of len[i] bytes; len NULL: NUL-terminated). */
int gguf_write_strs(gguf_write *w, const char *key, const char *const *s, const size_t *len,
                    uint64_t n, strata_err *err);

/* A value as gguf.h read it from another file (same key, type and bytes). */
int gguf_write_kv(gguf_write *w, const gguf_kv *kv, strata_err *err);
/* ---- tensors ---- */
/* Declares a tensor of ggml type (GGUF_GGML_*) and shape[ndim] (outermost first, 1 <= ndim <=
 * 4, rows a whole number of the type's blocks); its data is written later, in this order. */
int gguf_write_tensor(gguf_write *w, const char *name, int type, int ndim, const int64_t *shape,
                      strata_err *err);
/* Creates path.tmp and writes the header; no metadata or tensor may be added after it. */
int gguf_write_begin(gguf_write *w, strata_err *err);
/* Appends len bytes of the current tensor's data; a tensor ends when its size is reached
 * (the padding to the next one is written then). */
int gguf_write_data(gguf_write *w, const void *data, size_t len, strata_err *err);
/* Checks every tensor was written in full, flushes, and renames path.tmp to path. */
int gguf_write_finish(gguf_write *w, strata_err *err);

#endif
