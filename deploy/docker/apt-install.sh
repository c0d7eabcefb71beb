#!/bin/sh
# apt-get install (no recommends) of the packages named as arguments, then the package
# lists removed, so the layer keeps only what was installed.
# Usage: deploy/docker/apt-install.sh PACKAGE...
set -eu
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
rm -rf /var/lib/apt/lists/*
