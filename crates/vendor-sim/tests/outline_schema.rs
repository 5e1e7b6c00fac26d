//! The simulated Outline against our Outline contract (`schemas/outline.json`, written by
//! `cargo xtask schema outline`): every answer of a method we call validates against that
//! method's 200 schema, every delivery body against `WebhookDelivery`, and the objects carry no
//! field the contract does not declare beyond the few Outline sends undocumented (listed here).

use std::sync::OnceLock;

use serde_json::{Map, Value as Json, json};
use vendor_sim::outline::{Model, NewDocument, OutlineSim, methods};

const TOKEN: &str = "ol_api_contract";

/// Fields Outline answers that its published document leaves out, per schema.
const UNDOCUMENTED: &[(&str, &[&str])] = &[
    ("Document", &["teamId", "template", "isCollectionDeleted"]),
    ("Pagination", &["nextPath"]),
    ("Auth", &["groups", "groupUsers", "availableTeams"]),
];

fn contract() -> &'static Json {
    static DOC: OnceLock<Json> = OnceLock::new();
    DOC.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/outline.json");
        let text =
            std::fs::read_to_string(path).expect("schemas/outline.json is in the repository");
        serde_json::from_str(&text).expect("schemas/outline.json is JSON")
    })
}

/// OpenAPI 3.0's `nullable: true` as JSON Schema says it: the schema, or null.
fn to_json_schema(v: &Json) -> Json {
    match v {
        Json::Object(map) => {
            let mut out = Map::new();
            let mut nullable = false;
            for (k, v) in map {
                match k.as_str() {
                    "nullable" => nullable = v.as_bool() == Some(true),
                    "example" | "readOnly" | "deprecated" => {}
                    _ => {
                        out.insert(k.clone(), to_json_schema(v));
                    }
                }
            }
            if nullable {
                json!({ "anyOf": [Json::Object(out), { "type": "null" }] })
            } else {
                Json::Object(out)
            }
        }
        Json::Array(items) => Json::Array(items.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

/// A validator for `schema`, its `#/components/schemas/...` references resolved in the
/// contract.
fn validator(schema: &Json) -> jsonschema::Validator {
    let components = to_json_schema(&contract()["components"]);
    let root = json!({ "components": components, "allOf": [to_json_schema(schema)] });
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(true)
        .build(&root)
        .expect("the contract compiles")
}

fn check(what: &str, schema: &Json, value: &Json) {
    let v = validator(schema);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} breaks the contract: {errors:#?}\n{value:#}"
    );
}

/// Every key of `value` is a property of the component `name` (or listed as undocumented).
fn declared(name: &str, value: &Json) {
    let props = contract()["components"]["schemas"][name]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{name} has properties"));
    let extra = UNDOCUMENTED
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[][..], |(_, f)| *f);
    for key in value.as_object().expect("an object").keys() {
        assert!(
            props.contains_key(key) || extra.contains(&key.as_str()),
            "{name}.{key} is served but not in the contract"
        );
    }
}

fn response_schema(method: &str) -> Json {
    contract()["paths"][format!("/{method}")]["post"]["responses"]["200"]["content"]
        ["application/json"]["schema"]
        .clone()
}

async fn call(sim: &OutlineSim, method: &str, body: Json) -> Json {
    let r = reqwest::Client::new()
        .post(format!("{}{method}", sim.api_url()))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{method}: {}", r.status());
    r.json().await.unwrap()
}

#[tokio::test]
async fn every_answer_and_delivery_matches_the_outline_contract() {
    let mut m = Model::new("acme");
    m.add_token(TOKEN);
    let docs = m.add_collection("Docs");
    let root = m
        .add_document(NewDocument::new(&docs, "Root").text("# hello"))
        .unwrap();
    let child = m
        .add_document(NewDocument::new(&docs, "Child").parent(&root))
        .unwrap();
    m.add_document(NewDocument::new(&docs, "Draft").draft())
        .unwrap();
    m.delete_document(&child).unwrap();
    let sim = OutlineSim::start(m).await.unwrap();

    // A receiver for deliveries.
    let got: std::sync::Arc<std::sync::Mutex<Vec<Json>>> = Default::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Json>| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(body);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });

    let calls = [
        (methods::AUTH_INFO, json!({})),
        (methods::COLLECTIONS_LIST, json!({ "limit": 10 })),
        (methods::COLLECTIONS_INFO, json!({ "id": docs })),
        (
            methods::DOCUMENTS_LIST,
            json!({ "collectionId": docs, "sort": "createdAt", "direction": "ASC",
                    "statusFilter": ["published", "draft"] }),
        ),
        (methods::DOCUMENTS_INFO, json!({ "id": root })),
        (methods::DOCUMENTS_INFO, json!({ "id": child })),
        (
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            json!({ "name": "forgesync", "url": url, "events": ["documents", "collections"],
                    "secret": "s" }),
        ),
        (methods::WEBHOOK_SUBSCRIPTIONS_LIST, json!({})),
    ];
    for (method, body) in calls {
        let answer = call(&sim, method, body).await;
        check(method, &response_schema(method), &answer);
        let data = &answer["data"];
        let items: Vec<&Json> = match data {
            Json::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        let component = match method {
            methods::AUTH_INFO => "Auth",
            methods::COLLECTIONS_LIST | methods::COLLECTIONS_INFO => "Collection",
            methods::DOCUMENTS_LIST | methods::DOCUMENTS_INFO => "Document",
            _ => "WebhookSubscription",
        };
        for item in items {
            declared(component, item);
        }
        if let Some(p) = answer.get("pagination") {
            declared("Pagination", p);
        }
        if method == methods::AUTH_INFO {
            declared("User", &data["user"]);
            declared("Team", &data["team"]);
        }
    }
    let id = call(&sim, methods::WEBHOOK_SUBSCRIPTIONS_LIST, json!({})).await["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    sim.model(|m| {
        m.update_document(&root, Some("Renamed"), None).unwrap();
        m.permanently_delete_document(&child).unwrap();
        m.delete_collection(&docs).unwrap();
    });
    sim.settle().await;
    let bodies = got.lock().unwrap().clone();
    assert_eq!(bodies.len(), 3);
    let delivery = json!({ "$ref": "#/components/schemas/WebhookDelivery" });
    for body in &bodies {
        check("a delivery", &delivery, body);
        declared("WebhookDelivery", body);
        declared("WebhookPayload", &body["payload"]);
        assert_eq!(body["webhookSubscriptionId"], id.as_str());
    }
    declared("Document", &bodies[0]["payload"]["model"]);
    declared("Collection", &bodies[2]["payload"]["model"]);

    let deleted = call(
        &sim,
        methods::WEBHOOK_SUBSCRIPTIONS_DELETE,
        json!({ "id": id }),
    )
    .await;
    check(
        methods::WEBHOOK_SUBSCRIPTIONS_DELETE,
        &response_schema(methods::WEBHOOK_SUBSCRIPTIONS_DELETE),
        &deleted,
    );
}
