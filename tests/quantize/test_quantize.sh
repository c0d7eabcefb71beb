#!/usr/bin/env bash
# `strata quantize` (models/load/gguf_quant.c) on the golden tiny checkpoints, read back three
# ways: strata's own GGUF loader, whose logits must equal the checkpoint's run with the same
# --quantization bit for bit (every transform the writer applies is undone exactly: qwen35's
# 1 + w norms round-trip on these weights, A is nudged so log(-A) gives A_log back); the gguf
# package's GGUFReader (check_gguf.py: types, shapes, keys, and the f32 files byte-identical
# to what llama.cpp's own converter wrote from the same checkpoint); and for the tokenizer,
# strata's GGUF tokenizer (engine/text/tok_ggml.c) against the checkpoint's tokenizer.json.
# Then the refusals: no file may be left behind. STRATA_TEST_QUICK=1 (the sanitizer run)
# quantizes qwen35_tiny alone, the checkpoint with the most transforms, tokenizes two of
# the texts and leaves the Python read of the tokenizer keys to the plain run.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
STRATA=$ROOT/$BUILD/strata
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$ROOT"
G=tests/golden
IDS=1,5,9,100,200,300,400,511,7,3,2,8,50,13,1,1,64,32

# Hk != Hv (qwen35_tiny: 2 vs 4 V heads, tiled), Hk == Hv, Gemma 4, Nemotron-H
models="qwen35_tiny:qwen35 qwen35_equal:qwen35 gemma4_tiny:gemma4 nemotron_h_nofloor:nemotron_h"
[ "${STRATA_TEST_QUICK:-0}" = 1 ] && models=qwen35_tiny:qwen35
for m in $models; do
    name=${m%%:*} arch=${m##*:}
    for t in f32 q8_0 q4_k; do
        out=$TMP/$name-$t.gguf
        "$STRATA" quantize $G/$name "$out" --type $t --threads 2 2> "$TMP/log" ||
            fail "quantize $name $t: $(cat "$TMP/log")"
        [ ! -e "$out.tmp" ] || fail "$out.tmp left behind"
        q=$t; [ $t = f32 ] && q=none
        "$STRATA" logits --model "$out" --prompt-ids $IDS --out "$TMP/a.bin" --device cpu \
            --threads 2 2> "$TMP/log" || fail "logits $out: $(cat "$TMP/log")"
        "$STRATA" logits --model $G/$name --quantization $q --prompt-ids $IDS --out "$TMP/b.bin" \
            --device cpu --threads 2 2> "$TMP/log" || fail "logits $name: $(cat "$TMP/log")"
        cmp -s "$TMP/a.bin" "$TMP/b.bin" ||
            fail "$name $t: the GGUF's logits differ from --quantization $q on the checkpoint"
        ref=tests/data/gguf/golden/$name-f32.gguf
        [ -f "$ref" ] || ref=
        python3 tests/quantize/check_gguf.py "$out" $t $arch $ref || fail "check_gguf $out"
    done
done

# the tokenizer and chat template: a real tokenizer beside the tiny weights, quantized, then
# the GGUF alone must tokenize and decode as the checkpoint does. stage NAME TOKENIZER
# makes $TMP/NAME (the checkpoint's config and weights, the tokenizer's files) and
# $TMP/alone/NAME.gguf (no tokenizer files beside it, so strata reads the keys).
stage() {
    local st=$TMP/$1
    mkdir -p "$st" "$TMP/alone"
    cp $G/$1/config.json "$st/"
    [ -f $G/$1/generation_config.json ] && cp $G/$1/generation_config.json "$st/"
    ln -s "$ROOT/$G/$1/model.safetensors" "$st/model.safetensors"
    for f in tokenizer.json tokenizer_config.json; do
        zstd -dq tests/data/tokenizers/$2/$f.zst -o "$st/$f" || fail "unzstd $2/$f"
    done
}
round_trip() { # NAME TEXTS DECODE-TEXT
    local st=$TMP/$1 gg=$TMP/alone/$1.gguf text sp a b ids
    "$STRATA" quantize "$st" "$gg" 2> "$TMP/log" || fail "quantize $1 with tokenizer: $(cat "$TMP/log")"
    grep -q "no tokenizer written" "$TMP/log" && fail "$1: tokenizer not written: $(cat "$TMP/log")"
    while IFS= read -r text; do
        for sp in "" --add-special; do
            a=$("$STRATA" tokenize --model "$gg" --text "$text" $sp 2>&1) || fail "tokenize gguf: $a"
            b=$("$STRATA" tokenize --model "$st" --text "$text" $sp 2>&1) || fail "tokenize: $b"
            [ "$a" = "$b" ] || fail "$1: tokenize '$text' $sp: gguf $a, checkpoint $b"
        done
    done <<< "$2"
    ids=$("$STRATA" tokenize --model "$st" --text "$3") || fail "tokenize"
    ids=$(tr -d '[] ' <<< "$ids")
    for sp in "" --skip-special; do
        a=$("$STRATA" tokenize --model "$gg" --decode "$ids" $sp) &&
            b=$("$STRATA" tokenize --model "$st" --decode "$ids" $sp) || fail "decode"
        [ "$a" = "$b" ] || fail "$1: decode $sp: gguf '$a', checkpoint '$b'"
    done
}

stage qwen35_tiny qwen35
printf '%s' '{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}' \
    > "$TMP/qwen35_tiny/chat_template.jinja"
texts=$(cat <<'TEXTS'
Hello world! How are you today?
<|im_start|>user
 def f(x):\n    return x**2  # 12345 ünïcödé 日本語 🙂
<think>reasoning</think> <|endoftext|>
TEXTS
)
[ "${STRATA_TEST_QUICK:-0}" = 1 ] && texts=$(head -n 2 <<< "$texts") # each run loads 150k tokens
round_trip qwen35_tiny "$texts" "Hello <|im_end|> world ünï 日本"
# the gguf package parses the 150k tokens in Python (20 s): the plain run only
[ "${STRATA_TEST_QUICK:-0}" = 1 ] || python3 - "$TMP/alone/qwen35_tiny.gguf" "$TMP/qwen35_tiny" <<'PY' || fail "tokenizer keys"
import gguf, json, sys
r = gguf.GGUFReader(sys.argv[1])
f = r.fields
assert f["tokenizer.ggml.model"].contents() == "gpt2"
assert f["tokenizer.ggml.pre"].contents() == "qwen35"
cfg = json.load(open(sys.argv[2] + "/tokenizer_config.json"))
tmpl = open(sys.argv[2] + "/chat_template.jinja").read()
assert f["tokenizer.chat_template"].contents() == tmpl, "chat template"
tok = json.load(open(sys.argv[2] + "/tokenizer.json"))
eos = [t["id"] for t in tok["added_tokens"] if t["content"] == cfg["eos_token"]][0]
assert f["tokenizer.ggml.eos_token_id"].contents() == eos
assert len(f["tokenizer.ggml.tokens"].data) >= len(tok["model"]["vocab"])
PY

# Gemma's tokenizer (Gemma 3's files; Gemma 4's differs in names only, spec 4.3) as the
# gemma4 model: added tokens, whitespace runs, byte fallback, BOS, the template
if [ "${STRATA_TEST_QUICK:-0}" != 1 ]; then
    stage gemma4_tiny gemma3
    texts=$(cat <<'TEXTS'
Hello world! How are you today?
<start_of_turn>user <b>bold</b>   three spaces		tabs ▁▁ literal
 def f(x):\n    return x**2  # 12345 ünïcödé 日本語 🙂 <unused5><eos>
TEXTS
)
    round_trip gemma4_tiny "$texts" "<bos><start_of_turn>model hi<end_of_turn> 🙂 <0x41>"
    python3 - "$TMP/alone/gemma4_tiny.gguf" "$TMP/gemma4_tiny" <<'PY' || fail "gemma4 tokenizer keys"
import gguf, json, sys
f = gguf.GGUFReader(sys.argv[1]).fields
assert f["tokenizer.ggml.model"].contents() == "gemma4"
assert "tokenizer.ggml.pre" not in f
tok = json.load(open(sys.argv[2] + "/tokenizer.json"))
types = f["tokenizer.ggml.token_type"].contents()
want = {t["id"]: 3 if t["special"] else 4 for t in tok["added_tokens"]}
assert all(types[i] == k for i, k in want.items()), "added tokens' types"
assert sum(1 for t in types if t == 6) == 256, "byte tokens"
assert f["tokenizer.chat_template"].contents() == json.load(open(sys.argv[2] + "/tokenizer_config.json"))["chat_template"]
PY
fi

# a GGUF input (models/load/gguf_requant.c): llama.cpp's converter's f32 files take q8_0 / q4_k /
# bf16 by the same rule as the checkpoint, so their logits equal --quantization on it bit for bit
gm="qwen35_tiny gemma4_tiny nemotron_h_nofloor"
[ "${STRATA_TEST_QUICK:-0}" = 1 ] && gm=qwen35_tiny
for name in $gm; do
    for t in q8_0 q4_k bf16; do
        out=$TMP/re-$name-$t.gguf
        "$STRATA" quantize tests/data/gguf/golden/$name-f32.gguf "$out" --type $t 2> "$TMP/log" ||
            fail "requantize $name $t: $(cat "$TMP/log")"
        q="--quantization $t"; [ $t = bf16 ] && q="--quantization none --dtype bf16"
        "$STRATA" logits --model "$out" --prompt-ids $IDS --out "$TMP/a.bin" --device cpu \
            --threads 2 2> "$TMP/log" || fail "logits $out: $(cat "$TMP/log")"
        "$STRATA" logits --model $G/$name $q --prompt-ids $IDS --out "$TMP/b.bin" --device cpu \
            --threads 2 2> "$TMP/log" || fail "logits $name: $(cat "$TMP/log")"
        [ $t = bf16 ] && "$STRATA" quantize $G/$name "$TMP/b.gguf" --type bf16 2> /dev/null &&
            "$STRATA" logits --model "$TMP/b.gguf" --prompt-ids $IDS --out "$TMP/b.bin" \
                --device cpu --threads 2 2> /dev/null
        cmp -s "$TMP/a.bin" "$TMP/b.bin" || fail "requantized $name $t: logits differ"
    done
done
# the converter's Q8_0 file: to q8_0 every tensor is copied as stored and every key kept; to
# f32 each matrix is the gguf package's dequantization of it; to q4_k it is refused (two
# roundings) naming the tensor, and done with --allow-requantize; a type strata does not
# read is refused by name
src=tests/data/gguf/golden/qwen35_tiny-q8_0.gguf
"$STRATA" quantize $src "$TMP/same.gguf" --type q8_0 2> "$TMP/log" || fail "q8_0 -> q8_0: $(cat "$TMP/log")"
"$STRATA" quantize $src "$TMP/deq.gguf" --type f32 2> "$TMP/log" || fail "q8_0 -> f32: $(cat "$TMP/log")"
out=$("$STRATA" quantize $src "$TMP/x.gguf" --type q4_k 2>&1) && fail "q8_0 -> q4_k without --allow-requantize"
grep -q "$src: tensor .* is Q8_0 already.*--allow-requantize" <<< "$out" || fail "requantize refusal: $out"
ls "$TMP"/x.gguf* 2> /dev/null && fail "a refused requantize left a file"
"$STRATA" quantize $src "$TMP/q4.gguf" --type q4_k --allow-requantize 2> "$TMP/log" ||
    fail "--allow-requantize: $(cat "$TMP/log")"
"$STRATA" logits --model "$TMP/q4.gguf" --prompt-ids $IDS --out "$TMP/a.bin" --device cpu \
    --threads 2 2> "$TMP/log" || fail "logits of the requantized file: $(cat "$TMP/log")"
python3 - $src "$TMP/same.gguf" "$TMP/deq.gguf" "$TMP/q4.gguf" "$TMP/q5k.gguf" <<'PY' || fail "requantized files"
import sys
import numpy as np
import gguf
src, same, deq, q4 = (gguf.GGUFReader(p) for p in sys.argv[1:5])
def tensors(r):
    return {t.name: t for t in r.tensors}
ts, tsame, tdeq, tq4 = tensors(src), tensors(same), tensors(deq), tensors(q4)
assert set(ts) == set(tsame) == set(tdeq) == set(tq4)
skip = {"general.alignment", "general.file_type"}
keys = lambda r: {k: r.fields[k].contents() for k in r.fields if k not in skip and not k.startswith("GGUF.")}
assert keys(src) == keys(same) == keys(deq), "keys"
assert same.fields["general.file_type"].contents() == 7 and deq.fields["general.file_type"].contents() == 0
Q8, F32, Q4K = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q4_K
for n, t in ts.items():
    assert tsame[n].tensor_type == t.tensor_type and bytes(tsame[n].data) == bytes(t.data), n
    if t.tensor_type == Q8:
        want = gguf.quants.dequantize(np.asarray(t.data), Q8)
        assert tdeq[n].tensor_type == F32 and np.array_equal(np.asarray(tdeq[n].data), want), n
        assert tq4[n].tensor_type in (Q4K, gguf.GGMLQuantizationType.Q5_0), n
    else:
        assert tdeq[n].tensor_type == t.tensor_type == F32 and bytes(tdeq[n].data) == bytes(t.data), n
# a Q5_K tensor: strata has no kernels or dequantizer for it
w = gguf.GGUFWriter(sys.argv[5], "qwen35")
w.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 176), dtype=np.uint8),
             raw_dtype=gguf.GGMLQuantizationType.Q5_K)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
