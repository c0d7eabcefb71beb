#!/usr/bin/env python3
"""Checks what `kubectl kustomize deploy/overlays/inference-pool` rendered.

Usage: check_inference_pool.py RENDERED.yaml CRD_DIR [--print-metrics]
Prints one line per failed check and exits 1 when any failed; with --print-metrics it
prints, one a line, the metric names the endpoint picker's config reads (test_deploy.sh
looks them up on a live server's /metrics). What it checks, and why:
- every rendered object whose kind a vendored CRD (CRD_DIR, see SOURCE.md) defines
  validates against that CRD's openAPIV3Schema for its apiVersion, with unknown fields an
  error (kubectl's strict field validation rejects them too); plus the InferencePool's two
  CEL rules, which jsonschema does not evaluate;
- the InferencePool selects the strata pods (and not the picker's), on the container port
  STRATA_PORT, and its endpointPickerRef names the picker's Service on the port that
  reaches the picker's gRPC container port;
- the picker's flags name that InferencePool, its --config-file is a key of the mounted
  ConfigMap, that config is an EndpointPickerConfig whose scorers are in the default
  profile and whose core-metrics-extractor default engine is defined, scraped at /metrics;
- the picker's ServiceAccount may get/watch/list pods and inferencepools (a Role bound to
  it in the same namespace);
- the HTTPRoute sends to the InferencePool and hangs off a Gateway;
- the picker's image tag is the InferencePool CRD's bundle version (upgrade both at once).
"""

import copy
import glob
import os
import re
import sys

import jsonschema
import yaml

fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
    return cond


def strict(schema):
    """The schema with additionalProperties: false on every object that lists its
    properties and does not keep unknown fields, as the API server prunes/rejects them."""
    s = copy.deepcopy(schema)

    def walk(n):
        if isinstance(n, dict):
            if ("properties" in n and "additionalProperties" not in n
                    and not n.get("x-kubernetes-preserve-unknown-fields")):
                n["additionalProperties"] = False
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(s)
    # metadata is the API server's (ObjectMeta), typed only as an object in CRDs
    s.setdefault("properties", {})["metadata"] = {"type": "object"}
    return s


def load_crds(crd_dir):
    """{(group/version, kind): (schema, crd)} for every served version of every CRD."""
    out = {}
    for path in sorted(glob.glob(os.path.join(crd_dir, "*.yaml"))):
        for crd in yaml.safe_load_all(open(path)):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                if v.get("served"):
                    out[(f"{group}/{v['name']}", kind)] = (v["schema"]["openAPIV3Schema"], crd)
    return out


def labels_match(sel, labels):
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def port_number(container, port):
    for p in container.get("ports", []):
        if port in (p.get("name"), p.get("containerPort")):
            return p["containerPort"]
    return None


