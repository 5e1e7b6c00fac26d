//! Fixtures: a workspace, a connection and an endpoint written straight to the store, a running
//! ingress, and counts of what a delivery leaves behind.

use std::time::Duration;

use anyhow::Result;
use reqwest::StatusCode;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ConnectionTrait, DatabaseConnection, DbBackend, Statement,
};
use store::entity::inbound_endpoint::{self, Registration};
use store::entity::{ConnectionKind, ConnectionStatus, connection, provider_instance, workspace};
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use testkit::{Running, TestEnv};
use uuid::Uuid;

pub struct Harness {
    pub env: TestEnv,
    pub ingress: Running,
    pub http: reqwest::Client,
    pub key: Keyring,
}

impl Harness {
    pub async fn start() -> Result<Harness> {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut ingress::Config)) -> Result<Harness> {
        let env = TestEnv::new().await?;
        let mut config = testkit::ingress_config(env.common_args());
        tweak(&mut config);
        let ingress = testkit::spawn(config).await?;
        Ok(Harness {
            env,
            ingress,
            http: reqwest::Client::new(),
            key: Keyring::parse(&testkit::secret_key())?,
        })
    }

    pub fn db(&self) -> &DatabaseConnection {
        &self.env.db.db
    }

    /// An active connection of a new workspace.
    pub async fn connection(
        &self,
        kind: ConnectionKind,
        server_url: Option<&str>,
    ) -> Result<connection::Model> {
        let db = self.db();
        let ws = workspace::ActiveModel {
            id: Set(Uuid::now_v7()),
            name: Set("acme".into()),
            ..Default::default()
        }
        .insert(db)
        .await?;
        let instance = provider_instance::ensure(db, kind, server_url).await?;
        Ok(connection::ActiveModel {
            id: Set(Uuid::now_v7()),
            workspace_id: Set(ws.id),
            kind: Set(kind),
            status: Set(ConnectionStatus::Active),
            version: Set(1),
            lifecycle_generation: Set(1),
            provider_instance_id: Set(instance.id),
            settings: Set(serde_json::json!({})),
            ..Default::default()
        }
        .insert(db)
        .await?)
    }

    /// An endpoint of `conn` holding `secret`.
    pub async fn endpoint(
        &self,
        conn: &connection::Model,
        registration: Registration,
        provider_ref: Option<&str>,
        address_token: Option<&str>,
        secret: &str,
    ) -> Result<inbound_endpoint::Model> {
        Ok(store::inbound::create_endpoint(
            self.db(),
            &self.key,
            NewEndpoint {
                workspace_id: conn.workspace_id,
                connection_id: conn.id,
                kind: conn.kind,
                registration,
                provider_ref: provider_ref.map(str::to_owned),
                address_token: address_token.map(str::to_owned),
                tenant_keyed: false,
            },
            secret.as_bytes(),
        )
        .await?)
    }

    /// POSTs `body` with `headers`; returns status and body text.
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<(StatusCode, String)> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.ingress.url()))
            .header("Content-Type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let res = req.send().await?;
        let status = res.status();
        Ok((status, res.text().await?))
    }

    /// POSTs headers declaring a body of `declared` bytes and none of its bytes: what a body
    /// past the limit gets, refused by its declared length before any of it is read (see
    /// `testkit::http::post_declaring`).
    pub async fn post_oversize(
        &self,
        path: &str,
        headers: &[(&str, String)],
        declared: usize,
    ) -> Result<(StatusCode, String)> {
        let mut all = vec![("Content-Type", "application/json".to_owned())];
        all.extend(headers.iter().cloned());
        testkit::http::post_declaring(
            &format!("{}{path}", self.ingress.url()),
            &all,
            declared,
            b"",
        )
        .await
    }

    /// Rows every accepted delivery writes: messages, bodies, dedup keys, and dispatch records
    /// (still in the outbox, or deleted once published: their message is then dispatched).
    pub async fn footprint(&self) -> Result<[i64; 4]> {
        Ok([
            count(self.db(), "SELECT count(*) FROM inbound_message").await?,
            count(self.db(), "SELECT count(*) FROM inbound_message_body").await?,
            count(self.db(), "SELECT count(*) FROM dedup_key").await?,
            count(
                self.db(),
                "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM inbound_message_state \
                 WHERE processing_state = 'dispatched')",
            )
            .await?,
        ])
    }

    /// Messages on `filter` in `stream` once at least `min` are there (or 3 s passed).
    pub async fn stream(
        &self,
        stream: bus::Stream,
        filter: &str,
        min: usize,
    ) -> Result<Vec<testkit::StoredMessage>> {
        testkit::read_stream(&self.env.bus, stream, filter, min, Duration::from_secs(3)).await
    }

    /// Everything in `stream`, after letting in-flight publishes land.
    pub async fn settled(
        &self,
        stream: bus::Stream,
        min: usize,
    ) -> Result<Vec<testkit::StoredMessage>> {
        let first = self.stream(stream, ">", min).await?;
        tokio::time::sleep(Duration::from_millis(700)).await;
        let again = self.stream(stream, ">", first.len()).await?;
        Ok(again)
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Result<String> {
        Ok(self
            .http
            .get(format!("{}/metrics", self.ingress.url()))
            .send()
            .await?
            .text()
            .await?)
    }
}

pub async fn count(db: &DatabaseConnection, sql: &str) -> Result<i64> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql.to_owned()))
        .await?
        .expect("a count row");
    Ok(row.try_get_by_index(0)?)
}

pub fn sign(secret: &str, parts: &[&[u8]]) -> String {
    ingress::verify::sign_hex(secret.as_bytes(), parts)
}

/// A GitHub `push` body of `acme/api` as GitHub sends it (the simulator's builder, checked
/// against GitHub's published schema in vendor-sim). The same `n` gives the same bytes, another
/// `n` another pushed commit and so another body.
pub fn github_push(n: u64) -> Vec<u8> {
    use vendor_sim::github::Model;
    use vendor_sim::github::webhook::{Push, push_payload};
    let mut m = Model::new();
    let repo = m.add_repository(None, "acme", "api");
    let at = m.tick();
    let push = Push {
        branch: "main".into(),
        before: format!("{:040x}", n.wrapping_mul(0x9e37_79b9)),
        after: format!("{:040x}", (n + 1).wrapping_mul(0x9e37_79b9)),
        pusher: "octocat".into(),
        message: format!("Change {n}"),
        at,
    };
    let payload = push_payload(&m, m.repository(repo).expect("just added"), &push);
    serde_json::to_vec(&payload).expect("a JSON body")
}

pub fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Asserts a refused request answered `status` and stored nothing.
pub async fn assert_refused(
    h: &Harness,
    got: (StatusCode, String),
    status: StatusCode,
    reason: &str,
) -> Result<()> {
    assert_eq!(got.0, status, "{}", got.1);
    let body: serde_json::Value = serde_json::from_str(&got.1)?;
    assert_eq!(body["error"], reason, "{}", got.1);
    assert_eq!(
        h.footprint().await?,
        [0, 0, 0, 0],
        "a refused delivery stored something"
    );
    Ok(())
}
