#!/bin/sh
# What both runtime images add to their base: the packages runtime-debs.sh listed for
# the build (RUNTIME_DEBS, one a line) with ca-certificates and curl (the HEALTHCHECK),
# the user strata (uid 10001) and its Hugging Face cache /data/hf.
# Usage: deploy/docker/runtime-setup.sh RUNTIME_DEBS
set -eu
# shellcheck disable=SC2046  # one package name a line
"$(dirname "$0")/apt-install.sh" ca-certificates curl $(cat "$1")
useradd --system --uid 10001 --user-group --create-home --home-dir /home/strata strata
mkdir -p /data/hf
chown strata:strata /data/hf
