#!/usr/bin/env python3
"""check_gguf.py - reads a file `strata quantize` wrote with the gguf package's own GGUFReader
(llama.cpp's reader in Python) and checks it against what the writer promises:

    check_gguf.py OUT.gguf TYPE ARCH [CONVERTER.gguf]

- the architecture and the keys llama.cpp's loader needs for ARCH are there;
- every tensor has the type strata's rule gives it for TYPE (q8_0: Q8_0 where a row is whole
  32-blocks; q4_k: Q4_K where whole 256-blocks, else Q5_0 where whole 32-blocks; kept F32
  otherwise and for Gemma 4's per-layer table; vectors, norms, conv and A always F32);
- with CONVERTER.gguf (the same checkpoint converted by llama.cpp's own converter,
  tests/data/gguf/golden/): the same tensor names (MTP blocks aside), shapes and, for f32,
  the same bytes: the converter's transforms reproduced exactly.
"""
import sys

import gguf
import numpy as np

NEEDED = {
    "qwen35": ["block_count", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "attention.key_length", "rope.freq_base",
               "rope.dimension_count", "rope.dimension_sections", "ssm.conv_kernel",
               "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
               "full_attention_interval", "attention.layer_norm_rms_epsilon"],
    "gemma4": ["block_count", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "attention.key_length", "attention.key_length_swa",
               "attention.sliding_window", "attention.sliding_window_pattern",
               "attention.shared_kv_layers", "embedding_length_per_layer_input",
               "rope.freq_base", "rope.freq_base_swa", "rope.dimension_count",
               "rope.dimension_count_swa", "attention.layer_norm_rms_epsilon"],
    "nemotron_h": ["block_count", "embedding_length", "feed_forward_length",
                   "attention.head_count", "attention.head_count_kv", "ssm.conv_kernel",
                   "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
                   "attention.layer_norm_epsilon"],
}
ALWAYS_F32 = ("ssm_conv1d", "ssm_a", "ssm_d", "ssm_dt", "rope_freqs", "layer_output_scale")


def expected_type(t, qtype: str) -> str:
    ne0 = int(t.shape[0])
    parts = t.name.split(".")
    stem = parts[2] if parts[0] == "blk" else parts[0]  # blk.N.<stem>.weight, <stem>.weight
    is_matrix = (len(t.shape) == 2 and int(t.shape[1]) > 1 and stem not in ALWAYS_F32
                 and not stem.endswith("norm"))
    if not is_matrix or qtype == "f32":
        return "F32"
    if qtype in ("bf16", "f16"):
        return qtype.upper()
    if t.name == "per_layer_token_embd.weight":
        return "F32"
    if qtype == "q8_0":
        return "Q8_0" if ne0 % 32 == 0 else "F32"
    return "Q4_K" if ne0 % 256 == 0 else "Q5_0" if ne0 % 32 == 0 else "F32"


def main() -> int:
    path, qtype, arch = sys.argv[1:4]
    r = gguf.GGUFReader(path)
    bad = []
    got_arch = r.fields["general.architecture"].contents()
    if got_arch != arch:
        bad.append(f"general.architecture {got_arch!r}, expected {arch!r}")
    for k in NEEDED[arch]:
        if f"{arch}.{k}" not in r.fields:
            bad.append(f"key {arch}.{k} missing")
    if r.alignment != 32:
        bad.append(f"alignment {r.alignment}")
    for t in r.tensors:
        want = expected_type(t, qtype)
        if t.tensor_type.name != want:
            bad.append(f"{t.name} {list(t.shape)} is {t.tensor_type.name}, expected {want}")
        if t.data_offset % 32:
            bad.append(f"{t.name} at offset {t.data_offset}")
    if len(sys.argv) > 4:
        ref = {t.name: t for t in gguf.GGUFReader(sys.argv[4]).tensors
               if ".nextn." not in t.name}
        # the converter's MTP block (blk.N where N = the text layers) is not written
        n_layer = r.fields[f"{arch}.block_count"].contents()
        ref = {n: t for n, t in ref.items() if not n.startswith(f"blk.{n_layer}.")}
        mine = {t.name: t for t in r.tensors}
        if set(mine) != set(ref):
            bad.append(f"names differ: only here {sorted(set(mine) - set(ref))}, only in the "
                       f"converter's {sorted(set(ref) - set(mine))}")
        for n in sorted(set(mine) & set(ref)):
            a, b = mine[n], ref[n]
            if list(a.shape) != list(b.shape):
                bad.append(f"{n}: shape {list(a.shape)}, the converter's {list(b.shape)}")
            elif qtype == "f32" and a.data.tobytes() != b.data.tobytes():
                d = np.abs(np.asarray(a.data, np.float64) - np.asarray(b.data, np.float64)).max()
                bad.append(f"{n}: bytes differ from the converter's (max |diff| {d:.3g})")
    for b in bad[:20]:
        print(f"check_gguf: {path}: {b}", file=sys.stderr)
    print(f"check_gguf: {path}: {len(r.tensors)} tensors, {'ok' if not bad else 'FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
