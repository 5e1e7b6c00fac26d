//! `cargo xtask schema outline`: Outline's OpenAPI document, pruned to the calls forgesync makes
//! and normalised so that progenitor generates `crates/outline-client` from it.
//!
//! Outline publishes one OpenAPI 3.0 document (YAML) for its whole RPC API (`POST /api/<method>`).
//! This task reads it once, merges the project's supplement (`schemas/outline-supplement.yaml`:
//! the webhook subscription calls and the delivery body, which the document lacks), keeps the
//! operations of [`OPERATIONS`] and the supplement's, and every component they reach, and
//! normalises what progenitor refuses:
//!
//! - every 4xx/5xx response answers the one shared `Error` schema (progenitor wants one error
//!   type per operation; Outline's 429 is described with a schema of its own);
//! - a request body offered only as `multipart/form-data` or a form is sent as JSON (Outline
//!   accepts JSON for every call);
//! - `offset` and `limit` are non-negative integers, whatever type the document gives them;
//! - a success answer's `data` is required, so that an answer without it fails to decode rather
//!   than reading as an empty listing.
//!
//! It writes `schemas/outline.json` with sorted keys. The output depends on nothing but the
//! inputs, and running the task over its own output changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use serde_json::{Map, Value, json};

use crate::paths::Layout;
use crate::schema;
use crate::webhook_schema::sorted;

/// The shared vendor copy read when `--from` is not given.
pub const VENDOR_FILE: &str = "outline-spec3.yml";

/// Outline's calls forgesync makes, as the document's paths name them. The supplement's paths
/// are kept too.
pub const OPERATIONS: &[&str] = &[
    "/auth.info",
    "/collections.info",
    "/collections.list",
    "/documents.info",
    "/documents.list",
];

/// The schema every error response is given.
const ERROR_SCHEMA: &str = "Error";
/// Component references the pruning follows: `#/components/<kind>/<name>`.
const COMPONENTS: &str = "#/components/";

/// The project's supplement, relative to the workspace root.
pub fn supplement_path(workspace_root: &Path) -> PathBuf {
    workspace_root.join("schemas/outline-supplement.yaml")
}

/// The committed, generated document, relative to the workspace root.
pub fn output_path(workspace_root: &Path) -> PathBuf {
    workspace_root.join("schemas/outline.json")
}

/// Runs the task: reads the source (a file path or an http(s) URL, by default the shared
/// vendor copy), merges the supplement, prunes, normalises and writes the output.
pub fn refresh(layout: &Layout, from: Option<&str>) -> anyhow::Result<()> {
    let root = &layout.workspace_root;
    let raw = match from {
        Some(url) if url.starts_with("https://") || url.starts_with("http://") => {
            schema::fetch(url)?
        }
        Some(file) => schema::read(Path::new(file))?,
        None => schema::read(&schema::shared_vendor_file(root, VENDOR_FILE)?)?,
    };
    let supplement = schema::read(&supplement_path(root))?;
    let pruned = prune(&raw, &supplement)?;
    let output = output_path(root);
    let changed = std::fs::read_to_string(&output).ok().as_deref() != Some(&pruned);
    std::fs::write(&output, &pruned).with_context(|| format!("writing {}", output.display()))?;
    eprintln!(
        "xtask: {} {} ({} lines)",
        if changed { "wrote" } else { "unchanged:" },
        output.display(),
        pruned.lines().count()
    );
    Ok(())
}

/// Parses YAML (or JSON, which is YAML) into JSON values; map keys become strings (YAML lets a
/// status code be a number).
fn parse_yaml(text: &str, what: &str) -> anyhow::Result<Value> {
    let yaml: serde_norway::Value =
        serde_norway::from_str(text).with_context(|| format!("parsing {what}"))?;
    to_json(yaml).with_context(|| format!("reading {what}"))
}

