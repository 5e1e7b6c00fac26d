//! Outline read routes end to end (real service and Postgres, rows written by outline-mirror as
//! outline-sync writes them): a workspace sees its collections with where their reconcile
//! stands, pages its documents (never their text) by `after`/`limit` within a collection, reads
//! one document with its text, and a tombstone without title or text; another workspace's ids
//! answer 404 exactly like ids that exist nowhere.

use anyhow::Result;
use control_api::Role;
use outline_mirror::collection::{self, CollectionPayload, PassOutcome};
use outline_mirror::document::DocumentPayload;
use outline_mirror::{OutlineConnection, apply_collection, apply_document, tombstone_document};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use testkit::TestEnv;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000 + secs).unwrap()
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

struct Fixture {
    _env: TestEnv,
    _api: testkit::Running,
    http: reqwest::Client,
    base: String,
    keys: control_api::Keys,
    admin: String,
    pool: PgPool,
}

/// A workspace with one Outline connection and an admin token scoped to it.
struct Tenant {
    ws: Uuid,
    conn: OutlineConnection,
    token: String,
}

impl Fixture {
    async fn start() -> Result<Fixture> {
        let env = TestEnv::new().await?;
        let (api, keys) = (
            testkit::spawn(testkit::control_api_config(env.common_args())).await?,
            testkit::control_api_keys()?,
        );
        let pool = env.db.db.get_postgres_connection_pool().clone();
        Ok(Fixture {
            http: reqwest::Client::new(),
            base: api.url(),
            admin: testkit::token(&keys, Role::Admin, None)?,
            keys,
            pool,
            _env: env,
            _api: api,
        })
    }

    async fn call(&self, path: &str, token: Option<&str>) -> Result<(StatusCode, Value)> {
        let mut req = self
            .http
            .request(Method::GET, format!("{}{path}", self.base));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let res = req.send().await?;
        Ok((res.status(), res.json().await.unwrap_or(Value::Null)))
    }

    /// A GET that must answer 200.
    async fn ok(&self, path: &str, token: &str) -> Result<Value> {
        let (s, body) = self.call(path, Some(token)).await?;
        assert_eq!(s, StatusCode::OK, "{path}: {body}");
        Ok(body)
    }

    async fn operator(&self, path: &str, body: Value) -> Result<Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.admin)
            .json(&body)
            .send()
            .await?;
        assert!(res.status().is_success(), "{path}: {}", res.status());
        Ok(res.json().await?)
    }

    async fn tenant(&self, name: &str) -> Result<Tenant> {
        let ws = self
            .operator("/workspaces", json!({ "name": name }))
            .await?;
        let ws: Uuid = ws["id"].as_str().unwrap().parse()?;
        let conn = self
            .operator(
                &format!("/workspaces/{ws}/connections"),
                json!({ "kind": "outline", "secrets": { "token": "ol_api_test" } }),
            )
            .await?;
        let conn: Uuid = conn["id"].as_str().unwrap().parse()?;
        let conn = OutlineConnection::load(&self.pool, conn)
            .await?
            .expect("an Outline connection");
        Ok(Tenant {
            ws,
            conn,
            token: testkit::token(&self.keys, Role::Admin, Some(ws))?,
        })
    }

    /// A collection as outline-sync writes it from a listing; its row id.
    async fn collection(&self, t: &Tenant, outline_id: &str, name: &str) -> Result<Uuid> {
        let mut txn = self.pool.begin().await?;
        apply_collection(
            &mut txn,
            &t.conn,
            &CollectionPayload {
                outline_id: outline_id.into(),
                name: Some(name.into()),
                url_id: Some(format!("url-{outline_id}")),
                updated_at: at(0),
                deleted_at: None,
            },
        )
        .await?;
        let id = collection::lock(&mut txn, &t.conn, outline_id)
            .await?
            .expect("the collection written")
            .id;
        txn.commit().await?;
        Ok(id)
    }

    /// A document as outline-sync writes it; its row id.
    async fn document(&self, t: &Tenant, outline_id: &str, collection: &str) -> Result<Uuid> {
        let mut txn = self.pool.begin().await?;
        let written = apply_document(
            &mut txn,
            &t.conn,
            &DocumentPayload {
                outline_id: outline_id.into(),
                collection_outline_id: collection.into(),
                parent_outline_id: None,
                title: Some(format!("title of {outline_id}")),
                text: Some(format!("text of {outline_id}")),
                url_id: Some(format!("url-{outline_id}")),
                created_at: Some(at(1)),
                updated_at: at(10),
                published_at: Some(at(2)),
                archived_at: None,
                deleted_at: None,
            },
        )
        .await?;
        txn.commit().await?;
        Ok(written.document().expect("a new document").id)
    }

    /// Outline reported `outline_id` deleted at `when`.
    async fn delete(&self, t: &Tenant, outline_id: &str, when: OffsetDateTime) -> Result<()> {
        let mut txn = self.pool.begin().await?;
        tombstone_document(&mut txn, &t.conn, outline_id, when, None).await?;
        txn.commit().await?;
        Ok(())
    }
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|row| row["id"].as_str().unwrap().to_owned())
        .collect()
}

