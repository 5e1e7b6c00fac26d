//! `cargo xtask chart`: lints `helm/forgesync` strictly with real Helm, renders it with the
//! defaults (which must fail, naming a required value), `ci/minimal.yaml` and
//! `ci/everything.yaml`, validates every rendered manifest with kubernetes-validate (strict)
//! against Kubernetes 1.30 and the newest version it knows, then checks what the chart promises:
//!
//! - every binary under `services/` has a chart entry, a Dockerfile target and a compose service;
//! - every pod meets the Pod Security "restricted" profile, plus our hardening;
//! - every service gets exactly the secrets its flags read (those with hidden values), and its
//!   NATS credentials from Secret keys of its own (one NATS user per service);
//! - terminationGracePeriodSeconds covers FORGESYNC_SHUTDOWN_GRACE and the preStop pause;
//! - only ingress is routed publicly, on its webhook paths, with room for 25 MiB bodies;
//! - KEDA scales each worker on the consumers its code declares;
//! - alerts and the Grafana dashboards (`deploy/grafana`) use only series some code exports,
//!   and each alert has its runbook section;
//! - with `dashboards.enabled`, every dashboard ships as a ConfigMap carrying the sidecar's label;
//! - a digest pins every workload's image;
//! - NetworkPolicies admit webhooks from the ingress controller only, the API from its configured
//!   namespaces only, and let out DNS, Postgres, NATS, OTLP and (where a service calls them)
//!   vendor APIs only.
//!
//! Helm (`helm-python-sdk`, Helm as a C library) and `kubernetes-validate` come from PyPI into
//! the bin cache, like the servers; `chart.py` drives them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::paths::Layout;
use crate::pypi;

/// The metric names queries read (shared with the stack's metrics test, which scrapes them).
#[path = "../../crates/testkit/src/promql.rs"]
#[allow(dead_code)]
mod promql;

/// The PyPI packages, pinned.
const TOOLS: &[(&str, &str)] = &[
    ("helm-python-sdk", "0.2.2"),
    ("kubernetes-validate", "1.37.0"),
];
/// Drives Helm and kubernetes-validate; reads a JSON request, answers JSON.
const DRIVER: &str = include_str!("chart.py");
/// Kubernetes versions every manifest is validated against (`latest`: the newest the tool knows).
const KUBE_VERSIONS: &[&str] = &["1.30.0", "latest"];
/// Custom resources kubernetes-validate has no schema for: rendered and checked here, not
/// validated against Kubernetes.
const CRD_KINDS: &[&str] = &[
    "HTTPRoute",
    "PodMonitor",
    "PrometheusRule",
    "ScaledObject",
    "ServiceMonitor",
];
const RELEASE: &str = "fs";
const NAMESPACE: &str = "forgesync";
/// The one service routed publicly, and the only paths routed to it.
const PUBLIC_SERVICE: &str = "ingress";
const PUBLIC_PATHS: &[&str] = &["/webhooks/", "/hooks/"];
/// The largest webhook body ingress accepts (GitHub, GitLab): public routes must pass it.
const MAX_WEBHOOK_BODY: u64 = 25 * 1024 * 1024;
/// The binary the migration Job runs; the image must ship it.
const ADMIN_BIN: &str = "forgesync-admin";
/// Where the Grafana dashboards live; the chart's `dashboards` directory links here.
const DASHBOARDS: &str = "deploy/grafana";

/// The installed tools: directories to put on `PYTHONPATH`.
pub struct Tools {
    dirs: Vec<PathBuf>,
}

