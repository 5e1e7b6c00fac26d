//! `cargo xtask schema github-webhooks`: the JSON Schemas of GitHub's webhook payloads, from the
//! npm package `@octokit/webhooks-schemas`, pruned to the events the simulator sends.
//!
//! The package's `schema.json` (draft-07) holds one definition per event and action
//! (`issues$opened`, `status$event`) beside the shared objects they refer to (`issue`, `user`).
//! This task keeps the definitions of [`ROOTS`] and every definition they reach through `$ref`,
//! verbatim, and writes `schemas/github-webhooks.json` with sorted keys and the package version.
//! The simulator's payload tests validate against that file offline; the output depends only on
//! the package version and [`ROOTS`], so re-running it changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use serde_json::{Map, Value, json};

use crate::paths::Layout;

/// The npm package the schemas come from.
pub const PACKAGE: &str = "@octokit/webhooks-schemas";
/// The pinned version: a new one is taken on purpose, by changing this and re-running the task.
pub const VERSION: &str = "7.6.1";

/// The event payload definitions the simulator emits (`<event>$<action>`, `<event>$event` for
/// events without an action). The payload tests fail on a payload whose definition is missing
/// here and on a root that no payload exercises, so this list and the simulator move together.
pub const ROOTS: &[&str] = &[
    "check_run$completed",
    "check_run$created",
    "check_run$rerequested",
    "check_suite$completed",
    "check_suite$requested",
    "check_suite$rerequested",
    "installation$created",
    "installation$deleted",
    "installation$new_permissions_accepted",
    "installation$suspend",
    "installation$unsuspend",
    "installation_repositories$added",
    "installation_repositories$removed",
    "installation_target$renamed",
    "issue_comment$created",
    "issue_comment$deleted",
    "issue_comment$edited",
    "issues$closed",
    "issues$deleted",
    "issues$edited",
    "issues$locked",
    "issues$opened",
    "issues$reopened",
    "issues$unlocked",
    "pull_request$closed",
    "pull_request$converted_to_draft",
    "pull_request$edited",
    "pull_request$locked",
    "pull_request$opened",
    "pull_request$ready_for_review",
    "pull_request$reopened",
    "pull_request$review_request_removed",
    "pull_request$review_requested",
    "pull_request$synchronize",
    "pull_request$unlocked",
    "pull_request_review$dismissed",
    "pull_request_review$edited",
    "pull_request_review$submitted",
    "pull_request_review_comment$created",
    "pull_request_review_comment$deleted",
    "pull_request_review_comment$edited",
    "pull_request_review_thread$resolved",
    "pull_request_review_thread$unresolved",
    "push$event",
    "repository$archived",
    "repository$created",
    "repository$deleted",
    "repository$edited",
    "repository$renamed",
    "repository$transferred",
    "repository$unarchived",
    "star$created",
    "star$deleted",
    "status$event",
];

/// The committed, pruned schema, relative to the workspace root.
pub fn output_path(workspace_root: &Path) -> PathBuf {
    workspace_root.join("schemas/github-webhooks.json")
}