out=$("$STRATA" quantize "$TMP/q5k.gguf" "$TMP/x.gguf" 2>&1) && fail "a Q5_K tensor accepted"
grep -q "tensor blk.0.ffn_up.weight is Q5_K, a type strata does not read" <<< "$out" || fail "Q5_K: $out"

# refusals: each a clear error naming the path, and no file left behind
out=$("$STRATA" quantize $G/qwen35_tiny "$TMP/no/such/dir/x.gguf" 2>&1) && fail "unwritable path accepted"
grep -q "$TMP/no/such/dir/x.gguf.tmp: cannot create" <<< "$out" || fail "unwritable path: $out"
out=$("$STRATA" quantize $G/qwen35_tiny "$TMP/x.gguf" --type q3_k 2>&1)
[ $? = 2 ] && grep -q -- "--type q3_k: allowed q8_0, q4_k, bf16, f16, f32" <<< "$out" || fail "type: $out"
out=$("$STRATA" quantize "$TMP/alone" "$TMP/x.gguf" 2>&1) && fail "a non-model accepted"
grep -q "$TMP/alone: not a model directory (no config.json)" <<< "$out" || fail "non-model: $out"
mkdir -p "$TMP/badw" && cp $G/qwen35_tiny/config.json "$TMP/badw/" && echo junk > "$TMP/badw/model.safetensors"
out=$("$STRATA" quantize "$TMP/badw" "$TMP/x.gguf" 2>&1) && fail "broken weights accepted"
grep -q "$TMP/badw" <<< "$out" || fail "broken weights: $out"
ls "$TMP"/x.gguf* 2> /dev/null && fail "a refused run left a file"
echo "test_quantize: ok (4 checkpoints x f32/q8_0/q4_k bit-identical through strata, read by gguf;"\
     "Qwen3.5 and Gemma tokenizer round trips; GGUF inputs requantized; refusals)"