/// Installs the pinned tools into the bin cache unless they are there.
pub fn ensure_tools(layout: &Layout) -> anyhow::Result<Tools> {
    let dirs = TOOLS
        .iter()
        .map(|(package, version)| {
            pypi::ensure_tool(
                &layout.bin_cache(),
                package,
                version,
                "`cargo xtask chart` runs Helm and kubernetes-validate from them; nothing else needs them",
            )
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Tools { dirs })
}

/// What the check reads: the workspace's sources (crates/, services/), the chart, the image
/// and compose definitions, the runbook and the dashboards.
pub struct Inputs {
    pub root: PathBuf,
    pub chart: PathBuf,
    pub dockerfile: PathBuf,
    pub compose: PathBuf,
    pub runbook: PathBuf,
    pub dashboards: PathBuf,
}

/// Where each input lives in the workspace (tests copy them elsewhere to break them).
const INPUT_PATHS: [&str; 5] = [
    "helm/forgesync",
    "deploy/Dockerfile",
    "deploy/docker-compose.yml",
    "docs/operations.md",
    DASHBOARDS,
];

impl Inputs {
    pub fn of(root: &Path) -> Self {
        Self::with_copies(root, root)
    }

    /// The sources of `root` with the other inputs under `copies`, at their workspace paths.
    fn with_copies(root: &Path, copies: &Path) -> Self {
        let [chart, dockerfile, compose, runbook, dashboards] = INPUT_PATHS.map(|p| copies.join(p));
        Inputs {
            root: root.to_path_buf(),
            chart,
            dockerfile,
            compose,
            runbook,
            dashboards,
        }
    }
}

/// `cargo xtask chart`.
pub fn run(layout: &Layout) -> anyhow::Result<()> {
    let tools = ensure_tools(layout)?;
    let summary = check(&tools, &Inputs::of(&layout.workspace_root))?;
    println!("{summary}");
    Ok(())
}

/// Runs every check; the error lists every problem found.
pub fn check(tools: &Tools, inputs: &Inputs) -> anyhow::Result<String> {
    let compose = &inputs.compose;
    let renders = [
        ("defaults", None),
        ("minimal", Some(inputs.chart.join("ci/minimal.yaml"))),
        ("everything", Some(inputs.chart.join("ci/everything.yaml"))),
    ];
    let request = json!({
        "chart": inputs.chart,
        "release": RELEASE,
        "namespace": NAMESPACE,
        "renders": renders.iter().map(|(name, values)| json!({"name": name, "values": values})).collect::<Vec<_>>(),
        "kube_versions": KUBE_VERSIONS,
        "skip_kinds": CRD_KINDS,
        "yaml_files": [compose],
    });
    let answer = drive(tools, &request)?;
    let mut problems = Vec::new();
    let mut summary = Vec::new();
    let sources = Sources::read(&inputs.root)?;
    let binaries = service_binaries(&inputs.root.join("services"))?;
    let fullname = format!("{RELEASE}-forgesync");
    let runbook = std::fs::read_to_string(&inputs.runbook)
        .with_context(|| format!("reading {}", inputs.runbook.display()))?;
    let dashboards = read_dashboards(&inputs.dashboards)?;
    check_dashboard_files(&dashboards, &sources, &mut problems);

    for render in answer["renders"]
        .as_array()
        .context("driver answer: renders")?
    {
        let name = render["name"].as_str().unwrap_or_default();
        for message in render["lint"].as_array().into_iter().flatten() {
            // Severity 1 is information ("icon is recommended"); warnings fail, as --strict does.
            if message["severity"].as_i64().unwrap_or(3) >= 2 {
                problems.push(format!(
                    "{name}: helm lint: {}: {}",
                    message["path"].as_str().unwrap_or_default(),
                    message["error"].as_str().unwrap_or_default().trim()
                ));
            }
        }
        let error = render["error"].as_str();
        if name == "defaults" {
            // No database, key or issuer has a usable default: the install must say so.
            match error {
                Some(e) if e.contains("is required") => summary.push(format!(
                    "defaults alone fail as they should: {}",
                    e.lines().next().unwrap_or_default()
                )),
                Some(e) => problems.push(format!(
                    "defaults: failed, but not naming a required value: {e}"
                )),
                None => problems.push("defaults: rendered without any required value set".into()),
            }
            continue;
        }
        if let Some(e) = error {
            problems.push(format!("{name}: helm render failed: {e}"));
            continue;
        }
        for invalid in render["invalid"].as_array().into_iter().flatten() {
            problems.push(format!(
                "{name}: kubernetes-validate: {}",
                invalid.as_str().unwrap_or_default()
            ));
        }
        let docs: Vec<&Value> = render["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| &m["doc"])
            .collect();
        let skipped: Vec<&str> = render["skipped"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        summary.push(format!(
            "{name}: {} manifests rendered, lint clean, {} validated against Kubernetes {}; not validated (custom resources kubernetes-validate has no schema for, checked here only): {}",
            docs.len(),
            docs.len() - skipped.len(),
            answer["kube_versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" and "),
            if skipped.is_empty() { "none".to_owned() } else { skipped.join(", ") },
        ));
        let mut found = Vec::new();
        check_pods(&docs, &mut found);
        check_secrets(&docs, &binaries, &sources, &mut found);
        check_nats_users(&docs, &mut found);
        check_grace(&docs, &mut found);
        check_public_routes(&docs, &fullname, &mut found);
        check_consumers(&render["values"], &binaries, &sources, &mut found);
        check_alert_series(&docs, &sources, &mut found);
        check_dashboard_configmaps(&docs, &render["values"], &dashboards, &mut found);
        check_runbooks(&docs, &runbook, &mut found);
        check_image(&docs, &render["values"], &mut found);
        check_network_policies(&docs, &render["values"], &mut found);
        if name == "minimal" {
            let compose_doc = &answer["yaml"][compose.to_string_lossy().as_ref()][0];
            let dockerfile = std::fs::read_to_string(&inputs.dockerfile)
                .with_context(|| format!("reading {}", inputs.dockerfile.display()))?;
            check_coverage(&docs, &binaries, &dockerfile, compose_doc, &mut found);
        }
        if name == "everything" {
            for kind in [
                "Ingress",
                "HTTPRoute",
                "ScaledObject",
                "PrometheusRule",
                "NetworkPolicy",
                "HorizontalPodAutoscaler",
            ] {
                if !docs.iter().any(|d| d["kind"] == kind) {
                    found.push(format!(
                        "ci/everything.yaml renders no {kind}: its checks would check nothing"
                    ));
                }
            }
        }
        problems.extend(found.into_iter().map(|p| format!("{name}: {p}")));
    }
    if problems.is_empty() {
        Ok(format!("chart: ok\n  {}", summary.join("\n  ")))
    } else {
        anyhow::bail!("the chart fails its checks:\n  {}", problems.join("\n  "))
    }
}

/// Runs `chart.py` with the tools on `PYTHONPATH`.
fn drive(tools: &Tools, request: &Value) -> anyhow::Result<Value> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .env("PYTHONPATH", std::env::join_paths(&tools.dirs)?)
        .env("PYTHONNOUSERSITE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running python3 for the chart checks")?;
    child
        .stdin
        .take()
        .context("python3 stdin")?
        .write_all(request.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "the chart driver (xtask/src/chart.py) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("the chart driver's answer is not JSON")
}

/// Every Rust source of `crates/` and `services/`, read once.
struct Sources {
    root: PathBuf,
    files: Vec<(PathBuf, String)>,
}

impl Sources {
    fn read(root: &Path) -> anyhow::Result<Self> {
        let mut files = Vec::new();
        for top in ["crates", "services"] {
            collect_rs(&root.join(top), &mut files)?;
        }
        Ok(Sources {
            root: root.to_path_buf(),
            files,
        })
    }

    /// The sources of `services/<service>/src`.
    fn of_service<'a>(&'a self, service: &str) -> impl Iterator<Item = &'a str> + use<'a> {
        self.of_dir(&format!("services/{service}/src"))
    }

    /// The sources under `dir` (relative to the workspace root).
    fn of_dir<'a>(&'a self, dir: &str) -> impl Iterator<Item = &'a str> + use<'a> {
        let dir = self.root.join(dir);
        self.files
            .iter()
            .filter(move |(path, _)| path.starts_with(&dir))
            .map(|(_, text)| text.as_str())
    }

    /// Whether any source names `"series"` as a string literal (metrics are named so); a
    /// histogram's `_bucket`, `_sum` and `_count` series are exported under its name.
    fn exports(&self, series: &str) -> bool {
        let histogram = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| series.strip_suffix(suffix));
        [Some(series), histogram].into_iter().flatten().any(|name| {
            let literal = format!("\"{name}\"");
            self.files.iter().any(|(_, text)| text.contains(&literal))
        })
    }

    /// The environment variables a service reads whose values clap hides: its secrets. Its own
    /// flags plus the common ones every service flattens in (crates/runtime/src/config.rs).
    fn secret_envs(&self, service: &str) -> BTreeSet<String> {
        let common = self.root.join("crates/runtime/src/config.rs");
        self.files
            .iter()
            .filter(|(path, _)| *path == common)
            .map(|(_, text)| text.as_str())
            .chain(self.of_service(service))
            .flat_map(hidden_envs)
            .collect()
    }
}

fn collect_rs(dir: &Path, out: &mut Vec<(PathBuf, String)>) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                collect_rs(&path, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            out.push((path, text));
        }
    }
    Ok(())
}

/// `env = "X"` of every `#[arg(...)]` that also says `hide_env_values = true`.
fn hidden_envs(source: &str) -> BTreeSet<String> {
    source
        .split("#[arg(")
        .skip(1)
        .filter_map(|attr| {
            let body = &attr[..attr.find(")]").unwrap_or(attr.len())];
            if !body.contains("hide_env_values = true") {
                return None;
            }
            let start = body.find("env = \"")? + "env = \"".len();
            let len = body[start..].find('"')?;
            Some(body[start..start + len].to_owned())
        })
        .collect()
}

