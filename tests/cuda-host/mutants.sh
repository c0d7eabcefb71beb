#!/usr/bin/env bash
# tests/cuda-host/mutants.sh - do the CUDA op tests catch typical kernel bugs? Plants one
# bug at a time into a copy of kernels/cuda (a dropped barrier, an off-by-one tail, wrong
# GQA head mappings, a delta rule ignoring the tiled V-head order, recurrent and chunked,
# a short warp reduction, two off-by-one conv windows, a decode GEMV
# that truncates x to bf16, one loading a batch over the one it has yet to sum, a fused residual norming the wrong row, a multi-weight
# GEMV segment edge off by one, a bf16 kv cache read wrong, four sampler slips, a fed id
# read from the next slot, a gated GEMV staging half a row short, a normed GEMV taking
# another group's 1 / rms, the per-head gain for a grouped norm or a one-warp sum of a wide
# group, a fused DeltaNet scaling
# k instead of q, a fused RoPE turning the wrong way, a paged cache read through the wrong
# block table row, T of the chunked delta rule solved with the wrong sign, a chunked SSD or
# a prefill attention that lets a token see the next one, a quantized GEMV decoding a Q6_K
# bit pair or a Q4_K min wrong or reading its tile from the wrong byte, a Q8_0 GEMV
# misplacing a block inside its 16-byte chunk), builds the host
# library from it and runs that kernel's op test
# (test_cuda_ops --only), which must fail on every one: comparisons that fail, or the
# runtime aborting on a fault. A mutant whose pattern is no longer in the source is an
# error too: the list must follow the kernels.
# Env (make cuda-host-check passes them): BUILD, CXX, HC_FLAGS. Exit 0 when all are caught.
set -u
BUILD=${BUILD:-build}
CXX=${CXX:-g++}
D=$BUILD/cuda-host
M=$D/mutant
HC_FLAGS=${HC_FLAGS:-"-std=c++17 -O2 -fPIC -Wall -Wextra -Wno-unknown-pragmas -pthread -Itests/cuda-host/include -I$D/src -I."}