fn to_json(yaml: serde_norway::Value) -> anyhow::Result<Value> {
    use serde_norway::Value as Y;
    Ok(match yaml {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n)?,
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Y::Mapping(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                let key = match key {
                    Y::String(s) => s,
                    Y::Number(n) => n.to_string(),
                    Y::Bool(b) => b.to_string(),
                    other => bail!("a map key that is not a scalar: {other:?}"),
                };
                out.insert(key, to_json(value)?);
            }
            Value::Object(out)
        }
        Y::Tagged(tagged) => bail!("YAML tags are not supported ({})", tagged.tag),
    })
}

/// Merges `supplement` into the document `raw`, keeps [`OPERATIONS`], the supplement's paths and
/// schemas and what they reach, normalises, and prints the result deterministically.
pub fn prune(raw: &str, supplement: &str) -> anyhow::Result<String> {
    let mut doc = parse_yaml(raw, "Outline's OpenAPI document")?;
    let supplement = parse_yaml(supplement, "schemas/outline-supplement.yaml")?;
    let version = doc
        .get("openapi")
        .and_then(Value::as_str)
        .context("the document names no `openapi` version")?
        .to_owned();
    ensure!(
        version.starts_with("3.0."),
        "the document is OpenAPI {version}; progenitor reads 3.0.x"
    );
    let extra_paths = merge_supplement(&mut doc, &supplement)?;
    normalise(&mut doc)?;

    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .context("the document has no `paths`")?;
    let mut kept_paths = Map::new();
    for path in OPERATIONS
        .iter()
        .map(|p| (*p).to_owned())
        .chain(extra_paths.0)
    {
        let item = paths
            .get(&path)
            .with_context(|| format!("{path} is not in the document"))?;
        kept_paths.insert(path, item.clone());
    }

    // Every component the kept paths and the supplement's schemas reach, by kind.
    let components = doc.get("components").cloned().unwrap_or_else(|| json!({}));
    let mut kept: BTreeSet<(String, String)> = BTreeSet::new();
    let mut pending: Vec<(String, String)> = extra_paths
        .1
        .iter()
        .map(|name| ("schemas".to_owned(), name.clone()))
        .collect();
    let mut refs = BTreeSet::new();
    collect_refs(&Value::Object(kept_paths.clone()), &mut refs)?;
    pending.extend(refs);
    while let Some((kind, name)) = pending.pop() {
        if kept.contains(&(kind.clone(), name.clone())) {
            continue;
        }
        let def = components
            .get(&kind)
            .and_then(|k| k.get(&name))
            .with_context(|| format!("#/components/{kind}/{name} is referred to but missing"))?;
        let mut refs = BTreeSet::new();
        collect_refs(def, &mut refs).with_context(|| format!("in {kind}/{name}"))?;
        kept.insert((kind, name));
        pending.extend(refs.into_iter().filter(|r| !kept.contains(r)));
    }
    let mut kept_components: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for (kind, name) in kept {
        kept_components
            .entry(kind.clone())
            .or_default()
            .insert(name.clone(), components[&kind][&name].clone());
    }
    if let Some(schemes) = components.get("securitySchemes") {
        kept_components.insert(
            "securitySchemes".to_owned(),
            schemes.as_object().cloned().unwrap_or_default(),
        );
    }

    // Tags described at the top, only those the kept operations carry.
    let used_tags: BTreeSet<&str> = kept_paths
        .values()
        .filter_map(Value::as_object)
        .flat_map(|item| item.values())
        .filter_map(|op| op.get("tags").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let tags: Vec<Value> = doc
        .get("tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| used_tags.contains(n))
        })
        .cloned()
        .collect();

    let info = doc.get("info").cloned().unwrap_or_else(|| json!({}));
    let mut out = json!({
        "openapi": version,
        "info": {
            "title": info.get("title").cloned().unwrap_or_else(|| json!("Outline API")),
            "version": info.get("version").cloned().unwrap_or_else(|| json!("0.0.0")),
            "description": "Outline's API (outline/openapi spec3.yml), pruned to the calls \
                forgesync makes, normalised for progenitor, with schemas/outline-supplement.yaml \
                merged. Generated by `cargo xtask schema outline`; do not edit by hand.",
        },
        "paths": kept_paths,
        "components": kept_components,
    });
    for key in ["servers", "security"] {
        if let Some(value) = doc.get(key) {
            out[key] = value.clone();
        }
    }
    if !tags.is_empty() {
        out["tags"] = Value::Array(tags);
    }
    let mut text = serde_json::to_string_pretty(&sorted(out))?;
    text.push('\n');
    Ok(text)
}