/// The binaries under `services/`: `[[bin]]` names, else the package name when it has
/// `src/main.rs`, plus `src/bin/*.rs`.
fn service_binaries(services: &Path) -> anyhow::Result<Vec<String>> {
    let mut binaries = BTreeSet::new();
    for entry in std::fs::read_dir(services).context("reading services/")? {
        let dir = entry?.path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let mut section = String::new();
        let mut package = None;
        let mut bins = Vec::new();
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_owned();
            } else if let Some(value) = line.strip_prefix("name = ") {
                let value = value.trim_matches('"').to_owned();
                match section.as_str() {
                    "[package]" => package = Some(value),
                    "[[bin]]" => bins.push(value),
                    _ => {}
                }
            }
        }
        if bins.is_empty() && dir.join("src/main.rs").is_file() {
            bins.extend(package);
        }
        if let Ok(extra) = std::fs::read_dir(dir.join("src/bin")) {
            for file in extra {
                let path = file?.path();
                if path.extension().is_some_and(|e| e == "rs")
                    && let Some(stem) = path.file_stem()
                {
                    bins.push(stem.to_string_lossy().into_owned());
                }
            }
        }
        binaries.extend(bins);
    }
    Ok(binaries.into_iter().collect())
}

fn component(doc: &Value) -> &str {
    doc["metadata"]["labels"]["app.kubernetes.io/component"]
        .as_str()
        .unwrap_or_default()
}

fn name_of(doc: &Value) -> String {
    format!(
        "{} {}",
        doc["kind"].as_str().unwrap_or_default(),
        doc["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The pod spec of a workload, with the object's name.
fn pod_specs<'a>(docs: &[&'a Value]) -> Vec<(String, &'a Value)> {
    docs.iter()
        .filter_map(|doc| match doc["kind"].as_str() {
            Some("Deployment" | "Job" | "StatefulSet" | "DaemonSet") => {
                Some((name_of(doc), &doc["spec"]["template"]["spec"]))
            }
            Some("Pod") => Some((name_of(doc), &doc["spec"])),
            _ => None,
        })
        .collect()
}

/// Pod Security "restricted" (every field it checks) plus our hardening: read-only root, no
/// service-account token, no service links, requests and a memory limit.
fn check_pods(docs: &[&Value], problems: &mut Vec<String>) {
    for (name, pod) in pod_specs(docs) {
        let mut fail = |what: &str| problems.push(format!("{name}: {what}"));
        let pod_ctx = &pod["securityContext"];
        for host in ["hostNetwork", "hostPID", "hostIPC"] {
            if pod[host] == true {
                fail(&format!("{host} is set"));
            }
        }
        if pod["automountServiceAccountToken"] != false {
            fail("automountServiceAccountToken is not false");
        }
        if pod["enableServiceLinks"] != false {
            fail("enableServiceLinks is not false");
        }
        for volume in pod["volumes"].as_array().into_iter().flatten() {
            let allowed = [
                "name",
                "configMap",
                "csi",
                "downwardAPI",
                "emptyDir",
                "ephemeral",
                "persistentVolumeClaim",
                "projected",
                "secret",
            ];
            if let Some(obj) = volume.as_object()
                && let Some(kind) = obj.keys().find(|k| !allowed.contains(&k.as_str()))
            {
                fail(&format!("volume type {kind} is not allowed"));
            }
        }
        let containers = pod["containers"]
            .as_array()
            .into_iter()
            .chain(pod["initContainers"].as_array())
            .flatten();
        for container in containers {
            let c_name = container["name"].as_str().unwrap_or_default();
            let ctx = &container["securityContext"];
            let mut fail = |what: &str| problems.push(format!("{name} container {c_name}: {what}"));
            if ctx["allowPrivilegeEscalation"] != false {
                fail("allowPrivilegeEscalation is not false");
            }
            if ctx["privileged"] == true {
                fail("privileged");
            }
            let drops_all = ctx["capabilities"]["drop"]
                .as_array()
                .is_some_and(|d| d.iter().any(|c| c == "ALL"));
            if !drops_all {
                fail("capabilities do not drop ALL");
            }
            if ctx["capabilities"]["add"]
                .as_array()
                .is_some_and(|a| a.iter().any(|c| c != "NET_BIND_SERVICE"))
            {
                fail("adds capabilities other than NET_BIND_SERVICE");
            }
            if ctx["runAsNonRoot"] != true && pod_ctx["runAsNonRoot"] != true {
                fail("runAsNonRoot is not true");
            }
            if ctx["runAsUser"] == 0 || pod_ctx["runAsUser"] == 0 {
                fail("runs as uid 0");
            }
            let seccomp = |c: &Value| {
                matches!(
                    c["seccompProfile"]["type"].as_str(),
                    Some("RuntimeDefault" | "Localhost")
                )
            };
            if !seccomp(ctx) && !seccomp(pod_ctx) {
                fail("seccompProfile is not RuntimeDefault or Localhost");
            }
            if ctx["readOnlyRootFilesystem"] != true {
                fail("readOnlyRootFilesystem is not true");
            }
            for port in container["ports"].as_array().into_iter().flatten() {
                if port.get("hostPort").is_some() {
                    fail("uses a hostPort");
                }
            }
            let resources = &container["resources"];
            if resources["requests"]["cpu"].is_null()
                || resources["requests"]["memory"].is_null()
                || resources["limits"]["memory"].is_null()
            {
                fail("lacks cpu/memory requests or a memory limit");
            }
        }
    }
}

/// The env entries of a workload's first container.
fn env_of(doc: &Value) -> &[Value] {
    doc["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// Each service's pods get exactly the secrets its flags read, from a Secret; the migration Job
/// gets DATABASE_URL alone; no secret is ever a plain value.
fn check_secrets(
    docs: &[&Value],
    binaries: &[String],
    sources: &Sources,
    problems: &mut Vec<String>,
) {
    let mut every_secret = BTreeSet::new();
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for binary in binaries {
        let envs = sources.secret_envs(binary);
        every_secret.extend(envs.iter().cloned());
        expected.insert(binary.clone(), envs);
    }
    expected.insert(
        "migrations".into(),
        BTreeSet::from(["DATABASE_URL".to_owned()]),
    );
    for doc in docs
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        let name = name_of(doc);
        let container = &doc["spec"]["template"]["spec"]["containers"][0];
        if container.get("envFrom").is_some() {
            problems.push(format!(
                "{name}: envFrom would inject every key of a Secret"
            ));
        }
        let mut from_secrets = BTreeSet::new();
        for env in env_of(doc) {
            let var = env["name"].as_str().unwrap_or_default().to_owned();
            if !env["valueFrom"]["secretKeyRef"].is_null() {
                from_secrets.insert(var);
            } else if every_secret.contains(&var) {
                problems.push(format!("{name}: the secret {var} is a plain value"));
            }
        }
        match expected.get(component(doc)) {
            Some(want) if *want != from_secrets => problems.push(format!(
                "{name}: gets secrets {from_secrets:?}, its flags read {want:?}"
            )),
            Some(_) => {}
            None => problems.push(format!("{name}: no service binary {:?}", component(doc))),
        }
    }
}

/// Each service connects to NATS as its own user: NATS_URL (and an NKey seed) come from the
/// Secret keys named after it (`NATS_URL_GITHUB_SYNC`), never from a key services share.
fn check_nats_users(docs: &[&Value], problems: &mut Vec<String>) {
    for doc in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let own = component(doc).to_uppercase().replace('-', "_");
        for env in env_of(doc) {
            let var = env["name"].as_str().unwrap_or_default();
            if var != "NATS_URL" && var != "FORGESYNC_NATS_NKEY" {
                continue;
            }
            let key = env["valueFrom"]["secretKeyRef"]["key"]
                .as_str()
                .unwrap_or_default();
            if key != format!("{var}_{own}") {
                problems.push(format!(
                    "{}: {var} comes from the Secret key {key:?}, not its own {var}_{own}",
                    name_of(doc)
                ));
            }
        }
    }
}

/// terminationGracePeriodSeconds = FORGESYNC_SHUTDOWN_GRACE + the preStop pause + a margin > 0.
fn check_grace(docs: &[&Value], problems: &mut Vec<String>) {
    for doc in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let name = name_of(doc);
        let pod = &doc["spec"]["template"]["spec"];
        let grace = env_of(doc)
            .iter()
            .find(|e| e["name"] == "FORGESYNC_SHUTDOWN_GRACE")
            .and_then(|e| e["value"].as_str()?.parse::<u64>().ok());
        let Some(grace) = grace else {
            problems.push(format!(
                "{name}: FORGESYNC_SHUTDOWN_GRACE is not set to a number"
            ));
            continue;
        };
        let pause = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap_or(0);
        match pod["terminationGracePeriodSeconds"].as_u64() {
            Some(total) if total > grace + pause => {}
            total => problems.push(format!(
                "{name}: terminationGracePeriodSeconds {total:?} leaves no margin over FORGESYNC_SHUTDOWN_GRACE {grace} + preStop {pause}"
            )),
        }
    }
}

