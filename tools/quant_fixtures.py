#!/usr/bin/env python3
"""Writes the fixtures of tests/unit/test_quant.c: random blocks of Q8_0, Q4_0, Q4_K, Q6_K and
Q5_0 with their values as the `gguf` package dequantizes them, and f32 rows with the bytes the
package's Q8_0, Q4_0 and Q5_0 quantizers make (the package ports llama.cpp's reference code to
numpy). The package has no Q4_K / Q6_K quantizer: with --llama-cpp DIR (a llama.cpp source
tree, e.g. vendor/llama.cpp of PyPI's llama-cpp-python sdist) the script also compiles
llama.cpp's ggml-quants.c (cc -O2, generic x86-64 as llama.cpp builds ggml-base) and
records what quantize_row_q4_K_ref / _q6_K_ref make of rows of 256; without it the
committed quantize_k.bin is left as it is.

    python3 tools/quant_fixtures.py [--llama-cpp DIR]   # rewrites tests/data/quant/
    python3 tools/quant_fixtures.py --blocks 4096 --out /tmp/q   # a large set, then
    STRATA_QUANT_FIXTURES=/tmp/q build/tests/test_quant

File layout (little-endian): dequant_<type>.bin = u32 n_blocks, the blocks, then n_blocks ·
block_elems f32; quantize.bin = u32 n, n f32, then their Q8_0, Q4_0 and Q5_0 bytes;
quantize_k.bin = u32 n, n f32, their Q4_K bytes, their Q6_K bytes. Seeded: the same
command writes the same files."""
import argparse
import os
import struct
import subprocess
import tempfile

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

TYPES = [("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_k", T.Q4_K), ("q6_k", T.Q6_K), ("q5_0", T.Q5_0)]


def f16_scales(rng, n):
    """n finite f16 bit patterns: both signs, subnormals, zero and the largest value among
    them, so the C f16 conversion meets every case the files can hold."""
    bits = rng.integers(0, 0x7C00, n, dtype=np.uint16)  # exponent < 31: finite
    bits |= (rng.integers(0, 2, n, dtype=np.uint16) << 15).astype(np.uint16)
    special = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x3C00], dtype=np.uint16)
    k = min(n, len(special))
    bits[:k] = special[:k]
    return bits


def random_blocks(rng, qtype, n):
    block, size = quants.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n, size), dtype=np.uint8)
    # the f16 fields: Q8_0 / Q4_0 / Q5_0 start with d, Q4_K with d and dmin, Q6_K ends with d
    offsets = {T.Q8_0: [0], T.Q4_0: [0], T.Q5_0: [0], T.Q4_K: [0, 2], T.Q6_K: [size - 2]}[qtype]
    for off in offsets:
        raw[:, off:off + 2] = f16_scales(rng, n).view(np.uint8).reshape(n, 2)
    return raw


def quantize_rows(rng, n_blocks):
    """Rows of 32-value blocks at scales from 1e-6 to 1e7 (d overflows f16 at the top), with
    the cases the rounding rules decide: ties of roundf (away from zero), the first of two
    equal magnitudes, all zeros, a single value, negative maxima."""
    x = rng.standard_normal((n_blocks, 32)).astype(np.float32)
    x *= (10.0 ** rng.uniform(-6, 7, (n_blocks, 1))).astype(np.float32)
    x[0] = 0
    x[1] = 0
    x[1, 5] = -3.0
    x[2] = np.arange(32, dtype=np.float32) - 15.5  # amax 16.5: many exact halves after scaling
    x[3] = np.float32(127.0) * (rng.integers(-254, 255, 32) / np.float32(254.0))  # d = 1: ties
    x[3, 0] = 127.0
    x[4] = rng.uniform(-1, 1, 32).astype(np.float32)
    x[4, 3], x[4, 9] = 2.0, -2.0  # equal magnitudes, positive first
    x[5] = -np.abs(x[5])  # negative maximum
    return x.reshape(-1)


