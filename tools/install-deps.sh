#!/usr/bin/env bash
# Installs what the build and the tests need on a Debian machine; idempotent.
# Usage: tools/install-deps.sh [--python-goldens]
#   --python-goldens  also installs torch + transformers (only `make goldens` needs them)
set -euo pipefail

debs=(build-essential pkg-config
      libmicrohttpd-dev libjansson-dev libuv1-dev libcurl4-openssl-dev
      libonig-dev libsentencepiece-dev sentencepiece
      clang llvm libclang-rt-14-dev zstd curl python3 python3-pip python3-venv)

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

# Python packages the test tools use (reference clients, not the engine).
py_pkgs=(numpy)
if [ "${1:-}" = "--python-goldens" ]; then
    py_pkgs+=(torch transformers tokenizers safetensors jinja2 sentencepiece)
fi
need=()
for p in "${py_pkgs[@]}"; do
    python3 -c "import $p" 2>/dev/null || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${need[*]}"
    python3 -m pip install -q "${need[@]}"
fi
echo "install-deps: ok"