/// `25m`, `26214400`, `32Mi`... in bytes.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let number: u64 = text[..digits].parse().ok()?;
    let unit = match text[digits..].to_ascii_lowercase().as_str() {
        "" => 1,
        "k" | "ki" => 1 << 10,
        "m" | "mi" => 1 << 20,
        "g" | "gi" => 1 << 30,
        _ => return None,
    };
    Some(number * unit)
}

/// Only ingress's Service is routed, on its API port, for the webhook paths; no Service is
/// exposed outside the cluster by itself.
fn check_public_routes(docs: &[&Value], fullname: &str, problems: &mut Vec<String>) {
    let backend = format!("{fullname}-{PUBLIC_SERVICE}");
    let http_port = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == backend.as_str())
        .and_then(|svc| {
            svc["spec"]["ports"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "http")?["port"]
                .as_u64()
        });
    for doc in docs {
        let name = name_of(doc);
        match doc["kind"].as_str() {
            Some("Service")
                if !matches!(doc["spec"]["type"].as_str(), None | Some("ClusterIP")) =>
            {
                problems.push(format!(
                    "{name}: type {} exposes it outside the cluster",
                    doc["spec"]["type"]
                ));
            }
            Some("Ingress") => {
                let size =
                    doc["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
                        .as_str()
                        .and_then(parse_size);
                if size.is_none_or(|s| s < MAX_WEBHOOK_BODY) {
                    problems.push(format!(
                        "{name}: proxy-body-size {size:?} is below the 25 MiB webhook limit"
                    ));
                }
                if doc["spec"].get("defaultBackend").is_some() {
                    problems.push(format!("{name}: a defaultBackend routes every path"));
                }
                for rule in doc["spec"]["rules"].as_array().into_iter().flatten() {
                    for path in rule["http"]["paths"].as_array().into_iter().flatten() {
                        let service = &path["backend"]["service"];
                        if service["name"] != backend.as_str() || service["port"]["name"] != "http"
                        {
                            problems.push(format!(
                                "{name}: routes to {service} (only {backend} port http is public)"
                            ));
                        }
                        if !PUBLIC_PATHS.contains(&path["path"].as_str().unwrap_or_default()) {
                            problems.push(format!(
                                "{name}: routes path {} (only {PUBLIC_PATHS:?})",
                                path["path"]
                            ));
                        }
                    }
                }
            }
            Some("HTTPRoute") => {
                for rule in doc["spec"]["rules"].as_array().into_iter().flatten() {
                    for target in rule["backendRefs"].as_array().into_iter().flatten() {
                        if target["name"] != backend.as_str()
                            || target["port"].as_u64() != http_port
                        {
                            problems.push(format!("{name}: routes to {target} (only {backend} port {http_port:?} is public)"));
                        }
                    }
                    let matches = rule["matches"].as_array().map_or(&[][..], Vec::as_slice);
                    if matches.is_empty() {
                        problems.push(format!("{name}: a rule without matches routes every path"));
                    }
                    for m in matches {
                        let path = &m["path"];
                        if path["type"] != "PathPrefix"
                            || !PUBLIC_PATHS.contains(&path["value"].as_str().unwrap_or_default())
                        {
                            problems
                                .push(format!("{name}: matches {path} (only {PUBLIC_PATHS:?})"));
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// `ConsumerSpec::new(Stream::X, "durable")` in a service's sources, as (STREAM, durable).
fn declared_consumers<'a>(sources: impl Iterator<Item = &'a str>) -> BTreeSet<(String, String)> {
    let sources: Vec<&str> = sources.collect();
    let mut found = BTreeSet::new();
    for text in &sources {
        for call in text.split("ConsumerSpec::new(Stream::").skip(1) {
            let Some((variant, rest)) = call.split_once(',') else {
                continue;
            };
            // A literal durable name, or one formatted from the service's name (the sync
            // engine's `format!("{}-jobs", self.service)`, a service's `format!("{name}-events")`),
            // kept as the template `{}-jobs`.
            let rest = rest.trim_start();
            let rest = rest.strip_prefix("format!(").unwrap_or(rest);
            // Or a constant: `const NAME: &str = "durable";` in the same sources.
            let durable = match rest.strip_prefix('"') {
                Some(r) => r.split('"').next(),
                None => {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    constant_text(&sources, &name)
                }
            };
            let Some(durable) = durable else {
                continue;
            };
            // Stream::WebhooksGithub is the stream WEBHOOKS_GITHUB.
            let mut stream = String::new();
            for (i, c) in variant.trim().chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    stream.push('_');
                }
                stream.push(c.to_ascii_uppercase());
            }
            found.insert((stream, service_template(durable)));
        }
    }
    found
}

/// `durable` with its one format argument, inline (`{name}`) or positional (`{}`), as `{}`.
fn service_template(durable: &str) -> String {
    match (durable.find('{'), durable.find('}')) {
        (Some(open), Some(close)) if open < close => {
            format!("{}{{}}{}", &durable[..open], &durable[close + 1..])
        }
        _ => durable.to_owned(),
    }
}

/// The text of `const NAME: &str = "...";` in `sources`.
fn constant_text<'a>(sources: &[&'a str], name: &str) -> Option<&'a str> {
    if name.is_empty() {
        return None;
    }
    let declaration = format!("const {name}: &str = \"");
    sources.iter().find_map(|text| {
        let (_, rest) = text.split_once(declaration.as_str())?;
        rest.split('"').next()
    })
}

/// KEDA scales each service on exactly the consumers its code declares.
fn check_consumers(
    values: &Value,
    binaries: &[String],
    sources: &Sources,
    problems: &mut Vec<String>,
) {
    // The consumers a service gets by registering the sync engine's `SyncJobs`, named after it.
    let engine = declared_consumers(sources.of_dir("crates/sync-engine/src"));
    for binary in binaries {
        // A durable formatted from the service's name is named after its binary.
        let mut declared: BTreeSet<(String, String)> =
            declared_consumers(sources.of_service(binary))
                .into_iter()
                .map(|(stream, durable)| (stream, durable.replace("{}", binary)))
                .collect();
        if sources
            .of_service(binary)
            .any(|text| text.contains("SyncJobs {"))
        {
            declared.extend(
                engine
                    .iter()
                    .map(|(stream, durable)| (stream.clone(), durable.replace("{}", binary))),
            );
        }
        let listed: BTreeSet<(String, String)> = values["services"][binary]["keda"]["consumers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["stream"].as_str().unwrap_or_default().to_owned(),
                    c["consumer"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        if declared != listed {
            problems.push(format!(
                "services.{binary}.keda.consumers lists {listed:?}; its code declares {declared:?}"
            ));
        }
    }
}

/// Every series an alert reads is exported by some code of ours, or is a known external one.
fn check_alert_series(docs: &[&Value], sources: &Sources, problems: &mut Vec<String>) {
    for doc in docs.iter().filter(|d| d["kind"] == "PrometheusRule") {
        for group in doc["spec"]["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                let expr = rule["expr"].as_str().unwrap_or_default();
                for series in promql::metric_names(expr) {
                    if !promql::is_external(&series) && !sources.exports(&series) {
                        problems.push(format!(
                            "alert {}: no code exports the series {series}",
                            rule["alert"]
                        ));
                    }
                }
            }
        }
    }
}

/// The dashboards: each file's name and JSON, sorted by name.
fn read_dashboards(dir: &Path) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path)?;
        let json = serde_json::from_str(&text)
            .with_context(|| format!("{DASHBOARDS}/{name} is not JSON"))?;
        out.push((name, json));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Every dashboard has its own uid and title and reads only series some code exports (the
/// stack's metrics test then scrapes them from running services).
fn check_dashboard_files(
    dashboards: &[(String, Value)],
    sources: &Sources,
    problems: &mut Vec<String>,
) {
    if dashboards.is_empty() {
        problems.push(format!("{DASHBOARDS} holds no dashboard"));
    }
    let mut uids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for (name, dashboard) in dashboards {
        for (field, seen) in [("uid", &mut uids), ("title", &mut titles)] {
            match dashboard[field].as_str() {
                Some(v) if !v.is_empty() => {
                    if !seen.insert(v.to_owned()) {
                        problems.push(format!("dashboard {name}: {field} {v:?} is taken"));
                    }
                }
                _ => problems.push(format!("dashboard {name}: no {field}")),
            }
        }
        let queries = promql::dashboard_queries(dashboard);
        if queries.is_empty() {
            problems.push(format!("dashboard {name}: no query"));
        }
        for (place, expr) in queries {
            for series in promql::metric_names(&expr) {
                if !promql::is_external(&series) && !sources.exports(&series) {
                    problems.push(format!(
                        "dashboard {name}: {place}: no code exports the series {series}"
                    ));
                }
            }
        }
    }
}

/// With `dashboards.enabled`, one ConfigMap per dashboard carries the sidecar's label and the
/// dashboard as it is in the repository; without, none renders.
fn check_dashboard_configmaps(
    docs: &[&Value],
    values: &Value,
    dashboards: &[(String, Value)],
    problems: &mut Vec<String>,
) {
    let settings = &values["dashboards"];
    let rendered: Vec<&Value> = docs
        .iter()
        .copied()
        .filter(|d| d["kind"] == "ConfigMap" && component(d) == "dashboards")
        .collect();
    if settings["enabled"] != true {
        if !rendered.is_empty() {
            problems.push("dashboards.enabled is off, yet dashboard ConfigMaps render".into());
        }
        return;
    }
    let (label, value) = (
        settings["label"].as_str().unwrap_or_default(),
        settings["labelValue"].as_str().unwrap_or_default(),
    );
    for (name, dashboard) in dashboards {
        let shipped: Vec<&Value> = rendered
            .iter()
            .copied()
            .filter(|d| d["data"].get(name).is_some())
            .collect();
        let [configmap] = shipped.as_slice() else {
            problems.push(format!(
                "dashboard {name}: {} ConfigMaps carry it, not one",
                shipped.len()
            ));
            continue;
        };
        if configmap["metadata"]["labels"][label] != value {
            problems.push(format!(
                "{}: no sidecar label {label}={value:?}",
                name_of(configmap)
            ));
        }
        let data = configmap["data"][name].as_str().unwrap_or_default();
        if serde_json::from_str::<Value>(data).ok().as_ref() != Some(dashboard) {
            problems.push(format!(
                "{}: {name} differs from {DASHBOARDS}/{name}",
                name_of(configmap)
            ));
        }
    }
    if rendered.len() != dashboards.len() {
        problems.push(format!(
            "{} dashboard ConfigMaps render for {} dashboards",
            rendered.len(),
            dashboards.len()
        ));
    }
}

/// The anchor GitHub gives a Markdown heading: lower case, spaces as `-`, other punctuation
/// dropped.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every alert's `runbook_url` ends in `#<anchor>` of its own name, and the runbook has that
/// section.
fn check_runbooks(docs: &[&Value], runbook: &str, problems: &mut Vec<String>) {
    let sections: BTreeSet<String> = runbook
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(heading_anchor)
        .collect();
    for doc in docs.iter().filter(|d| d["kind"] == "PrometheusRule") {
        for group in doc["spec"]["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                let Some(alert) = rule["alert"].as_str() else {
                    continue;
                };
                let url = rule["annotations"]["runbook_url"]
                    .as_str()
                    .unwrap_or_default();
                let own = heading_anchor(alert);
                match url.rsplit_once('#') {
                    Some((_, anchor)) if anchor == own && sections.contains(anchor) => {}
                    Some((_, anchor)) if anchor == own => problems.push(format!(
                        "alert {alert}: docs/operations.md has no section \"## {alert}\" for its runbook_url {url}"
                    )),
                    _ => problems.push(format!(
                        "alert {alert}: runbook_url {url:?} does not end in #{own}, its section of docs/operations.md"
                    )),
                }
            }
        }
    }
}

