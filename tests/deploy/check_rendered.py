#!/usr/bin/env python3
"""Checks the Kubernetes objects that `kubectl kustomize` rendered for one overlay.

Usage: check_rendered.py OVERLAY RENDERED.yaml CONFIG_H [--gpu]
Prints one line per failed check and exits 1 when any failed. What it checks, and why:
- the Deployment's startup / readiness / liveness probes are HTTP GETs of /health on a
  port the container declares (a probe on a wrong port or path never goes ready);
- the Service selects the Deployment's pods and its targetPort is a container port;
- the ServiceMonitor selects the Service and scrapes a port the Service has, at /metrics;
- STRATA_API_KEY comes from a Secret via secretKeyRef and no Secret is rendered (the
  key is never inlined in the manifests);
- terminationGracePeriodSeconds exceeds STRATA_SHUTDOWN_TIMEOUT plus the preStop sleep;
- the HPA targets the Deployment on the pods metric strata_num_requests_waiting;
- the hub cache PVC exists, is mounted at HF_HOME;
- every STRATA_* variable set is an option of config/config.h or read by the sources
  (a typo would be silently ignored);
- the gpu overlay requests nvidia.com/gpu and STRATA_DEVICE=cuda, the cpu overlay no GPU;
- the pod runs as non-root.
"""

import os
import re
import sys

import yaml

fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
    return cond


def strata_env_names(config_h):
    """STRATA_<FLAG> of every option in config/config.h, plus the few STRATA_* variables
    the sources read with getenv() (e.g. STRATA_CUDA_LIB)."""
    src = open(config_h).read()
    fields = re.findall(r"X\((\w+),\s*\"[\w-]+\",\s*(?:STR|INT|BOOL|NUM|LIST)", src)
    assert fields, "no options found in " + config_h
    names = {"STRATA_" + f.upper() for f in fields}
    root = os.path.dirname(os.path.dirname(os.path.abspath(config_h)))
    for d in ("engine", "server", "config", "models", "kernels"):
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith((".c", ".cc", ".cu", ".h")):
                    text = open(os.path.join(dirpath, f), errors="replace").read()
                    names.update(re.findall(r'getenv\("(STRATA_[A-Z0-9_]+)"\)', text))
    return names


def exit_with(bad):
    """Prints each problem in bad, indented, and exits 1 when there is one, else 0."""
    for line in bad:
        print("  " + line)
    sys.exit(1 if bad else 0)


def port_number(container, port):
    for p in container.get("ports", []):
        if port == p.get("name") or port == p.get("containerPort"):
            return p["containerPort"]
    return None