/// Runs the task: obtains `schema.json` (from npm, or `--from` a file or URL of the package
/// tarball or of `schema.json` itself), prunes it and writes the output.
pub fn refresh(layout: &Layout, from: Option<&str>) -> anyhow::Result<()> {
    let work = std::env::temp_dir().join(format!("xtask-webhook-schema-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let raw = obtain(&work, from);
    // The scratch copy of the package is never kept, whatever happened.
    let _ = std::fs::remove_dir_all(&work);
    let pruned = prune(&raw?, ROOTS)?;
    let output = output_path(&layout.workspace_root);
    let changed = std::fs::read_to_string(&output).ok().as_deref() != Some(&pruned);
    if let Some(dir) = output.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&output, &pruned).with_context(|| format!("writing {}", output.display()))?;
    eprintln!(
        "xtask: {} {} ({PACKAGE} {VERSION}, {} roots, {} lines)",
        if changed { "wrote" } else { "unchanged:" },
        output.display(),
        ROOTS.len(),
        pruned.lines().count()
    );
    Ok(())
}

/// The raw `schema.json` text, obtained into the scratch dir `work`.
fn obtain(work: &Path, from: Option<&str>) -> anyhow::Result<String> {
    let file = match from {
        None => npm_pack(work)?,
        Some(url) if url.starts_with("https://") || url.starts_with("http://") => {
            let name = if url.ends_with(".tgz") {
                "package.tgz"
            } else {
                "schema.json"
            };
            let file = work.join(name);
            curl(url, &file)?;
            file
        }
        Some(file) => PathBuf::from(file),
    };
    if file.extension().is_some_and(|e| e == "tgz") {
        unpack(&file, work)
    } else {
        let raw = read(&file)?;
        // A bare schema.json names no version: it is taken to be the pinned one.
        eprintln!(
            "xtask: note: recording {} as {PACKAGE} {VERSION}",
            file.display()
        );
        Ok(raw)
    }
}

/// `npm pack` of the pinned version into `work`; returns the tarball's path.
fn npm_pack(work: &Path) -> anyhow::Result<PathBuf> {
    eprintln!("xtask: fetching {PACKAGE}@{VERSION} with npm pack");
    let out = Command::new("npm")
        .args(["pack", "--json", "--silent", "--pack-destination"])
        .arg(work)
        .arg(format!("{PACKAGE}@{VERSION}"))
        .current_dir(work)
        .output()
        .context("could not run npm (install Node.js with npm, or pass --from FILE|URL)")?;
    ensure!(
        out.status.success(),
        "npm pack {PACKAGE}@{VERSION} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let listing: Value =
        serde_json::from_slice(&out.stdout).context("reading the output of npm pack --json")?;
    let filename = listing
        .get(0)
        .and_then(|p| p.get("filename"))
        .and_then(Value::as_str)
        .context("npm pack --json named no tarball")?;
    Ok(work.join(filename))
}

/// Unpacks an npm tarball into `work`, checks it is the pinned package and version, and returns
/// its `schema.json`.
fn unpack(tarball: &Path, work: &Path) -> anyhow::Result<String> {
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(tarball)
        .arg("-C")
        .arg(work)
        .args(["package/package.json", "package/schema.json"])
        .status()
        .context("could not run tar")?;
    ensure!(
        status.success(),
        "tar could not unpack package.json and schema.json from {}",
        tarball.display()
    );
    let manifest: Value = serde_json::from_str(&read(&work.join("package/package.json"))?)
        .context("parsing the package's package.json")?;
    let field = |key: &str| manifest[key].as_str().unwrap_or("?").to_owned();
    let (name, version) = (field("name"), field("version"));
    ensure!(
        name == PACKAGE && version == VERSION,
        "{} is {name} {version}, not the pinned {PACKAGE} {VERSION}: change VERSION in \
         xtask/src/webhook_schema.rs to move to another version",
        tarball.display()
    );
    read(&work.join("package/schema.json"))
}

fn curl(url: &str, to: &Path) -> anyhow::Result<()> {
    let out = Command::new("curl")
        .args([
            "--fail",
            "--silent",
            "--show-error",
            "--location",
            "--output",
        ])
        .arg(to)
        .arg(url)
        .output()
        .context("could not run curl (install curl or pass --from FILE)")?;
    ensure!(
        out.status.success(),
        "curl {url} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The only references the package uses: into its own `definitions`.
const DEFINITIONS: &str = "#/definitions/";

/// Prunes the package's `schema.json` (`raw`) to `roots` and what they reach, and prints it
/// deterministically: sorted keys, two-space indents, a final newline.
pub fn prune(raw: &str, roots: &[&str]) -> anyhow::Result<String> {
    let doc: Value = serde_json::from_str(raw).context("parsing the webhook schema")?;
    let definitions = doc
        .get("definitions")
        .and_then(Value::as_object)
        .context("the webhook schema has no `definitions` object")?;
    let mut kept: BTreeMap<String, &Value> = BTreeMap::new();
    let mut pending: Vec<String> = roots.iter().map(|r| (*r).to_owned()).collect();
    while let Some(name) = pending.pop() {
        if kept.contains_key(&name) {
            continue;
        }
        let def = definitions.get(&name).with_context(|| {
            format!("definition {name:?} is not in {PACKAGE} {VERSION}'s schema.json")
        })?;
        let mut refs = BTreeSet::new();
        collect_refs(def, &mut refs).with_context(|| format!("in definition {name:?}"))?;
        kept.insert(name, def);
        pending.extend(refs.into_iter().filter(|r| !kept.contains_key(r)));
    }
    let roots: BTreeSet<&str> = roots.iter().copied().collect();
    let out = json!({
        "$schema": doc.get("$schema").cloned().unwrap_or_else(|| json!("http://json-schema.org/draft-07/schema#")),
        "$comment": format!(
            "{PACKAGE} {VERSION}, pruned to the webhook payloads forgesync's GitHub simulator sends. \
             Generated by `cargo xtask schema github-webhooks`; do not edit by hand."
        ),
        "x-source": { "package": PACKAGE, "version": VERSION },
        "oneOf": roots
            .iter()
            .map(|r| json!({ "$ref": format!("{DEFINITIONS}{}", pointer_token(r)) }))
            .collect::<Vec<_>>(),
        "definitions": kept
            .into_iter()
            .map(|(name, def)| (name, (*def).clone()))
            .collect::<Map<String, Value>>(),
    });
    let mut text = serde_json::to_string_pretty(&sorted(out))?;
    text.push('\n');
    Ok(text)
}

/// Every definition named by a `$ref` inside `value`; a reference anywhere else is refused,
/// since the pruned file must stand alone.
fn collect_refs(value: &Value, out: &mut BTreeSet<String>) -> anyhow::Result<()> {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("$ref", Value::String(reference)) => {
                        let token = reference.strip_prefix(DEFINITIONS).with_context(|| {
                            format!("$ref {reference:?} does not point into #/definitions/")
                        })?;
                        ensure!(
                            !token.contains('/'),
                            "$ref {reference:?} points below a definition"
                        );
                        out.insert(unescape_token(token)?);
                    }
                    // A property named `$ref` maps to a schema object, not a string.
                    _ => collect_refs(child, out)?,
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_refs(item, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A JSON Pointer token as written in a URI fragment (RFC 6901 §3 and §6).
fn unescape_token(token: &str) -> anyhow::Result<String> {
    if token.contains('%') {
        bail!("percent-encoded $ref {token:?} is not supported");
    }
    Ok(token.replace("~1", "/").replace("~0", "~"))
}

fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// `value` with every object's keys in sorted order, whatever map serde_json was built with
/// (`preserve_order` keeps insertion order).
pub(crate) fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let entries: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAW: &str = r##"{
      "$schema": "http://json-schema.org/draft-07/schema#",
      "oneOf": [{ "$ref": "#/definitions/thing_event" }],
      "definitions": {
        "thing_event": { "oneOf": [{ "$ref": "#/definitions/thing$made" }, { "$ref": "#/definitions/thing$gone" }] },
        "thing$made": {
          "type": "object",
          "required": ["thing", "sender"],
          "properties": {
            "thing": { "allOf": [{ "$ref": "#/definitions/thing" }, { "type": "object" }] },
            "sender": { "$ref": "#/definitions/user" },
            "$ref": { "type": "string" }
          }
        },
        "thing$gone": { "type": "object", "properties": { "sender": { "$ref": "#/definitions/user" } } },
        "thing": { "type": "object", "properties": { "parts": { "items": { "$ref": "#/definitions/pa~1rt" } } } },
        "pa/rt": { "type": "string" },
        "user": { "type": "object", "properties": { "login": { "type": "string" } } },
        "unused": { "$ref": "#/definitions/user" }
      }
    }"##;

    fn names(pruned: &str) -> Vec<String> {
        let doc: Value = serde_json::from_str(pruned).unwrap();
        doc["definitions"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn keeps_the_roots_and_what_they_reach_verbatim() {
        let out = prune(RAW, &["thing$made"]).unwrap();
        assert_eq!(names(&out), ["pa/rt", "thing", "thing$made", "user"]);
        let doc: Value = serde_json::from_str(&out).unwrap();
        let raw: Value = serde_json::from_str(RAW).unwrap();
        assert_eq!(
            doc["definitions"]["thing$made"],
            raw["definitions"]["thing$made"]
        );
        assert_eq!(
            doc["oneOf"],
            json!([{ "$ref": "#/definitions/thing$made" }])
        );
        assert_eq!(doc["x-source"]["version"], VERSION);
    }

    #[test]
    fn an_unknown_root_or_reference_is_refused() {
        let err = prune(RAW, &["thing$lost"]).unwrap_err();
        assert!(err.to_string().contains("thing$lost"), "{err:#}");
        let dangling = RAW.replace("#/definitions/pa~1rt", "#/definitions/nowhere");
        let err = prune(&dangling, &["thing$made"]).unwrap_err();
        assert!(format!("{err:#}").contains("nowhere"), "{err:#}");
        let remote = RAW.replace("#/definitions/pa~1rt", "https://example.com/part.json");
        assert!(prune(&remote, &["thing$made"]).is_err());
    }

    #[test]
    fn rerunning_is_byte_for_byte_stable_and_a_fixpoint() {
        let first = prune(RAW, &["thing$gone", "thing$made"]).unwrap();
        assert_eq!(first, prune(RAW, &["thing$made", "thing$gone"]).unwrap());
        assert_eq!(prune(&first, &["thing$made", "thing$gone"]).unwrap(), first);
        assert!(first.ends_with("}\n"));
    }

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    /// Offline staleness guard: the committed file, pruned again with today's [`ROOTS`] and
    /// [`VERSION`], is itself. It fails when a root is added or dropped, when the version is
    /// moved, or when the file was edited by hand.
    #[test]
    fn committed_webhook_schema_is_up_to_date_and_stable() {
        let path = output_path(&root());
        let committed = std::fs::read_to_string(&path).unwrap();
        let again = prune(&committed, ROOTS).unwrap_or_else(|err| {
            panic!("schemas/github-webhooks.json lacks what ROOTS need ({err:#}): run `cargo xtask schema github-webhooks`")
        });
        assert!(
            again == committed,
            "schemas/github-webhooks.json is stale: run `cargo xtask schema github-webhooks`"
        );
    }
}