/// Adds the supplement's paths and component schemas to `doc` (replacing any of the same
/// name, so a document that already carries them merges to the same); returns the names of
/// both, which are kept whatever reaches them.
fn merge_supplement(
    doc: &mut Value,
    supplement: &Value,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let allowed: BTreeSet<&str> = ["paths", "components"].into();
    if let Some(map) = supplement.as_object() {
        for key in map.keys() {
            ensure!(
                allowed.contains(key.as_str()),
                "the supplement may hold only `paths` and `components.schemas`, not `{key}`"
            );
        }
    }
    let mut paths = Vec::new();
    if let Some(extra) = supplement.get("paths") {
        let extra = extra
            .as_object()
            .context("the supplement's `paths` is not a map")?;
        let target = doc
            .get_mut("paths")
            .and_then(Value::as_object_mut)
            .context("the document has no `paths`")?;
        for (path, item) in extra {
            target.insert(path.clone(), item.clone());
            paths.push(path.clone());
        }
    }
    let mut schemas = Vec::new();
    if let Some(components) = supplement.get("components") {
        let components = components
            .as_object()
            .context("the supplement's `components` is not a map")?;
        for key in components.keys() {
            ensure!(
                key == "schemas",
                "the supplement may add only `components.schemas`, not `components.{key}`"
            );
        }
        if let Some(extra) = components.get("schemas").and_then(Value::as_object) {
            let target = doc
                .as_object_mut()
                .context("the document is not a map")?
                .entry("components")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .context("the document's `components` is not a map")?
                .entry("schemas")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .context("the document's `components.schemas` is not a map")?;
            for (name, schema) in extra {
                target.insert(name.clone(), schema.clone());
                schemas.push(name.clone());
            }
        }
    }
    Ok((paths, schemas))
}

/// The normalisations progenitor needs, applied to the whole document (each is idempotent).
fn normalise(doc: &mut Value) -> anyhow::Result<()> {
    ensure!(
        doc.pointer(&format!("/components/schemas/{ERROR_SCHEMA}"))
            .is_some(),
        "the document has no components.schemas.{ERROR_SCHEMA} to answer errors with"
    );
    if let Some(responses) = doc
        .pointer_mut("/components/responses")
        .and_then(Value::as_object_mut)
    {
        // Components are referred to from error statuses only (Outline's are all errors).
        for response in responses.values_mut() {
            answer_error(response);
        }
    }
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for item in paths.values_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for op in item.values_mut() {
                normalise_operation(op);
            }
        }
    }
    integer_paging(doc);
    Ok(())
}

/// An operation's error statuses answer `Error`; its request body is JSON.
fn normalise_operation(op: &mut Value) {
    if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
        for (status, response) in responses.iter_mut() {
            let is_error = status.starts_with('4') || status.starts_with('5');
            // A `$ref` to a component was normalised with the components.
            if is_error && response.get("$ref").is_none() {
                answer_error(response);
            }
            if status.starts_with('2') {
                require_data(response);
            }
        }
    }
    if let Some(content) = op
        .pointer_mut("/requestBody/content")
        .and_then(Value::as_object_mut)
    {
        if !content.contains_key("application/json") {
            let form = ["multipart/form-data", "application/x-www-form-urlencoded"]
                .into_iter()
                .find_map(|media| content.get(media).cloned());
            if let Some(mut form) = form {
                // Per-part encodings mean nothing in a JSON body.
                if let Some(form) = form.as_object_mut() {
                    form.remove("encoding");
                }
                content.insert("application/json".to_owned(), form);
            }
        }
        content.retain(|media, _| media == "application/json");
    }
}

