/* nfc_internal.h - the generated tables behind nfc.c. */
#ifndef STRATA_UNICODE_NFC_INTERNAL_H
#define STRATA_UNICODE_NFC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define UNICODE_NFC_LIMIT 0x30000 /* no NFC data at or above (Unicode 9.0) */
#define UNICODE_NFC_BLOCK 128
#define UNICODE_NFC_HAS_DECOMP 0x100
#define UNICODE_NFC_COMP_SECOND 0x200
#define UNICODE_NFC_QC_NO 0x400

extern const uint8_t unicode_nfc_stage1[];
extern const uint16_t unicode_nfc_stage2[];
extern const uint32_t unicode_nfc_decomp_cp[];
extern const uint32_t unicode_nfc_decomp_off[];
extern const uint32_t unicode_nfc_decomp_data[];
extern const uint64_t unicode_nfc_comp_key[];
extern const uint32_t unicode_nfc_comp_val[];
extern const size_t unicode_nfc_n_decomp;
extern const size_t unicode_nfc_n_comp;

#endif
