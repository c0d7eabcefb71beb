# syntax=docker/dockerfile:1
# strata images. Two final targets:
#   docker build -t strata:cuda .               CUDA runtime image (build with nvcc), the default
#   docker build -t strata:cpu --target cpu .   CPU-only image on debian:bookworm-slim
# Both bundle the demo model (models/demo), listen on 0.0.0.0:8080 and keep the
# Hugging Face cache on the volume /data/hf. Run:
#   docker run --rm -p 8080:8080 strata:cpu
#   docker run --rm --gpus all -p 8080:8080 -v strata-hf:/data/hf strata:cuda --model Qwen/Qwen3.5-0.8B
# Every server flag is also an environment variable STRATA_<FLAG> (see docs/deploy.md):
#   STRATA_MODEL, STRATA_HOST, STRATA_PORT, STRATA_API_KEY, STRATA_MAX_SEQS,
#   STRATA_CTX_SIZE, STRATA_THREADS, STRATA_DEVICE, STRATA_SHUTDOWN_TIMEOUT, ...
# Arguments after the image name are passed to `strata serve` and win over STRATA_*.

ARG CUDA_VERSION=13.0.1
ARG CUDA_UBUNTU=ubuntu24.04
ARG DEBIAN=bookworm

# The C build needs only these (tools/install-deps.sh installs the same on a host).
ARG BUILD_DEBS="build-essential pkg-config libmicrohttpd-dev libjansson-dev libuv1-dev \
libcurl4-openssl-dev libssl-dev libonig-dev libsentencepiece-dev"

# ----------------------------------------------------------------------------- sources
# What both build stages compile (and their install scripts), copied once.
FROM scratch AS src
WORKDIR /src
COPY Makefile ./
COPY config config
COPY engine engine
COPY kernels kernels
COPY models models
COPY server server
COPY deploy/docker deploy/docker

# ----------------------------------------------------------------------------- CPU build
# The packages are installed before the sources arrive, so a source change keeps that layer.
FROM debian:${DEBIAN}-slim AS build-cpu
ARG BUILD_DEBS
RUN --mount=from=src,source=/src/deploy/docker,target=/tmp/docker /tmp/docker/apt-install.sh ${BUILD_DEBS}
COPY --from=src /src /src
WORKDIR /src
ARG STRATA_MAKE_FLAGS=""
RUN make -j"$(nproc)" build/strata ${STRATA_MAKE_FLAGS} \
 && deploy/docker/runtime-debs.sh build/strata > build/runtime-debs.txt

# ----------------------------------------------------------------------------- CUDA build
FROM nvidia/cuda:${CUDA_VERSION}-devel-${CUDA_UBUNTU} AS build-cuda
ARG BUILD_DEBS
RUN --mount=from=src,source=/src/deploy/docker,target=/tmp/docker /tmp/docker/apt-install.sh ${BUILD_DEBS}
COPY --from=src /src /src
WORKDIR /src
ARG STRATA_MAKE_FLAGS=""
# strata plus the CUDA backend, build/libstrata_cuda.so (nvcc, sm_90 + PTX), which the
# binary loads at run time (--device auto picks the GPU when there is one).
RUN make -j"$(nproc)" build/strata cuda ${STRATA_MAKE_FLAGS} \
 && deploy/docker/runtime-debs.sh build/strata build/libstrata_cuda.so > build/runtime-debs.txt

# ----------------------------------------------------------------------------- CPU runtime
FROM debian:${DEBIAN}-slim AS cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# the build's runtime packages, curl, the user strata and /data/hf (deploy/docker/runtime-setup.sh)
RUN --mount=from=build-cpu,source=/src,target=/tmp/strata \
    /tmp/strata/deploy/docker/runtime-setup.sh /tmp/strata/build/runtime-debs.txt
COPY --from=build-cpu /src/build/strata /usr/local/bin/strata
COPY models/demo /opt/strata/models/demo
# MALLOC_ARENA_MAX=1: glibc otherwise keeps a peak-sized arena per thread after a
# burst of large requests, and malloc_trim cannot return a thread arena's top
# (strata serve sets the same when it is unset)
ENV HF_HOME=/data/hf \
    MALLOC_ARENA_MAX=1 \
    STRATA_HOST=0.0.0.0 \
    STRATA_PORT=8080 \
    STRATA_MODEL=/opt/strata/models/demo
VOLUME ["/data/hf"]
EXPOSE 8080
USER 10001:10001
WORKDIR /home/strata
# 503 while the model loads or the server drains, 200 when ready; the start period
# covers a first hub download into an empty cache.
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
    CMD ["/bin/sh", "-c", "curl -fsS http://127.0.0.1:${STRATA_PORT}/health > /dev/null || exit 1"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/strata", "serve"]

# ----------------------------------------------------------------------------- CUDA runtime
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_UBUNTU} AS cuda
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# the build's runtime packages, curl, the user strata and /data/hf (deploy/docker/runtime-setup.sh)
RUN --mount=from=build-cuda,source=/src,target=/tmp/strata \
    /tmp/strata/deploy/docker/runtime-setup.sh /tmp/strata/build/runtime-debs.txt
COPY --from=build-cuda /src/build/strata /usr/local/bin/strata
COPY --from=build-cuda /src/build/libstrata_cuda.so /usr/local/lib/strata/libstrata_cuda.so
COPY models/demo /opt/strata/models/demo
ENV HF_HOME=/data/hf \
    MALLOC_ARENA_MAX=1 \
    STRATA_HOST=0.0.0.0 \
    STRATA_PORT=8080 \
    STRATA_MODEL=/opt/strata/models/demo \
    STRATA_CUDA_LIB=/usr/local/lib/strata/libstrata_cuda.so \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME ["/data/hf"]
EXPOSE 8080
USER 10001:10001
WORKDIR /home/strata
HEALTHCHECK --interval=15s --timeout=5s --start-period=600s --retries=3 \
    CMD ["/bin/sh", "-c", "curl -fsS http://127.0.0.1:${STRATA_PORT}/health > /dev/null || exit 1"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/strata", "serve"]
