/* openapi_doc.c - server/openapi.json (written by tools/gen_openapi.py) embedded in
 * the binary, so /openapi.json needs no file at run time. The assembler includes
 * the file by a path relative to the repository root, where the build runs. */
#include "server/openapi_doc.h"

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global openapi_doc_start\n"
        "openapi_doc_start:\n"
        ".incbin \"server/openapi.json\"\n"
        ".global openapi_doc_end\n"
        "openapi_doc_end:\n"
        ".byte 0\n"
        ".previous\n");

size_t openapi_doc_size(void) { return (size_t)(openapi_doc_end - openapi_doc_start); }