/// With `image.digest` set, every workload runs `repository@digest`.
fn check_image(docs: &[&Value], values: &Value, problems: &mut Vec<String>) {
    let Some(digest) = values["image"]["digest"].as_str().filter(|d| !d.is_empty()) else {
        return;
    };
    let want = format!(
        "{}@{digest}",
        values["image"]["repository"].as_str().unwrap_or_default()
    );
    for doc in docs
        .iter()
        .filter(|d| d["kind"] == "Deployment" || d["kind"] == "Job")
    {
        let pod = &doc["spec"]["template"]["spec"];
        for container in pod["containers"].as_array().into_iter().flatten() {
            if container["image"] != want.as_str() {
                problems.push(format!(
                    "{}: runs image {}, not the pinned {want}",
                    name_of(doc),
                    container["image"]
                ));
            }
        }
    }
}

/// The egress rule to the NetworkPolicy `peers` on TCP `ports`; none without peers (an empty
/// `to` would let out everything).
fn policy_rule(peers: &Value, ports: &Value) -> Option<Value> {
    peers.as_array().filter(|p| !p.is_empty())?;
    let ports: Vec<Value> = ports
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"protocol": "TCP", "port": p}))
        .collect();
    Some(canonical(&json!({"to": peers, "ports": ports})))
}