/// Outline wraps every answer in `{data, ...}`: a success without `data` is not one.
fn require_data(response: &mut Value) {
    let Some(schema) = response
        .pointer_mut("/content/application~1json/schema")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if schema
        .get("properties")
        .is_none_or(|props| props.get("data").is_none())
    {
        return;
    }
    let required = schema.entry("required").or_insert_with(|| json!([]));
    if let Some(required) = required.as_array_mut()
        && !required.iter().any(|r| r == "data")
    {
        required.push(json!("data"));
    }
}

/// A response answering the shared `Error` schema as JSON, its description kept; headers
/// (Outline's rate-limit headers) are read by the client, not by the generated code.
fn answer_error(response: &mut Value) {
    let description = response
        .get("description")
        .cloned()
        .unwrap_or_else(|| json!("An error."));
    *response = json!({
        "description": description,
        "content": {
            "application/json": {
                "schema": { "$ref": format!("{COMPONENTS}schemas/{ERROR_SCHEMA}") }
            }
        }
    });
}

/// Every `offset` and `limit` property becomes a non-negative integer (Outline's document calls
/// them `number`, which generates a float; a page position is a count).
fn integer_paging(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = map.get_mut("properties").and_then(Value::as_object_mut) {
                for key in ["offset", "limit"] {
                    if let Some(prop) = props.get_mut(key) {
                        let mut integer = json!({ "type": "integer", "minimum": 0 });
                        if let Some(description) = prop.get("description") {
                            integer["description"] = description.clone();
                        }
                        if let Some(example) = prop.get("example").filter(|e| e.is_u64()) {
                            integer["example"] = example.clone();
                        }
                        *prop = integer;
                    }
                }
            }
            for child in map.values_mut() {
                integer_paging(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integer_paging),
        _ => {}
    }
}