def flag(args, name):
    """The value of --name VALUE or --name=VALUE in a container's args."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def main():
    rendered, crd_dir = sys.argv[1:3]
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    crds = load_crds(crd_dir)
    check(crds, f"no CRDs in {crd_dir}")

    # ---- schema validation against the vendored CRDs
    validated = set()
    for d in docs:
        key = (d["apiVersion"], d["kind"])
        if key not in crds:
            if any(k == d["kind"] for _, k in crds):
                fails.append(f"{d['kind']} {d['metadata']['name']}: apiVersion {d['apiVersion']} "
                             "is not served by the vendored CRD")
            continue
        schema = strict(crds[key][0])
        errs = sorted(jsonschema.Draft7Validator(schema).iter_errors(d), key=lambda e: list(e.path))
        for e in errs:
            where = "/".join(str(p) for p in e.path) or "(root)"
            fails.append(f"{d['kind']} {d['metadata']['name']}: {where}: {e.message}")
        validated.add(d["kind"])
    for kind in ("InferencePool", "HTTPRoute"):
        check(kind in validated, f"no {kind} rendered (or no CRD for it in {crd_dir})")
    if fails:  # the checks below assume schema-valid objects
        return []

    def one(kind, pred=lambda d: True):
        got = [d for d in docs if d["kind"] == kind and pred(d)]
        check(len(got) == 1, f"expected one {kind}, got {len(got)}")
        return got[0] if len(got) == 1 else None

    pool = one("InferencePool")
    route = one("HTTPRoute")
    deps = [d for d in docs if d["kind"] == "Deployment"]
    if not pool or not route or len(deps) != 2:
        check(len(deps) == 2, f"expected two Deployments (strata, picker), got {len(deps)}")
        return []
    ps = pool["spec"]
    sel = ps["selector"]["matchLabels"]
    servers = [d for d in deps if labels_match(sel, d["spec"]["template"]["metadata"]["labels"])]
    check(len(servers) == 1, f"InferencePool selector {sel} matches {len(servers)} Deployments' pods, "
          "not exactly the strata one")
    if len(servers) != 1:
        return []
    srv = servers[0]
    epp = [d for d in deps if d is not srv][0]
    c = srv["spec"]["template"]["spec"]["containers"][0]
    http = port_number(c, "http")
    nums = [p["number"] for p in ps["targetPorts"]]
    check(len(nums) == len(set(nums)), f"InferencePool targetPorts not unique: {nums}")  # CEL rule
    check(nums == [http], f"InferencePool targetPorts {nums} != the strata container port {http}")

    # ---- endpointPickerRef -> picker Service -> picker container
    ref = ps["endpointPickerRef"]
    check(ref.get("kind", "Service") == "Service" and ref.get("group", "") == "",
          f"endpointPickerRef is not a core Service: {ref}")
    check("port" in ref, "endpointPickerRef to a Service needs a port")  # CEL rule
    svc = one("Service", lambda d: d["metadata"]["name"] == ref["name"])
    ec = epp["spec"]["template"]["spec"]["containers"][0]
    if svc and "port" in ref:
        check(labels_match(svc["spec"]["selector"], epp["spec"]["template"]["metadata"]["labels"]),
              f"Service {svc['metadata']['name']} does not select the picker's pods")
        sp = [p for p in svc["spec"]["ports"] if p["port"] == ref["port"]["number"]]
        check(len(sp) == 1, f"picker Service has no port {ref['port']['number']}")
        if sp:
            check(port_number(ec, sp[0].get("targetPort", sp[0]["port"])) == port_number(ec, "grpc"),
                  f"picker Service port {sp[0]} does not reach the picker's grpc container port")
    check(not labels_match(sel, epp["spec"]["template"]["metadata"]["labels"]),
          "the InferencePool selects the picker's own pods")

    # ---- picker flags and its config
    args = ec.get("args", [])
    check(flag(args, "--pool-name") == pool["metadata"]["name"],
          f"picker --pool-name {flag(args, '--pool-name')} != InferencePool {pool['metadata']['name']}")
    check(flag(args, "--pool-group") in (None, "inference.networking.k8s.io"),
          f"picker --pool-group {flag(args, '--pool-group')}")
    ns = flag(args, "--pool-namespace")
    env = {e["name"]: e for e in ec.get("env", [])}
    check(ns == pool["metadata"].get("namespace") or (
        ns is None and env.get("NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {})
        .get("fieldPath") == "metadata.namespace"), "picker does not know the pool's namespace")
    cfg_path = flag(args, "--config-file")
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in ec.get("volumeMounts", [])}
    vols = {v["name"]: v for v in epp["spec"]["template"]["spec"].get("volumes", [])}
    cfg = None
    if check(cfg_path, "picker has no --config-file"):
        d, f = os.path.split(cfg_path)
        cm_name = vols.get(mounts.get(d), {}).get("configMap", {}).get("name")
        cm = one("ConfigMap", lambda x: x["metadata"]["name"] == cm_name)
        if cm and check(f in cm.get("data", {}), f"ConfigMap {cm_name} has no key {f}"):
            cfg = yaml.safe_load(cm["data"][f])
    metrics = []
    if cfg:
        check(cfg.get("apiVersion") == "inference.networking.x-k8s.io/v1alpha1"
              and cfg.get("kind") == "EndpointPickerConfig", "picker config is not an EndpointPickerConfig")
        plugins = {p.get("name", p["type"]): p for p in cfg.get("plugins", [])}
        profiles = cfg.get("schedulingProfiles", [])
        for prof in profiles:
            for r in prof.get("plugins", []):
                check(r["pluginRef"] in plugins, f"profile {prof['name']}: unknown plugin {r['pluginRef']}")
        check(any(p["name"] == "default" for p in profiles), "no default scheduling profile")
        src = [p for p in plugins.values() if p["type"] == "metrics-data-source"]
        check(src and (src[0].get("parameters") or {}).get("path", "/metrics") == "/metrics",
              "picker does not scrape /metrics")
        ext = [p for p in plugins.values() if p["type"] == "core-metrics-extractor"]
        if check(ext, "no core-metrics-extractor"):
            par = ext[0].get("parameters") or {}
            engines = {e["name"]: e for e in par.get("engineConfigs", [])}
            eng = engines.get(par.get("defaultEngine", "vllm"))
            if check(eng, f"defaultEngine {par.get('defaultEngine')} has no engineConfigs entry"):
                for k in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec"):
                    spec = eng.get(k, "")
                    if check(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?", spec or ""),
                             f"engine {eng['name']}: {k} {spec!r}"):
                        metrics.append(spec.split("{")[0])

    # ---- RBAC: the picker's ServiceAccount reads pods and inferencepools
    sa = epp["spec"]["template"]["spec"].get("serviceAccountName")
    check(sa and one("ServiceAccount", lambda d: d["metadata"]["name"] == sa),
          f"picker ServiceAccount {sa} not rendered")
    ns_of = lambda d: d["metadata"].get("namespace")
    granted = set()
    for rb in (d for d in docs if d["kind"] == "RoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa
                   and s.get("namespace") == ns_of(epp) for s in rb.get("subjects", [])):
            continue
        role = [d for d in docs if d["kind"] == rb["roleRef"]["kind"]
                and d["metadata"]["name"] == rb["roleRef"]["name"]]
        for r in (role[0].get("rules", []) if role else []):
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    if {"get", "watch", "list"} <= set(r.get("verbs", [])):
                        granted.add((g, res))
    for need in (("", "pods"), ("inference.networking.k8s.io", "inferencepools")):
        check(need in granted, f"picker ServiceAccount may not get/watch/list {need[1]}")
    for d in docs:
        check(ns_of(d) == ns_of(pool), f"{d['kind']} {d['metadata']['name']} in namespace {ns_of(d)}, "
              f"not the pool's {ns_of(pool)}")

    # ---- HTTPRoute -> InferencePool
    refs = [b for r in route["spec"]["rules"] for b in r.get("backendRefs", [])]
    check(refs and all(b.get("group") == "inference.networking.k8s.io" and b.get("kind") == "InferencePool"
                       and b["name"] == pool["metadata"]["name"] for b in refs),
          f"HTTPRoute backendRefs {refs} are not the InferencePool")
    parents = route["spec"].get("parentRefs", [])
    check(parents and all(p.get("kind", "Gateway") == "Gateway" for p in parents),
          f"HTTPRoute parentRefs {parents} are not a Gateway")

    # ---- picker image = InferencePool CRD release
    crd = crds.get((pool["apiVersion"], "InferencePool"), (None, {}))[1]
    bundle = crd.get("metadata", {}).get("annotations", {}).get("inference.networking.k8s.io/bundle-version")
    check(ec["image"].endswith(":" + str(bundle)),
          f"picker image {ec['image']} is not the vendored InferencePool CRD's release {bundle}")
    return metrics


if __name__ == "__main__":
    names = main()
    for f in fails:
        print("FAIL", f)
    if "--print-metrics" in sys.argv[3:] and not fails:
        print("\n".join(names))
    sys.exit(1 if fails else 0)