/// `v` with every number as a float, so that `5432` from a template equals `5432.0` from merged
/// values.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        other => other.clone(),
    }
}

/// Each Deployment's pods are selected by a NetworkPolicy that admits, besides the health port,
/// only ingress's webhooks from the ingress controller's namespaces and control-api's calls from
/// its configured ones; and lets out only DNS, Postgres, NATS, OTLP (when set) and vendor APIs
/// (for a service that calls them).
fn check_network_policies(docs: &[&Value], values: &Value, problems: &mut Vec<String>) {
    let np = &values["networkPolicy"];
    if np["enabled"] != true {
        return;
    }
    let policies: Vec<&&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "NetworkPolicy")
        .collect();
    let namespaces = |selector: &str| json!([{"namespaceSelector": {"matchLabels": np[selector]}}]);
    for deployment in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let name = name_of(deployment);
        let service = component(deployment);
        let selector = &deployment["spec"]["selector"]["matchLabels"];
        let Some(policy) = policies
            .iter()
            .find(|p| p["spec"]["podSelector"]["matchLabels"] == *selector)
        else {
            problems.push(format!("{name}: no NetworkPolicy selects its pods"));
            continue;
        };
        let policy_name = name_of(policy);
        let mut fail = |what: String| problems.push(format!("{policy_name}: {what}"));
        let types = &policy["spec"]["policyTypes"];
        if *types != json!(["Ingress", "Egress"]) {
            fail(format!(
                "policyTypes {types} do not restrict both directions"
            ));
        }
        // Who may call the API port: nobody but these.
        let api_callers = match service {
            PUBLIC_SERVICE => Some(namespaces("ingressControllerNamespaceSelector")),
            "control-api" => Some(namespaces("controlApiNamespaceSelector")),
            _ => None,
        };
        for rule in policy["spec"]["ingress"].as_array().into_iter().flatten() {
            let ports = rule["ports"].as_array().map_or(&[][..], Vec::as_slice);
            if ports.is_empty() {
                fail(format!("ingress rule {rule} opens every port"));
            }
            if rule["from"].as_array().is_none_or(Vec::is_empty) {
                fail(format!("ingress rule {rule} admits every peer"));
            }
            if ports.iter().all(|p| p["port"] == "health") {
                continue;
            }
            match &api_callers {
                Some(callers)
                    if rule["from"] == *callers && ports.iter().all(|p| p["port"] == "http") => {}
                Some(callers) => fail(format!(
                    "ingress rule {rule}: only {callers} may reach its http port"
                )),
                None => fail(format!(
                    "ingress rule {rule}: {service} serves nobody on its API port"
                )),
            }
        }
        let dns = canonical(
            &json!({"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}),
        );
        let peer = |key: &str| policy_rule(&np[key]["to"], &np[key]["ports"]);
        let otlp_set = values["otlpEndpoint"]
            .as_str()
            .is_some_and(|e| !e.is_empty());
        let calls_vendors = values["services"][service]["networkPolicy"]["vendorApis"]
            .as_bool()
            .or(values["serviceDefaults"]["networkPolicy"]["vendorApis"].as_bool())
            == Some(true);
        let allowed: Vec<(&str, Value)> = [
            ("DNS", Some(dns)),
            ("Postgres", peer("postgres")),
            ("NATS", peer("nats")),
            ("OTLP", peer("otlp").filter(|_| otlp_set)),
            ("vendor APIs", peer("vendorApis").filter(|_| calls_vendors)),
        ]
        .into_iter()
        .filter_map(|(what, rule)| Some((what, rule?)))
        .collect();
        for rule in policy["spec"]["egress"].as_array().into_iter().flatten() {
            let rule = canonical(rule);
            if !allowed.iter().any(|(_, a)| *a == rule) {
                fail(format!(
                    "egress rule {rule} is none of {}",
                    allowed
                        .iter()
                        .map(|(what, _)| *what)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
}

/// Every service binary has a Deployment, a Dockerfile target and a compose service; no
/// Deployment runs a binary that does not exist.
fn check_coverage(
    docs: &[&Value],
    binaries: &[String],
    dockerfile: &str,
    compose: &Value,
    problems: &mut Vec<String>,
) {
    let deployed: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| component(d))
        .collect();
    let image = dockerfile_binaries(dockerfile);
    for binary in binaries {
        if !deployed.contains(binary.as_str()) {
            problems.push(format!("services/ has the binary {binary} but the chart has no enabled services.{binary} entry"));
        }
        if !image.contains(binary) {
            problems.push(format!(
                "deploy/Dockerfile's SERVICE_BINARIES does not build {binary}"
            ));
        }
        if compose["services"][binary].is_null() {
            problems.push(format!("deploy/docker-compose.yml has no service {binary}"));
        }
    }
    for name in deployed {
        if !binaries.iter().any(|b| b == name) {
            problems.push(format!(
                "the chart deploys {name}, which no binary under services/ is"
            ));
        }
    }
    if !dockerfile.contains(ADMIN_BIN) {
        problems.push(format!(
            "deploy/Dockerfile does not ship {ADMIN_BIN}, which the migration Job runs"
        ));
    }
}

/// The words of the Dockerfile's `ARG SERVICE_BINARIES="..."`.
fn dockerfile_binaries(dockerfile: &str) -> BTreeSet<String> {
    dockerfile
        .lines()
        .find_map(|line| line.trim().strip_prefix("ARG SERVICE_BINARIES="))
        .map(|list| {
            list.trim_matches('"')
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of the chart, the Dockerfile, the compose file and the runbook in a temporary
    /// directory (at their workspace paths), removed on drop.
    struct ChartCopy {
        dir: PathBuf,
        inputs: Inputs,
    }

    impl ChartCopy {
        fn new(test: &str) -> Self {
            let root = Layout::discover().unwrap().workspace_root;
            let dir =
                std::env::temp_dir().join(format!("xtask-chart-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for input in INPUT_PATHS {
                let (from, to) = (root.join(input), dir.join(input));
                if from.is_dir() {
                    copy_dir(&from, &to).unwrap();
                } else {
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    std::fs::copy(from, to).unwrap();
                }
            }
            let inputs = Inputs::with_copies(&root, &dir);
            ChartCopy { dir, inputs }
        }

        /// Edits the copy of `file` (a workspace path).
        fn edit(&self, file: &str, edit: impl FnOnce(String) -> String) {
            let path = self.dir.join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            let edited = edit(text.clone());
            assert_ne!(text, edited, "the edit of {file} changed nothing");
            std::fs::write(path, edited).unwrap();
        }

        fn check(&self) -> anyhow::Result<String> {
            check(&tools(), &self.inputs)
        }
    }

    impl Drop for ChartCopy {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let target = to.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                // The chart's dashboards link: kept a link, to the copy's own deploy/grafana.
                std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, target)?;
            } else if kind.is_dir() {
                copy_dir(&entry.path(), &target)?;
            } else {
                std::fs::copy(entry.path(), target)?;
            }
        }
        Ok(())
    }

    fn tools() -> Tools {
        ensure_tools(&Layout::discover().unwrap()).unwrap()
    }

    fn failure(copy: &ChartCopy) -> String {
        format!("{:#}", copy.check().expect_err("the broken chart passed"))
    }

    #[test]
    fn the_chart_passes_every_check() {
        let summary = ChartCopy::new("pass").check().unwrap();
        assert!(
            summary.contains("defaults alone fail as they should"),
            "{summary}"
        );
    }

    #[test]
    fn a_broken_template_fails() {
        let copy = ChartCopy::new("template");
        copy.edit("helm/forgesync/templates/service.yaml", |t| {
            t.replace("{{- end }}\n{{- end }}", "{{- end }}")
        });
        let err = failure(&copy);
        // Both the strict lint and the render name the template and what is wrong with it: the
        // `range` left open runs into the end of the file.
        let template =
            std::fs::read_to_string(copy.dir.join("helm/forgesync/templates/service.yaml"))
                .unwrap();
        let parse_error = format!(
            "parse error at (forgesync/templates/service.yaml:{}): unexpected EOF",
            template.lines().count() + 1
        );
        for render in ["minimal", "everything"] {
            assert!(
                err.contains(&format!("{render}: helm lint: templates/: {parse_error}")),
                "{err}"
            );
            assert!(
                err.contains(&format!("{render}: helm render failed: {parse_error}")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_dashboard_reading_a_series_nothing_exports_fails() {
        let copy = ChartCopy::new("dashboard-series");
        copy.edit("deploy/grafana/overview.json", |t| {
            t.replace("bus_redeliveries_total", "bus_redeliveries_renamed_total")
        });
        let err = failure(&copy);
        assert!(
            err.contains("dashboard overview.json: panel \"Redeliveries / s\": no code exports the series bus_redeliveries_renamed_total"),
            "{err}"
        );
    }

    #[test]
    fn dashboards_without_the_sidecar_label_fail() {
        let copy = ChartCopy::new("dashboard-label");
        copy.edit("helm/forgesync/templates/dashboards.yaml", |t| {
            t.replace("    {{ $d.label }}: {{ $d.labelValue | quote }}\n", "")
        });
        let err = failure(&copy);
        assert!(
            err.contains("everything: ConfigMap fs-forgesync-dashboard-overview: no sidecar label grafana_dashboard=\"1\""),
            "{err}"
        );
        assert!(!err.contains("minimal:"), "{err}");
    }

    #[test]
    fn a_schema_invalid_value_fails() {
        let copy = ChartCopy::new("schema");
        copy.edit("helm/forgesync/ci/minimal.yaml", |t| {
            t.replace("services:\n", "services:\n  ingress:\n    replicaz: 3\n")
        });
        let err = failure(&copy);
        assert!(
            err.contains("additional properties 'replicaz' not allowed"),
            "{err}"
        );
    }

    #[test]
    fn a_nats_user_shared_by_services_fails() {
        let copy = ChartCopy::new("nats-users");
        copy.edit("helm/forgesync/templates/_helpers.tpl", |t| {
            t.replace(
                "(list \"NATS_URL\" \"FORGESYNC_NATS_NKEY\")",
                "(list \"FORGESYNC_NATS_NKEY\")",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains(
                "NATS_URL comes from the Secret key \"NATS_URL\", not its own NATS_URL_INGRESS"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_service_without_a_chart_entry_fails() {
        let copy = ChartCopy::new("entry");
        copy.edit("helm/forgesync/values.yaml", |t| {
            // Drop the github-sync entry: its line and the indented lines under it.
            let mut out = Vec::new();
            let mut skipping = false;
            for line in t.lines() {
                if line == "  github-sync:" {
                    skipping = true;
                    continue;
                }
                if skipping && (line.starts_with("    ") || line.is_empty()) {
                    continue;
                }
                skipping = false;
                out.push(line);
            }
            out.join("\n") + "\n"
        });
        let err = failure(&copy);
        assert!(
            err.contains(
                "has the binary github-sync but the chart has no enabled services.github-sync entry"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_service_without_a_dockerfile_target_fails() {
        let copy = ChartCopy::new("dockerfile");
        copy.edit("deploy/Dockerfile", |t| {
            t.replace(
                "ARG SERVICE_BINARIES=\"control-api eraser github-sync gitlab-sync ingress outline-sync provider-repair slack-ingest\"",
                "ARG SERVICE_BINARIES=\"control-api github-sync gitlab-sync ingress outline-sync provider-repair slack-ingest\"",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains("deploy/Dockerfile's SERVICE_BINARIES does not build eraser"),
            "{err}"
        );
        assert!(!err.contains("build github-sync"), "{err}");
    }

    #[test]
    fn a_service_without_a_compose_service_fails() {
        let copy = ChartCopy::new("compose");
        copy.edit("deploy/docker-compose.yml", |t| {
            t.replace(
                "  eraser:\n    <<: *forgesync\n    command: [\"eraser\"]\n    environment:\n      <<: *env\n",
                "",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains("deploy/docker-compose.yml has no service eraser"),
            "{err}"
        );
        assert!(!err.contains("has no service github-sync"), "{err}");
    }

    #[test]
    fn an_alert_without_its_runbook_section_fails() {
        let copy = ChartCopy::new("runbook");
        copy.edit("docs/operations.md", |t| {
            t.replace("## ForgesyncSweepsHeld\n", "## Sweeps held\n")
        });
        let err = failure(&copy);
        assert!(
            err.contains(
                "alert ForgesyncSweepsHeld: docs/operations.md has no section \"## ForgesyncSweepsHeld\""
            ),
            "{err}"
        );
        assert!(!err.contains("alert ForgesyncRelayBacklog"), "{err}");
    }

    #[test]
    fn an_alert_pointing_at_another_section_fails() {
        let copy = ChartCopy::new("runbook-url");
        copy.edit("helm/forgesync/templates/monitoring.yaml", |t| {
            t.replace("#forgesyncrelaybacklog", "#forgesyncoutboxparked")
        });
        let err = failure(&copy);
        assert!(
            err.contains(
                "alert ForgesyncRelayBacklog: runbook_url \"docs/operations.md#forgesyncoutboxparked\" does not end in #forgesyncrelaybacklog"
            ),
            "{err}"
        );
    }

    #[test]
    fn an_image_not_pinned_by_its_digest_fails() {
        let copy = ChartCopy::new("digest");
        copy.edit("helm/forgesync/templates/migrations.yaml", |t| {
            t.replace(
                "image: {{ include \"forgesync.image\" . | quote }}",
                "image: {{ printf \"%s:latest\" .Values.image.repository | quote }}",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains(
                "Job fs-forgesync-migrations: runs image \"ghcr.io/forgesync/forgesync:latest\", not the pinned ghcr.io/forgesync/forgesync@sha256:0123"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_network_policy_letting_more_in_or_out_fails() {
        let copy = ChartCopy::new("netpol");
        copy.edit("helm/forgesync/templates/networkpolicy.yaml", |t| {
            t.replace(
                "{{- toYaml $np.ingressControllerNamespaceSelector | nindent 14 }}",
                "{{- toYaml $np.ingressControllerNamespaceSelector | nindent 14 }}\n        - namespaceSelector: {}",
            )
            .replace(
                "{{- if $svc.networkPolicy.vendorApis }}",
                "{{- if true }}",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains("NetworkPolicy fs-forgesync-ingress: ingress rule")
                && err.contains("only [{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"ingress-nginx\"}}}] may reach its http port"),
            "{err}"
        );
        // Vendor APIs for a service that calls none: the eraser.
        assert!(
            err.contains("NetworkPolicy fs-forgesync-eraser: egress rule")
                && err.contains("is none of DNS, Postgres, NATS, OTLP"),
            "{err}"
        );
        assert!(
            !err.contains("NetworkPolicy fs-forgesync-github-sync: egress"),
            "{err}"
        );
    }

    #[test]
    fn a_secret_given_to_a_service_that_does_not_read_it_fails() {
        let copy = ChartCopy::new("secrets");
        copy.edit("helm/forgesync/values.yaml", |t| {
            t.replace(
                "      optional: [FORGESYNC_NATS_NKEY, FORGESYNC_WEBHOOK_ROUTING_KEYS]",
                "      optional: [FORGESYNC_NATS_NKEY, FORGESYNC_WEBHOOK_ROUTING_KEYS, FORGESYNC_JWT_SECRET]",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains("Deployment fs-forgesync-ingress: gets secrets"),
            "{err}"
        );
    }

    #[test]
    fn a_pod_that_may_escalate_fails() {
        let copy = ChartCopy::new("restricted");
        copy.edit("helm/forgesync/templates/_helpers.tpl", |t| {
            t.replace(
                "allowPrivilegeEscalation: false",
                "allowPrivilegeEscalation: true",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains("allowPrivilegeEscalation is not false"),
            "{err}"
        );
    }

    #[test]
    fn grace_without_margin_fails() {
        let copy = ChartCopy::new("grace");
        copy.edit("helm/forgesync/values.yaml", |t| {
            t.replace("    marginSeconds: 5", "    marginSeconds: 0")
        });
        let err = failure(&copy);
        assert!(err.contains("leaves no margin"), "{err}");
    }

    #[test]
    fn routing_the_health_port_or_another_path_fails() {
        let copy = ChartCopy::new("routes");
        copy.edit("helm/forgesync/templates/public-routes.yaml", |t| {
            t.replace("port: { name: http }", "port: { name: health }")
        });
        copy.edit("helm/forgesync/ci/everything.yaml", |t| {
            t.replace(
                "publicRoutes:\n",
                "publicRoutes:\n  paths: [/webhooks/, /metrics/]\n",
            )
        });
        let err = failure(&copy);
        assert!(
            err.contains("only fs-forgesync-ingress port http is public"),
            "{err}"
        );
        assert!(err.contains("routes path \"/metrics/\""), "{err}");
    }

    #[test]
    fn parses_hidden_envs_and_sizes() {
        let source = r#"
            #[arg(long, env = "PLAIN", value_name = "PLAIN")]
            #[arg(
                long,
                env = "SECRET",
                hide_env_values = true
            )]
            #[arg(long, env = "RANGED", value_parser = clap::value_parser!(u32).range(1..=100))]
        "#;
        assert_eq!(hidden_envs(source), BTreeSet::from(["SECRET".to_owned()]));
        assert_eq!(parse_size("25m"), Some(25 << 20));
        assert_eq!(parse_size("26214400"), Some(26214400));
        assert_eq!(parse_size("1x"), None);
    }

    #[test]
    fn a_durable_named_by_a_constant_is_declared() {
        let sources = [
            "pub const EVENTS: &str = \"svc-events\";",
            "..ConsumerSpec::new(Stream::WebhooksGitlab, EVENTS)",
        ];
        let found = declared_consumers(sources.into_iter());
        assert_eq!(
            found,
            BTreeSet::from([("WEBHOOKS_GITLAB".to_owned(), "svc-events".to_owned())])
        );
    }

    #[test]
    fn finds_declared_consumers() {
        let source = r#"..ConsumerSpec::new(Stream::WebhooksGithub, "a-b"), ConsumerSpec::new(Stream::Jobs,
            "jobs")"#;
        assert_eq!(
            declared_consumers([source].into_iter()),
            BTreeSet::from([
                ("JOBS".to_owned(), "jobs".to_owned()),
                ("WEBHOOKS_GITHUB".to_owned(), "a-b".to_owned())
            ])
        );
        let engine =
            r#"..ConsumerSpec::new(Stream::Lifecycle, format!("{}-lifecycle", self.service))"#;
        assert_eq!(
            declared_consumers([engine].into_iter()),
            BTreeSet::from([("LIFECYCLE".to_owned(), "{}-lifecycle".to_owned())])
        );
        let service = r#"..ConsumerSpec::new(Stream::WebhooksSlack, format!("{name}-events"))"#;
        assert_eq!(
            declared_consumers([service].into_iter()),
            BTreeSet::from([("WEBHOOKS_SLACK".to_owned(), "{}-events".to_owned())])
        );
    }
}