def main():
    overlay, rendered, config_h = sys.argv[1:4]
    gpu = "--gpu" in sys.argv[4:]
    every = [d for d in yaml.safe_load_all(open(rendered)) if d]
    # the strata objects (the base labels them); an overlay may add others (the
    # inference-pool overlay's endpoint picker, checked by check_inference_pool.py)
    docs = [d for d in every if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "strata"]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Deployment", "Service", "PersistentVolumeClaim", "HorizontalPodAutoscaler",
                 "ServiceMonitor", "ConfigMap"):
        check(len(by_kind.get(kind, [])) == 1, f"{overlay}: expected one {kind}, got "
              f"{len(by_kind.get(kind, []))}")
    if fails:
        return
    dep = by_kind["Deployment"][0]
    svc = by_kind["Service"][0]
    pvc = by_kind["PersistentVolumeClaim"][0]
    hpa = by_kind["HorizontalPodAutoscaler"][0]
    sm = by_kind["ServiceMonitor"][0]
    cm = by_kind["ConfigMap"][0]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    c = spec["containers"][0]

    # probes
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe)
        if not check(p is not None and "httpGet" in p, f"{overlay}: {probe} missing or not httpGet"):
            continue
        check(p["httpGet"].get("path") == "/health", f"{overlay}: {probe} path {p['httpGet'].get('path')}")
        check(port_number(c, p["httpGet"].get("port")) is not None,
              f"{overlay}: {probe} port {p['httpGet'].get('port')} is not a container port")
    live, start = c["livenessProbe"], c["startupProbe"]
    check(start.get("periodSeconds", 10) * start.get("failureThreshold", 3) >= 300,
          f"{overlay}: startupProbe allows under 5 minutes of model loading")
    check(live.get("periodSeconds", 10) * live.get("failureThreshold", 3) >= 30,
          f"{overlay}: livenessProbe restarts after under 30 s of failures")

    # env: ConfigMap (envFrom) + env
    env = {}
    for ef in c.get("envFrom", []):
        name = ef.get("configMapRef", {}).get("name")
        check(name == cm["metadata"]["name"], f"{overlay}: envFrom names {name}, not the ConfigMap")
        env.update(cm.get("data", {}))
    for e in c.get("env", []):
        env[e["name"]] = e.get("value", e.get("valueFrom"))
    known = strata_env_names(config_h)
    for k in env:
        if k.startswith("STRATA_"):
            check(k in known, f"{overlay}: {k} is not a strata option (config/config.h)")
    check("STRATA_MODEL" in env, f"{overlay}: STRATA_MODEL not set")

    # container port = STRATA_PORT = Service targetPort
    http = port_number(c, "http")
    check(http is not None and str(http) == str(env.get("STRATA_PORT")),
          f"{overlay}: container port {http} != STRATA_PORT {env.get('STRATA_PORT')}")
    check(env.get("STRATA_HOST") == "0.0.0.0", f"{overlay}: STRATA_HOST must be 0.0.0.0 in a pod")
    labels = pod["metadata"]["labels"]
    sel = svc["spec"]["selector"]
    check(all(labels.get(k) == v for k, v in sel.items()), f"{overlay}: Service selector {sel} "
          f"does not match the pod labels {labels}")
    dsel = dep["spec"]["selector"]["matchLabels"]
    check(all(labels.get(k) == v for k, v in dsel.items()), f"{overlay}: Deployment selector "
          "does not match its pod labels")
    for sp in svc["spec"]["ports"]:
        check(port_number(c, sp["targetPort"]) is not None,
              f"{overlay}: Service targetPort {sp['targetPort']} is not a container port")

    # ServiceMonitor -> Service -> /metrics
    smsel = sm["spec"]["selector"]["matchLabels"]
    check(all(svc["metadata"].get("labels", {}).get(k) == v for k, v in smsel.items()),
          f"{overlay}: ServiceMonitor selector {smsel} does not match the Service labels")
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    for ep in sm["spec"]["endpoints"]:
        check(ep.get("port") in svc_ports, f"{overlay}: ServiceMonitor port {ep.get('port')} not in Service")
        check(ep.get("path") == "/metrics", f"{overlay}: ServiceMonitor path {ep.get('path')}")

    # secret referenced, not inlined
    key = env.get("STRATA_API_KEY")
    check(isinstance(key, dict) and "secretKeyRef" in key,
          f"{overlay}: STRATA_API_KEY must come from valueFrom.secretKeyRef, got {key!r}")
    check(all(d["kind"] != "Secret" for d in every),
          f"{overlay}: a Secret is rendered (the API key would be in git)")
    for d in every:
        check("STRATA_API_KEY" not in (d.get("data") or {}),
              f"{overlay}: STRATA_API_KEY inlined in {d['kind']} {d['metadata']['name']}")

    # graceful shutdown
    grace = spec.get("terminationGracePeriodSeconds", 30)
    pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    check(len(pre) == 2 and pre[0] == "sleep", f"{overlay}: preStop is not a sleep: {pre}")
    pre_s = int(pre[1]) if len(pre) == 2 else 0
    drain = int(env.get("STRATA_SHUTDOWN_TIMEOUT", 30))
    check(grace > drain + pre_s, f"{overlay}: terminationGracePeriodSeconds {grace} <= "
          f"shutdown timeout {drain} + preStop {pre_s}")

    # HPA
    ref = hpa["spec"]["scaleTargetRef"]
    check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"],
          f"{overlay}: HPA targets {ref}")
    names = [m.get("pods", {}).get("metric", {}).get("name") for m in hpa["spec"]["metrics"]
             if m["type"] == "Pods"]
    check(names == ["strata_num_requests_waiting"], f"{overlay}: HPA pods metrics {names}")

    # hub cache
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    hf = env.get("HF_HOME")
    check(hf in mounts, f"{overlay}: HF_HOME {hf} is not a mounted volume")
    if hf in mounts:
        claim = vols.get(mounts[hf], {}).get("persistentVolumeClaim", {}).get("claimName")
        check(claim == pvc["metadata"]["name"], f"{overlay}: HF_HOME volume is not the PVC ({claim})")

    # GPU
    res = c.get("resources", {})
    ngpu = int(res.get("limits", {}).get("nvidia.com/gpu", 0))
    if gpu:
        check(ngpu >= 1, f"{overlay}: no nvidia.com/gpu limit")
        check(str(env.get("STRATA_DEVICE", "")).startswith("cuda"),
              f"{overlay}: STRATA_DEVICE {env.get('STRATA_DEVICE')} (a GPU pod must not fall back to the CPU)")
        check(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])),
              f"{overlay}: no toleration for nvidia.com/gpu taints")
    else:
        check(ngpu == 0, f"{overlay}: CPU overlay requests a GPU")

    # non-root
    psc = spec.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0,
          f"{overlay}: pod may run as root")


if __name__ == "__main__":
    main()
    for f in fails:
        print("FAIL", f)
    sys.exit(1 if fails else 0)