/// Every component named by a `$ref` inside `value`, as (kind, name). References outside
/// `#/components/` are refused: the output must stand alone.
fn collect_refs(value: &Value, out: &mut BTreeSet<(String, String)>) -> anyhow::Result<()> {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("$ref", Value::String(reference)) => {
                        let rest = reference.strip_prefix(COMPONENTS).with_context(|| {
                            format!("$ref {reference:?} does not point into #/components/")
                        })?;
                        let (kind, name) = rest
                            .split_once('/')
                            .with_context(|| format!("$ref {reference:?} names no component"))?;
                        ensure!(
                            !name.contains('/') && !name.contains('~') && !name.contains('%'),
                            "$ref {reference:?} is not a plain component name"
                        );
                        out.insert((kind.to_owned(), name.to_owned()));
                    }
                    // A property named `$ref` maps to a schema, not a string.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A small document in Outline's shape: the calls we keep, one we drop, a multipart body,
    /// a 429 with a schema of its own, paging as `number` and as `string`.
    const RAW: &str = r##"
openapi: 3.0.0
info: { title: Outline API, version: 0.1.0, description: "a long introduction" }
servers: [{ url: "https://app.getoutline.com/api" }]
security: [{ BearerAuth: [] }]
tags:
  - { name: Auth, description: who }
  - { name: Documents, description: docs }
  - { name: Shares, description: dropped }
paths:
  /auth.info:
    post:
      tags: [Auth]
      operationId: authInfo
      responses:
        200:
          description: OK
          content:
            application/json:
              schema: { type: object, properties: { data: { $ref: "#/components/schemas/Auth" } } }
        "401": { $ref: "#/components/responses/Unauthenticated" }
        "429": { $ref: "#/components/responses/RateLimited" }
  /collections.list:
    post:
      operationId: collectionsList
      requestBody:
        content: { application/json: { schema: { $ref: "#/components/schemas/Pagination" } } }
      responses: { "200": { description: OK } }
  /collections.info:
    post:
      operationId: collectionsInfo
      responses:
        "200": { description: OK }
        "404": { description: gone, content: { application/json: { schema: { type: object } } } }
  /documents.list:
    post:
      tags: [Documents]
      operationId: documentsList
      requestBody:
        content:
          multipart/form-data:
            schema:
              type: object
              properties:
                offset: { type: string, description: where }
                limit: { type: number, example: 25 }
            encoding: { offset: { contentType: text/plain } }
      responses: { "200": { description: OK } }
  /documents.info:
    post:
      operationId: documentsInfo
      responses: { "200": { description: OK } }
  /shares.list:
    post:
      tags: [Shares]
      operationId: sharesList
      responses:
        "200":
          description: OK
          content: { application/json: { schema: { $ref: "#/components/schemas/Share" } } }
components:
  securitySchemes: { BearerAuth: { type: http, scheme: bearer } }
  headers:
    Retry-After: { schema: { type: integer } }
  responses:
    Unauthenticated:
      description: no key
      content: { application/json: { schema: { $ref: "#/components/schemas/Error" } } }
    RateLimited:
      description: slow down
      headers: { Retry-After: { $ref: "#/components/headers/Retry-After" } }
      content: { application/json: { schema: { type: object, properties: { ok: { type: boolean } } } } }
  schemas:
    Auth: { type: object, properties: { user: { $ref: "#/components/schemas/User" } } }
    User:
      type: object
      properties:
        invitedBy: { allOf: [{ $ref: "#/components/schemas/User" }], nullable: true }
    Pagination:
      type: object
      properties: { offset: { type: number, example: 0 }, limit: { type: number, example: 25 } }
    Error: { type: object, properties: { error: { type: string } } }
    Share: { type: object }
"##;

    const SUPPLEMENT: &str = r##"
paths:
  /webhookSubscriptions.list:
    post:
      operationId: webhookSubscriptionsList
      requestBody:
        content: { application/json: { schema: { $ref: "#/components/schemas/Pagination" } } }
      responses:
        "200": { description: OK }
        "429": { $ref: "#/components/responses/RateLimited" }
components:
  schemas:
    WebhookDelivery: { type: object, properties: { payload: { $ref: "#/components/schemas/Payload" } } }
    Payload: { type: object, properties: { model: { type: object, nullable: true } } }
"##;

    fn pruned() -> Value {
        serde_json::from_str(&prune(RAW, SUPPLEMENT).unwrap()).unwrap()
    }

    fn keys(value: &Value) -> Vec<&str> {
        value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn keeps_our_calls_the_supplement_and_what_they_reach() {
        let out = pruned();
        assert_eq!(
            keys(&out["paths"]),
            [
                "/auth.info",
                "/collections.info",
                "/collections.list",
                "/documents.info",
                "/documents.list",
                "/webhookSubscriptions.list",
            ]
        );
        assert_eq!(
            keys(&out["components"]["schemas"]),
            [
                "Auth",
                "Error",
                "Pagination",
                "Payload",
                "User",
                "WebhookDelivery"
            ]
        );
        assert_eq!(
            keys(&out["components"]["responses"]),
            ["RateLimited", "Unauthenticated"]
        );
        // The rate-limit headers were reachable only from the 429's description of its own.
        assert!(out["components"].get("headers").is_none(), "{out:#}");
        assert_eq!(
            out["tags"],
            json!([{ "name": "Auth", "description": "who" }, { "name": "Documents", "description": "docs" }])
        );
        assert_eq!(out["info"]["version"], "0.1.0");
        assert!(
            !out.to_string().contains("a long introduction"),
            "the introduction is not kept"
        );
    }

    #[test]
    fn every_error_status_answers_the_shared_error_schema() {
        let out = pruned();
        let error = json!({ "$ref": "#/components/schemas/Error" });
        for response in ["RateLimited", "Unauthenticated"] {
            let response = &out["components"]["responses"][response];
            assert_eq!(
                response["content"]["application/json"]["schema"], error,
                "{response:#}"
            );
            assert!(response.get("headers").is_none());
        }
        let gone = &out["paths"]["/collections.info"]["post"]["responses"]["404"];
        assert_eq!(gone["content"]["application/json"]["schema"], error);
        assert_eq!(gone["description"], "gone");
        // A success must carry its data; one without a body is left as it is.
        assert_eq!(
            out["paths"]["/auth.info"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
                ["required"],
            json!(["data"])
        );
        assert_eq!(
            out["paths"]["/collections.info"]["post"]["responses"]["200"],
            json!({ "description": "OK" })
        );
    }

    #[test]
    fn a_form_body_is_sent_as_json_with_integer_paging() {
        let out = pruned();
        let content = &out["paths"]["/documents.list"]["post"]["requestBody"]["content"];
        assert_eq!(keys(content), ["application/json"]);
        let props = &content["application/json"]["schema"]["properties"];
        assert_eq!(
            props["offset"],
            json!({ "type": "integer", "minimum": 0, "description": "where" })
        );
        assert_eq!(
            props["limit"],
            json!({ "type": "integer", "minimum": 0, "example": 25 })
        );
        assert!(content["application/json"].get("encoding").is_none());
        assert_eq!(
            out["components"]["schemas"]["Pagination"]["properties"]["offset"],
            json!({ "type": "integer", "minimum": 0, "example": 0 })
        );
    }

    #[test]
    fn rerunning_is_byte_for_byte_stable_and_a_fixpoint() {
        let first = prune(RAW, SUPPLEMENT).unwrap();
        assert_eq!(first, prune(RAW, SUPPLEMENT).unwrap());
        assert_eq!(prune(&first, SUPPLEMENT).unwrap(), first);
        assert!(first.ends_with("}\n"));
    }

    #[test]
    fn a_missing_call_a_dangling_reference_or_a_foreign_supplement_key_is_refused() {
        let without = RAW.replace("/documents.info:", "/documents.gone:");
        let err = prune(&without, SUPPLEMENT).unwrap_err();
        assert!(err.to_string().contains("/documents.info"), "{err:#}");
        let dangling = RAW.replace("schemas/User\" }", "schemas/Nobody\" }");
        let err = prune(&dangling, SUPPLEMENT).unwrap_err();
        assert!(format!("{err:#}").contains("Nobody"), "{err:#}");
        let err = prune(RAW, "info: { title: x }").unwrap_err();
        assert!(err.to_string().contains("`info`"), "{err:#}");
        let err = prune(RAW, "components: { responses: {} }").unwrap_err();
        assert!(err.to_string().contains("components.responses"), "{err:#}");
        let swagger = RAW.replace("openapi: 3.0.0", "openapi: 3.1.0");
        assert!(prune(&swagger, SUPPLEMENT).is_err());
    }

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    /// Offline staleness guard: the committed document, run through the task again with the
    /// committed supplement, is itself. It fails when the supplement or [`OPERATIONS`] changed
    /// without a rerun, or when the file was edited by hand. Only committed files are read.
    #[test]
    fn committed_outline_schema_is_up_to_date_and_stable() {
        let root = root();
        let committed = std::fs::read_to_string(output_path(&root)).unwrap();
        let supplement = std::fs::read_to_string(supplement_path(&root)).unwrap();
        let again = prune(&committed, &supplement).unwrap_or_else(|err| {
            panic!("schemas/outline.json lacks what OPERATIONS need ({err:#}): run `cargo xtask schema outline`")
        });
        assert!(
            again == committed,
            "schemas/outline.json is stale: run `cargo xtask schema outline`"
        );
        let doc: Value = serde_json::from_str(&committed).unwrap();
        for op in OPERATIONS {
            assert!(doc["paths"].get(*op).is_some(), "{op} missing");
        }
        for schema in [
            "WebhookSubscription",
            "WebhookDelivery",
            "Document",
            "Collection",
        ] {
            assert!(
                doc["components"]["schemas"].get(schema).is_some(),
                "{schema} missing"
            );
        }
    }
}