fn strings(ids: &[Uuid]) -> Vec<String> {
    ids.iter().map(Uuid::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_show_where_each_reconcile_stands() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let clean = f.collection(&a, "coll-clean", "Handbook").await?;
    let held = f.collection(&a, "coll-held", "Runbooks").await?;
    let gone = f.collection(&a, "coll-gone", "Archive").await?;
    assert!(collection::record_pass(&f.pool, &a.conn, clean, &PassOutcome::Clean).await?);
    assert!(
        collection::record_pass(
            &f.pool,
            &a.conn,
            held,
            &PassOutcome::NotClean("budget_exhausted".into()),
        )
        .await?
    );
    let mut txn = f.pool.begin().await?;
    collection::tombstone(&mut txn, &a.conn, "coll-gone", at(50)).await?;
    txn.commit().await?;

    // A viewer reads.
    let viewer = testkit::token(&f.keys, Role::Viewer, Some(a.ws))?;
    let list = f
        .ok(
            &format!("/workspaces/{}/outline/collections", a.ws),
            &viewer,
        )
        .await?;
    assert_eq!(ids(&list), strings(&[clean, held, gone]));
    let c = &list[0];
    assert_eq!(c["outline_id"], "coll-clean");
    assert_eq!(c["connection_id"], a.conn.id().to_string());
    assert_eq!(c["name"], "Handbook");
    assert_eq!(c["updated_at"], rfc3339(at(0)));
    assert_eq!(c["awaiting_clean_pass"], false);
    assert!(
        OffsetDateTime::parse(c["last_clean_pass_at"].as_str().unwrap(), &Rfc3339).is_ok(),
        "{c}"
    );
    assert_eq!(c["last_outcome"], "clean");
    assert_eq!(c["deleted_at"], Value::Null);

    // A pass that was not clean leaves it awaiting one, with the reason.
    let c = &list[1];
    assert_eq!(c["awaiting_clean_pass"], true);
    assert_eq!(c["last_clean_pass_at"], Value::Null);
    assert_eq!(c["last_outcome"], "budget_exhausted");

    // A deleted collection is listed with its date and without its name.
    let c = &list[2];
    assert_eq!(c["outline_id"], "coll-gone");
    assert_eq!(c["name"], Value::Null);
    assert_eq!(c["deleted_at"], rfc3339(at(50)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_page_by_after_and_limit_within_a_collection_without_text() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let handbook = f.collection(&a, "coll-1", "Handbook").await?;
    let other = f.collection(&a, "coll-2", "Other").await?;
    // Interleaved, so that only the filter keeps the other collection's out of a page.
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..5 {
        mine.push(f.document(&a, &format!("doc-{i}"), "coll-1").await?);
        if i < 2 {
            theirs.push(f.document(&a, &format!("else-{i}"), "coll-2").await?);
        }
    }
    let list = |query: &str| format!("/workspaces/{}/outline/documents{query}", a.ws);

    let all = f.ok(&list(""), &a.token).await?;
    let mut every = [mine.clone(), theirs.clone()].concat();
    every.sort();
    assert_eq!(ids(&all), strings(&every));
    let d = &all[0];
    assert_eq!(d["outline_id"], "doc-0");
    assert_eq!(d["connection_id"], a.conn.id().to_string());
    assert_eq!(d["collection_id"], handbook.to_string());
    assert_eq!(d["parent_outline_id"], Value::Null);
    assert_eq!(d["title"], "title of doc-0");
    assert_eq!(d["updated_at"], rfc3339(at(10)));
    assert_eq!(d["published_at"], rfc3339(at(2)));
    assert_eq!(d["archived_at"], Value::Null);
    assert_eq!(d["deleted_at"], Value::Null);
    // A listing never carries the text.
    for d in all.as_array().unwrap() {
        assert!(d.get("text").is_none(), "{d}");
        assert!(!d.to_string().contains("text of"), "{d}");
    }

    // Pages of one collection: each after the last id of the previous one.
    let first = f
        .ok(
            &list(&format!("?collection_id={handbook}&limit=2")),
            &a.token,
        )
        .await?;
    assert_eq!(ids(&first), strings(&mine[..2]));
    let second = f
        .ok(
            &list(&format!(
                "?collection_id={handbook}&limit=2&after={}",
                mine[1]
            )),
            &a.token,
        )
        .await?;
    assert_eq!(ids(&second), strings(&mine[2..4]));
    let last = f
        .ok(
            &list(&format!(
                "?collection_id={handbook}&limit=2&after={}",
                mine[3]
            )),
            &a.token,
        )
        .await?;
    assert_eq!(ids(&last), strings(&mine[4..]));
    let past = f
        .ok(
            &list(&format!("?collection_id={handbook}&after={}", mine[4])),
            &a.token,
        )
        .await?;
    assert_eq!(ids(&past), Vec::<String>::new());
    let others = f
        .ok(&list(&format!("?collection_id={other}")), &a.token)
        .await?;
    assert_eq!(ids(&others), strings(&theirs));

    // An unknown collection is 404; a malformed filter or page is 400.
    let (s, body) = f
        .call(
            &list(&format!("?collection_id={}", Uuid::now_v7())),
            Some(&a.token),
        )
        .await?;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "not_found");
    for query in ["?collection_id=nope", "?after=nope", "?limit=ten"] {
        let (s, body) = f.call(&list(query), Some(&a.token)).await?;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["error"], "bad_request", "{query}: {body}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_document_has_its_text_and_a_tombstone_neither_title_nor_text() -> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let handbook = f.collection(&a, "coll-1", "Handbook").await?;
    let live = f.document(&a, "doc-live", "coll-1").await?;
    let gone = f.document(&a, "doc-gone", "coll-1").await?;
    f.delete(&a, "doc-gone", at(20)).await?;
    let path = |id: Uuid| format!("/workspaces/{}/outline/documents/{id}", a.ws);

    let viewer = testkit::token(&f.keys, Role::Viewer, Some(a.ws))?;
    let d = f.ok(&path(live), &viewer).await?;
    assert_eq!(d["id"], live.to_string());
    assert_eq!(d["outline_id"], "doc-live");
    assert_eq!(d["collection_id"], handbook.to_string());
    assert_eq!(d["title"], "title of doc-live");
    assert_eq!(d["text"], "text of doc-live");
    assert_eq!(d["updated_at"], rfc3339(at(10)));
    assert_eq!(d["deleted_at"], Value::Null);

    // A tombstone: dated, its title and text cleared, in the listing as in the read.
    let d = f.ok(&path(gone), &viewer).await?;
    assert_eq!(d["outline_id"], "doc-gone");
    assert_eq!(d["deleted_at"], rfc3339(at(20)));
    assert_eq!(d["title"], Value::Null);
    assert_eq!(d["text"], Value::Null);
    let list = f
        .ok(&format!("/workspaces/{}/outline/documents", a.ws), &viewer)
        .await?;
    assert_eq!(ids(&list), strings(&[live, gone]));
    assert_eq!(list[1]["deleted_at"], rfc3339(at(20)));
    assert_eq!(list[1]["title"], Value::Null);

    // An unknown id is 404; a malformed one 400; no token 401 on every route.
    let (s, body) = f.call(&path(Uuid::now_v7()), Some(&viewer)).await?;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "not_found");
    let (s, _) = f
        .call(
            &format!("/workspaces/{}/outline/documents/nope", a.ws),
            Some(&viewer),
        )
        .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    for p in [
        format!("/workspaces/{}/outline/collections", a.ws),
        format!("/workspaces/{}/outline/documents", a.ws),
        path(live),
    ] {
        let (s, body) = f.call(&p, None).await?;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{p}: {body}");
        assert_eq!(body["error"], "unauthorized");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_collections_and_documents_are_not_found_and_never_listed() -> Result<()>
{
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let b = f.tenant("b").await?;
    // B's connection reads the same Outline team: its own copy, by the same Outline ids.
    let a_coll = f.collection(&a, "coll-1", "A's handbook").await?;
    let a_doc = f.document(&a, "doc-1", "coll-1").await?;
    let b_coll = f.collection(&b, "coll-1", "B's handbook").await?;
    let b_doc = f.document(&b, "doc-2", "coll-1").await?;

    // A's ids under B's workspace (no such rows there) and under A's (B's token does not
    // reach it), for B's admin and viewer alike, answer as ids that exist nowhere.
    let b_viewer = testkit::token(&f.keys, Role::Viewer, Some(b.ws))?;
    let unknown_doc = Uuid::now_v7();
    let (_, no_document) = f
        .call(
            &format!("/workspaces/{}/outline/documents/{unknown_doc}", b.ws),
            Some(&b.token),
        )
        .await?;
    assert_eq!(no_document["error"], "not_found", "{no_document}");
    let (_, no_collection) = f
        .call(
            &format!(
                "/workspaces/{}/outline/documents?collection_id={}",
                b.ws,
                Uuid::now_v7()
            ),
            Some(&b.token),
        )
        .await?;
    assert_eq!(no_collection["error"], "not_found", "{no_collection}");
    for token in [&b.token, &b_viewer] {
        let p = format!("/workspaces/{}/outline/documents/{a_doc}", b.ws);
        let (s, body) = f.call(&p, Some(token)).await?;
        assert_eq!(s, StatusCode::NOT_FOUND, "{p}: {body}");
        assert_eq!(body, no_document, "{p}");
        let p = format!(
            "/workspaces/{}/outline/documents?collection_id={a_coll}",
            b.ws
        );
        let (s, body) = f.call(&p, Some(token)).await?;
        assert_eq!(s, StatusCode::NOT_FOUND, "{p}: {body}");
        assert_eq!(body, no_collection, "{p}");
        for p in [
            format!("/workspaces/{}/outline/documents/{a_doc}", a.ws),
            format!(
                "/workspaces/{}/outline/documents?collection_id={a_coll}",
                a.ws
            ),
            format!("/workspaces/{}/outline/documents", a.ws),
            format!("/workspaces/{}/outline/collections", a.ws),
        ] {
            let (s, body) = f.call(&p, Some(token)).await?;
            assert_eq!(s, StatusCode::NOT_FOUND, "{p}: {body}");
            assert!(!body.to_string().contains("A's"), "{p}: {body}");
        }
    }

    // B's own reads list B's copy only.
    let list = f
        .ok(
            &format!("/workspaces/{}/outline/collections", b.ws),
            &b_viewer,
        )
        .await?;
    assert_eq!(ids(&list), strings(&[b_coll]));
    assert_eq!(list[0]["name"], "B's handbook");
    let list = f
        .ok(
            &format!("/workspaces/{}/outline/documents", b.ws),
            &b_viewer,
        )
        .await?;
    assert_eq!(ids(&list), strings(&[b_doc]));
    let d = f
        .ok(
            &format!("/workspaces/{}/outline/documents/{b_doc}", b.ws),
            &b_viewer,
        )
        .await?;
    assert_eq!(d["collection_id"], b_coll.to_string());

    // A still reads its own, and an operator's token reads either workspace.
    let d = f
        .ok(
            &format!("/workspaces/{}/outline/documents/{a_doc}", a.ws),
            &a.token,
        )
        .await?;
    assert_eq!(d["text"], "text of doc-1");
    let operator_viewer = testkit::token(&f.keys, Role::Viewer, None)?;
    let list = f
        .ok(
            &format!("/workspaces/{}/outline/documents", a.ws),
            &operator_viewer,
        )
        .await?;
    assert_eq!(ids(&list), strings(&[a_doc]));
    Ok(())
}

/// Registers a subscription for `t`'s connection as outline-sync's activation does: its
/// endpoint (secret `secret`, address `token`), then the requested registration on `team`.
async fn requested_subscription(
    f: &Fixture,
    t: &Tenant,
    team: &str,
    secret: &str,
    token: &str,
) -> Result<store::registration::Registration> {
    let (provider_instance_id, version, lifecycle): (Uuid, i64, i64) = sqlx::query_as(
        "UPDATE connection SET status = 'active' WHERE id = $1
         RETURNING provider_instance_id, version, lifecycle_generation",
    )
    .bind(t.conn.id())
    .fetch_one(&f.pool)
    .await?;
    let keyring = store::secrets::Keyring::parse(&testkit::secret_key())?;
    let db = sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(f.pool.clone());
    let endpoint = store::inbound::create_endpoint(
        &db,
        &keyring,
        store::inbound::NewEndpoint {
            workspace_id: t.ws,
            connection_id: t.conn.id(),
            kind: store::entity::ConnectionKind::Outline,
            registration: store::entity::inbound_endpoint::Registration::Registered,
            provider_ref: None,
            address_token: Some(token.to_owned()),
            tenant_keyed: false,
        },
        secret.as_bytes(),
    )
    .await?;
    let marker = endpoint.id.to_string();
    let mut tx = f.pool.begin().await?;
    let reg = store::registration::request(
        &mut tx,
        &store::registration::NewRegistration {
            connection_id: t.conn.id(),
            provider_instance_id,
            kind: outline_mirror::SUBSCRIPTION,
            target: team,
            marker: &marker,
            url: &format!("https://hooks.example.com/webhooks/outline/{token}"),
            generation: store::registration::generation(version, lifecycle),
            endpoint_id: Some(endpoint.id),
        },
    )
    .await?
    .expect("the first registration of the generation");
    tx.commit().await?;
    Ok(reg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_subscription_shows_its_state_and_never_its_secret_or_another_workspaces()
-> Result<()> {
    let f = Fixture::start().await?;
    let a = f.tenant("a").await?;
    let b = f.tenant("b").await?;
    let path = |t: &Tenant, ws: Uuid| {
        format!(
            "/workspaces/{ws}/connections/{}/outline/subscription",
            t.conn.id()
        )
    };

    // Nothing registered yet: a 404 that says so.
    let (s, body) = f.call(&path(&a, a.ws), Some(&a.token)).await?;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "no_subscription", "{body}");

    // A's subscription, adopted; B's, refused.
    let (secret, token) = ("s3cret-of-forgesync-0123456789abcdef", "route-token-a");
    let reg = requested_subscription(&f, &a, "team-a", secret, token).await?;
    store::registration::resolve_created(&f.pool, reg.id, "sub-a").await?;
    let refused = requested_subscription(&f, &b, "team-b", "other-secret", "route-token-b").await?;
    store::registration::fail(
        &f.pool,
        refused.id,
        "Outline refused the subscription: forbidden",
    )
    .await?;

    let body = f.ok(&path(&a, a.ws), &a.token).await?;
    assert_eq!(body["state"], "adopted", "{body}");
    assert_eq!(body["current"], true);
    assert_eq!(body["subscription_id"], "sub-a");
    assert_eq!(body["team_id"], "team-a");
    assert_eq!(body["registration_id"], reg.id.to_string());
    assert_eq!(body["endpoint_status"], "active");
    assert_eq!(body["url_hash"], reg.url_hash);
    let text = body.to_string();
    assert!(
        !text.contains(secret) && !text.contains(token),
        "neither the secret nor the address: {text}"
    );
    let body = f.ok(&path(&b, b.ws), &b.token).await?;
    assert_eq!(body["state"], "failed", "{body}");
    assert_eq!(
        body["reason"],
        "Outline refused the subscription: forbidden"
    );

    // B's token on A's connection, under A's workspace or its own, answers as nothing there.
    for ws in [a.ws, b.ws] {
        let (s, body) = f.call(&path(&a, ws), Some(&b.token)).await?;
        assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["error"], "not_found", "{body}");
        assert!(!body.to_string().contains("sub-a"));
    }
    let (s, _) = f.call(&path(&a, a.ws), None).await?;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    Ok(())
}
