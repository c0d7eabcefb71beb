/* openapi_doc.h - the OpenAPI 3 document of the HTTP API (server/openapi.json),
 * NUL-terminated, embedded at build time. Thread: any (read-only). */
#ifndef STRATA_OPENAPI_DOC_H
#define STRATA_OPENAPI_DOC_H

#include <stddef.h>

extern const char openapi_doc_start[];
extern const char openapi_doc_end[];
size_t openapi_doc_size(void);

#endif