# name | file | the op test that must fail | text in the file | its mutant
MUTANTS=(
    "dropped barrier|cuda_norm.cuh|rmsnorm|    if (lane == 0) sm[w] = v;
    __syncthreads();|    if (lane == 0) sm[w] = v;"
    "off-by-one tail|cuda_elementwise.cu|elementwise|i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + x[i];|i + 1 < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + x[i];"
    "attention GQA head mapping|cuda_attention.cu|attention|(size_t)kvh * G + hg) * D;|(size_t)hg * KV + kvh) * D;"
    "delta rule GQA head mapping|cuda_deltanet.cu|gated_delta|? h % Hk : h / (Hv / Hk);
    const int warp|? h % Hk : h % Hk;
    const int warp"
    "delta rule ignores the tiled V-head mapping|cuda_deltanet.cu|gated_delta|vmap == BK_VHEAD_TILED ? h % Hk : h / (Hv / Hk);
    const int warp|vmap == -1 ? h % Hk : h / (Hv / Hk);
    const int warp"
    "chunked delta rule ignores the tiled V-head mapping|cuda_deltanet_chunk.cu|gdn_chunked|a.vmap == BK_VHEAD_TILED ? h % a.Hk|a.vmap == -1 ? h % a.Hk"
    "short warp reduction|cuda_internal.cuh|rmsnorm|o = 16; o > 0; o >>= 1) v += |o = 16; o > 1; o >>= 1) v += "
    "conv window off by one|cuda_conv.cu|conv1d|src < W ? st|src <= W ? st"
    "decode conv window off by one|cuda_conv.cu|conv1d|n + r < W ? st|n + r <= W ? st"
    "decode GEMV x truncated to bf16, not rounded|cuda_matmul.cu|matmul|xw[i] = __bfloat16_as_ushort(__float2bfloat16_rn(mm_round_x(v)));|xw[i] = (uint16_t)(__float_as_uint(v) >> 16);"
    "residual output norm of the delta, not the sum|cuda_norm.cu|residual|o[j] = xr[j] * r * norm_gain(nw|o[j] = dr[j] * r * norm_gain(nw"
    "residual (row in registers) output norm of the delta, not the sum|cuda_norm.cu|residual|if (j < n) o[j] = v[e] * r * gn[e];|if (j < n) o[j] = d[e] * r * gn[e];"
    "GEMV loads a batch over the one it has yet to sum|cuda_matmul.cu|matmul|if (s + 2 < steps) ra = issue(ua, s + 2);|if (s + 2 < steps) ra = issue(ub, s + 2);"
    "matmul_n row on the wrong weight at a segment edge|cuda_internal.cuh|matmul_n|grow >= sg.end[j - 1])|grow > sg.end[j - 1])"
    "bf16 kv cache read off by a bit|cuda_attention.cu|attention|((const uint16_t *)c)[i] << 16)|((const uint16_t *)c)[i] << 15)"
    "sampler ties to the higher id|cuda_sample.cu|sample|(w == v && j < i)|(w == v && j > i)"
    "sampler does not count its token|cuda_sample.cu|sample|1u) + 2u;|1u) + 0u;"
    "top_p keeps one candidate too few|cuda_sample.cu|sample|keep = s_first < k ? s_first + 1 : k;|keep = s_first < k && s_first ? s_first : k;"
    "sampler feeds no next step|cuda_sample.cu|sample|if (q.feed) *q.feed = chosen;|if (q.feed) *q.feed = arg;"
    "fed id of the next slot|cuda_elementwise.cu|embed_fed|id = fed[slot[tok_seq[r]]];|id = fed[slot[tok_seq[r]] + 1];"
    "fused DeltaNet scales k instead of q|cuda_deltanet.cu|gdn|(rr < nc ? fu.q_scale : 1.0f)|(rr < nc ? 1.0f : fu.q_scale)"
    "fused RoPE turns the second half the wrong way|cuda_attention.cu|attn_prep|row[j] * c + row[j - half] * s;|row[j] * c - row[j - half] * s;"
    "gated GEMV stages one row too few|cuda_matmul.cu|matmul_glu|for (int i = threadIdx.x; i < M * k; i += MM_THREADS) {
            float v = ACT|for (int i = threadIdx.x; i < (M - 1) * k + k / 2; i += MM_THREADS) {
            float v = ACT"
    "normed GEMV takes the next group's 1 / rms|cuda_matmul.cu|matmul_gnorm|rs[t * gpr + g], w)|rs[t * gpr + (g + 1) % gpr], w)"
    "grouped normed GEMV reads the per-head gain|cuda_matmul.cu|matmul_gnorm|gn.gate_first ? j : j - g * gn.group|j - g * gn.group"
    "normed GEMV sums a wide group over one warp|cuda_matmul.cu|matmul_gnorm|float ss = norm_row_sum<NORM_BLOCK>(|float ss = norm_row_sum<32>("
    "paged kv rows from the wrong block table row|cuda_internal.cuh|attention|m.blk + (size_t)seq * (size_t)m.blk_w|m.blk + (size_t)seq"
    "chunked delta rule solves T with the wrong sign below the diagonal|cuda_deltanet_chunk.cu|gdn_chunked|T[(i * 16 + r) * GC_LDF + j * 16 + c] = -s;|T[(i * 16 + r) * GC_LDF + j * 16 + c] = s;"
    "chunked SSD lets a token see the next one|cuda_ssd_chunk.cu|ssd_chunked|i <= t ? expf(m.L[t] - m.L[i])|i <= t + 1 ? expf(m.L[t] - m.L[i])"
    "prefill attention sees one key past the token|cuda_attention_flash.cu|attention|kp <= pr && (a.window|kp <= pr + 1 && (a.window"
    "Q6_K GEMV takes a quant's top bits from the wrong bit pair|cuda_qmatmul.cu|quant|(((ve >> 2) & 3u) << 4)|(((ve >> 3) & 3u) << 4)"
    "Q4_K GEMV subtracts the other sub-block's min|cuda_qgemv.cu|quant|cf[3] = -(dm * mn1)|cf[3] = -(dm * mn0)"
    "Q8_0 GEMV ignores a block's 2-byte offset in its word|cuda_qgemv.cu|quant|v[j + 1], 16u + sh)|v[j + 1], 16u)"
    "quantized GEMV reads its tile from the aligned start, not the row's|cuda_qmatmul.cu|quant|tile[warp] + head + qm_block_off|tile[warp] + qm_block_off"
)

caught=0; missed=0
for entry in "${MUTANTS[@]}"; do
    IFS='|' read -r -d '' name file only from to <<<"$entry" || true
    to=${to%$'\n'}
    rm -rf "$M" && mkdir -p "$M/src/kernels/cuda" "$M/obj"
    if ! python3 - "kernels/cuda/$file" "$M/$file" "$from" "$to" <<'EOF'; then
import sys
src, dst, old, new = sys.argv[1:5]
text = open(src, encoding="utf-8").read()
if text.count(old) != 1:
    sys.exit(f"mutant pattern found {text.count(old)} times in {src}")
open(dst, "w", encoding="utf-8").write(text.replace(old, new))
EOF
        echo "ERROR  $name: the pattern is not (once) in kernels/cuda/$file"
        missed=$((missed + 1))
        continue
    fi
    python3 tests/cuda-host/hc_rewrite.py "$M/$file" "$M/src/kernels/cuda/$file"
    # a header changes every kernel file; a .cu only itself
    objs=()
    ok=1
    for cu in kernels/cuda/*.cu; do
        base=$(basename "$cu" .cu)
        if [ "${file##*.}" = cuh ] || [ "$file" = "$base.cu" ]; then
            gen=$M/src/kernels/cuda/$base.cu
            [ -e "$gen" ] || gen=$D/src/kernels/cuda/$base.cu
            $CXX -I"$M/src" $HC_FLAGS -x c++ -c "$gen" -o "$M/obj/$base.o" 2>"$M/build.log" || ok=0
            objs+=("$M/obj/$base.o")
        else
            objs+=("$D/src/kernels/cuda/$base.o")
        fi
    done
    if [ $ok = 0 ] || ! $CXX -shared -o "$M/libstrata_cuda.so" "${objs[@]}" "$D"/rt/*.o -pthread -ldl \
        2>>"$M/build.log"; then
        echo "ERROR  $name: the mutant did not build"; tail -5 "$M/build.log"
        missed=$((missed + 1))
        continue
    fi
    start=$SECONDS
    STRATA_CUDA_LIB=$PWD/$M/libstrata_cuda.so HC_COVERAGE= timeout 300 "$D/test_cuda_ops" --no-speed \
        --only "$only" >"$M/ops.log" 2>&1
    rc=$?
    nfail=$(grep -c ' FAIL$' "$M/ops.log")
    # caught: comparisons failed, or the runtime aborted naming a fault
    if { [ $rc -eq 1 ] && [ "$nfail" -gt 0 ]; } || [ $rc -eq 134 ]; then
        caught=$((caught + 1))
        first=$(grep -m1 ' FAIL$' "$M/ops.log" | awk '{print $1}')
        echo "caught $name ($file): rc $rc, $nfail comparisons failed (first: ${first:-abort}), $((SECONDS - start)) s"
    else
        missed=$((missed + 1))
        echo "MISSED $name ($file): test_cuda_ops --only $only rc $rc"; tail -3 "$M/ops.log"
    fi
done
rm -rf "$M"
echo "mutants: $caught caught, $missed missed"
[ $missed -eq 0 ]
