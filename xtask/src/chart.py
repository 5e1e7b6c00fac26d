"""Helm and kubernetes-validate for `cargo xtask chart` (xtask/src/chart.rs runs this).

Reads a JSON request on stdin, answers JSON on stdout; judging the answer is xtask's job:

request: {"chart": dir, "release": name, "namespace": ns,
          "renders": [{"name": str, "values": file or null}],
          "kube_versions": [str or "latest", ...], "skip_kinds": [str, ...],
          "yaml_files": [file, ...]}
answer:  {"renders": [{"name", "lint": [messages], "error": str or null, "values": merged values,
                       "manifests": [{"template", "doc"}],
                       "invalid": [str], "skipped": [str]}],
          "kube_versions": [the versions validated against],
          "yaml": {file: its documents}}
"""

import json
import sys

import helm_python as helm
import kubernetes_validate.utils as kv
import yaml


def main() -> None:
    request = json.load(sys.stdin)
    helm.disable_logging()
    chart = helm.Chart.load(request["chart"])
    versions = [kv.latest_version() if v == "latest" else v for v in request["kube_versions"]]
    skip_kinds = set(request["skip_kinds"])
    renders = []
    for spec in request["renders"]:
        values = {}
        if spec["values"]:
            with open(spec["values"]) as f:
                values = yaml.safe_load(f) or {}
        result = {"name": spec["name"], "lint": [], "error": None, "values": None,
                  "manifests": [], "invalid": [], "skipped": []}
        report = helm.lint(request["chart"], values, strict=True, namespace=request["namespace"])
        result["lint"] = report["messages"]
        try:
            result["values"] = chart.merge_values(values)
            rendered = chart.render(values, name=request["release"],
                                    namespace=request["namespace"], is_install=True)
        except helm.HelmError as e:
            result["error"] = str(e)
            renders.append(result)
            continue
        for template, text in sorted(rendered.items()):
            if not template.endswith((".yaml", ".yml")):
                continue
            for doc in yaml.safe_load_all(text):
                if not doc:
                    continue
                result["manifests"].append({"template": template, "doc": doc})
                where = "%s %s/%s" % (template, doc.get("kind"), doc.get("metadata", {}).get("name"))
                if doc.get("kind") in skip_kinds:
                    result["skipped"].append(where)
                    continue
                for version in versions:
                    try:
                        kv.validate(doc, version, strict=True)
                    except kv.ValidationError as e:
                        path = ".".join(str(p) for p in e.path)
                        result["invalid"].append("%s against %s: %s: %s" % (where, version, path, e.message))
                    except kv.SchemaNotFoundError as e:
                        result["invalid"].append("%s: %s" % (where, e.message))
        renders.append(result)
    documents = {}
    for path in request["yaml_files"]:
        with open(path) as f:
            documents[path] = [doc for doc in yaml.safe_load_all(f) if doc]
    json.dump({"renders": renders, "kube_versions": versions, "yaml": documents}, sys.stdout)


main()