# stdin: u32 ggml type, u32 n, n f32; stdout: the reference quantizer's bytes. The stubs
# stand in for functions of llama.cpp's ggml.c that the quantizers' file links to but the
# _ref quantizers never call.
LLAMA_HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "ggml-quants.h"
void ggml_abort(const char *f, int l, const char *fmt, ...) { (void)f; (void)l; (void)fmt; abort(); }
size_t ggml_row_size(enum ggml_type t, int64_t n) { (void)t; (void)n; abort(); }
const char *ggml_type_name(enum ggml_type t) { (void)t; return "?"; }
size_t ggml_type_size(enum ggml_type t) { (void)t; abort(); }
int main(void) {
    uint32_t t, n;
    if (fread(&t, 4, 1, stdin) != 1 || fread(&n, 4, 1, stdin) != 1) return 1;
    float *x = malloc(4 * (size_t)n);
    void *y = calloc(n, 1);
    if (!x || !y || fread(x, 4, n, stdin) != n) return 1;
    if (t == 12) quantize_row_q4_K_ref(x, y, n);
    else if (t == 14) quantize_row_q6_K_ref(x, y, n);
    else return 2;
    fwrite(y, 1, (t == 12 ? 144 : 210) * (size_t)(n / 256), stdout);
    return 0;
}
"""


def llama_quantize_k(src, x):
    """x quantized to Q4_K and Q6_K by llama.cpp's reference C at src."""
    g = os.path.join(src, "ggml")
    with tempfile.TemporaryDirectory() as tmp:
        exe, c = os.path.join(tmp, "q"), os.path.join(tmp, "harness.c")
        with open(c, "w") as f:
            f.write(LLAMA_HARNESS)
        inc = ["-I" + os.path.join(g, d) for d in ("include", "src", "src/ggml-cpu")]
        subprocess.run(["cc", "-O2", *inc, c, os.path.join(g, "src", "ggml-quants.c"), "-o", exe, "-lm"],
                       check=True)
        run = lambda t: subprocess.run([exe], input=struct.pack("<II", t, x.size) + x.tobytes(),
                                       capture_output=True, check=True).stdout
        return run(int(T.Q4_K)), run(int(T.Q6_K))


def k_rows(rng, n_blocks):
    """Rows of 256-value blocks as test_quant.c's bound tests draw them: one scale per block
    (1e-5 to 1e4, so d is a subnormal half at the bottom), sub-blocks of noise, one-signed
    runs, outliers and zeros."""
    x = rng.standard_normal((n_blocks, 16, 16)).astype(np.float32)
    x *= (10.0 ** rng.uniform(-5, 4, (n_blocks, 1, 1))).astype(np.float32)
    kind = rng.integers(0, 5, (n_blocks, 16))
    x[kind == 1] = np.abs(x[kind == 1])
    x[kind == 2] = -np.abs(x[kind == 2])
    x[kind == 3] = 0
    x[kind == 4, 7] *= 20
    return x.reshape(-1)


def write(path, *parts):
    with open(path, "wb") as f:
        for p in parts:
            f.write(p if isinstance(p, bytes) else np.ascontiguousarray(p).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "quant"))
    ap.add_argument("--blocks", type=int, default=0, help="blocks per type (default: small committed set)")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--llama-cpp", help="llama.cpp source tree: also write quantize_k.bin")
    ap.add_argument("--k-blocks", type=int, default=64,
                    help="256-value blocks of quantize_k.bin (drawn last: the other files do not change)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    for name, qt in TYPES:
        block, _ = quants.GGML_QUANT_SIZES[qt]
        n = a.blocks or (16 if block == 32 else 4)
        raw = random_blocks(rng, qt, n)
        vals = quants.dequantize(raw, qt).astype(np.float32).reshape(-1)
        write(os.path.join(a.out, f"dequant_{name}.bin"), struct.pack("<I", n), raw, vals)
    x = quantize_rows(rng, a.blocks or 24)
    with np.errstate(over="ignore"):  # the d of the 1e7 rows overflows f16, as in C
        q8 = quants.quantize(x.reshape(1, -1), T.Q8_0)
        q4 = quants.quantize(x.reshape(1, -1), T.Q4_0)
        q5 = quants.quantize(x.reshape(1, -1), T.Q5_0)
    write(os.path.join(a.out, "quantize.bin"), struct.pack("<I", x.size), x, q8, q4, q5)
    if a.llama_cpp:
        xk = k_rows(rng, a.k_blocks)
        q4k, q6k = llama_quantize_k(a.llama_cpp, xk)
        write(os.path.join(a.out, "quantize_k.bin"), struct.pack("<I", xk.size), xk, q4k, q6k)


if __name__ == "__main__":
    main()
