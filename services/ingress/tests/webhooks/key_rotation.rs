//! Rotating `FORGESYNC_SECRET_KEY` under live traffic: the ring gains a key, every ingress is
//! rolled onto it, secrets are re-sealed, the old key is dropped, and no delivery fails.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, ensure};
use base64::Engine as _;
use reqwest::StatusCode;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;
use store::inbound::NewEndpoint;
use store::secrets::Keyring;
use testkit::Running;

use crate::support::{Harness, count, github_push, sign};

/// An endpoint the traffic goes to: its GitHub hook id and its secret.
#[derive(Clone)]
struct Target {
    hook: String,
    secret: String,
}

/// Deliveries sent round-robin to the endpoints, always to the ingress currently in front.
struct Traffic {
    url: Mutex<String>,
    targets: Mutex<Vec<Target>>,
    stop: AtomicBool,
    sent: AtomicU64,
    failures: Mutex<Vec<String>>,
}

impl Traffic {
    fn url(&self) -> String {
        self.url.lock().unwrap().clone()
    }

    async fn run(self: Arc<Self>, http: reqwest::Client, lane: u64) {
        let mut n = lane;
        while !self.stop.load(Ordering::Relaxed) {
            let target = {
                let targets = self.targets.lock().unwrap();
                targets[(n / 2) as usize % targets.len()].clone()
            };
            let body = github_push(n);
            let sig = format!("sha256={}", sign(&target.secret, &[&body]));
            let res = http
                .post(format!("{}/webhooks/github", self.url()))
                .header("Content-Type", "application/json")
                .header("X-GitHub-Event", "push")
                .header("X-GitHub-Delivery", format!("rot-{n}"))
                .header("X-GitHub-Hook-ID", &target.hook)
                .header("X-Hub-Signature-256", sig)
                .body(body)
                .send()
                .await;
            self.sent.fetch_add(1, Ordering::Relaxed);
            match res {
                Ok(r) if r.status() == StatusCode::OK => {}
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    self.failures
                        .lock()
                        .unwrap()
                        .push(format!("{} -> {status}: {text}", target.hook));
                }
                Err(e) => self
                    .failures
                    .lock()
                    .unwrap()
                    .push(format!("{} -> {e}", target.hook)),
            }
            n += 2;
        }
    }

    /// Waits until `more` further deliveries were sent.
    async fn flow(&self, more: u64) {
        let until = self.sent.load(Ordering::Relaxed) + more;
        while self.sent.load(Ordering::Relaxed) < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn b64(key: &[u8; 32]) -> String {
    base64::engine::general_purpose::STANDARD.encode(key)
}

async fn ingress_with_ring(h: &Harness, ring: &str) -> Result<Running> {
    let mut config = testkit::ingress_config(h.env.common_args());
    config.secret_key = ring.to_owned();
    testkit::spawn(config).await
}

/// Puts `next` in front (the load balancer's switch), lets requests already on `previous` end,
/// then stops it: how an operator rolls a replica.
async fn roll(traffic: &Traffic, previous: Running, next: &Running) -> Result<()> {
    *traffic.url.lock().unwrap() = next.url();
    tokio::time::sleep(Duration::from_millis(300)).await;
    previous.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_secret_key_under_traffic_fails_no_delivery() -> Result<()> {
    // The deployment starts on one bare key, as before key rings: its secrets carry id `k1`.
    // (The harness's own ingress takes no traffic here.)
    let h = Harness::start().await?;
    let old = testkit::secret_key();
    let new = b64(b"a-brand-new-32-byte-secret-key!!");
    let both = Keyring::parse(&format!("k1:{old},k2:{new}"))?;
    let only_new = format!("k2:{new}");

    let mut targets = Vec::new();
    let mut conns = Vec::new();
    for i in 0..4 {
        let conn = h.connection(ConnectionKind::Github, None).await?;
        let (hook, secret) = (format!("7{i}"), format!("secret-{i}"));
        h.endpoint(&conn, Registration::Operator, Some(&hook), None, &secret)
            .await?;
        store::secrets::put(h.db(), &h.key, conn.id, "token", b"ghp_token").await?;
        targets.push(Target { hook, secret });
        conns.push(conn);
    }
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM connection_secret WHERE key_id = 'k1'"
        )
        .await?,
        8
    );

    let first = ingress_with_ring(&h, &old).await?;
    let traffic = Arc::new(Traffic {
        url: Mutex::new(first.url()),
        targets: Mutex::new(targets),
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        failures: Mutex::new(Vec::new()),
    });
    let lanes: Vec<_> = (0..2)
        .map(|lane| tokio::spawn(traffic.clone().run(h.http.clone(), lane)))
        .collect();
    traffic.flow(20).await;

    // 1. Every ingress rolls onto the ring with both keys; the old key still opens.
    let second = ingress_with_ring(&h, &format!("k1:{old},k2:{new}")).await?;
    roll(&traffic, first, &second).await?;
    traffic.flow(20).await;

    // 2. control-api, on the new ring, seals new secrets under k2: ingress opens both kinds.
    let conn = &conns[0];
    store::inbound::create_endpoint(
        h.db(),
        &both,
        NewEndpoint {
            workspace_id: conn.workspace_id,
            connection_id: conn.id,
            kind: ConnectionKind::Github,
            registration: Registration::Operator,
            provider_ref: Some("80".into()),
            address_token: None,
            tenant_keyed: false,
        },
        b"secret-new",
    )
    .await?;
    traffic.targets.lock().unwrap().push(Target {
        hook: "80".into(),
        secret: "secret-new".into(),
    });
    traffic.flow(30).await;

    // 3. Re-seal while deliveries flow; a second run finds nothing left.
    let report = store::secrets::reseal(h.db(), &both, 3).await?;
    ensure!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!((report.resealed, report.remaining), (8, 0), "{report:?}");
    let again = store::secrets::reseal(h.db(), &both, 3).await?;
    assert_eq!((again.resealed, again.remaining), (0, 0), "{again:?}");
    assert_eq!(
        count(
            h.db(),
            "SELECT count(*) FROM connection_secret WHERE key_id <> 'k2'"
        )
        .await?,
        0
    );
    traffic.flow(20).await;

    // 4. The old key leaves the ring: an ingress with only k2 verifies every endpoint.
    let third = ingress_with_ring(&h, &only_new).await?;
    roll(&traffic, second, &third).await?;
    let before = traffic.sent.load(Ordering::Relaxed);
    traffic.flow(40).await;
    traffic.stop.store(true, Ordering::Relaxed);
    for lane in lanes {
        lane.await?;
    }
    let through_third = traffic.sent.load(Ordering::Relaxed) - before;

    let failures = traffic.failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {} deliveries failed: {failures:?}",
        failures.len(),
        traffic.sent.load(Ordering::Relaxed)
    );
    assert!(through_third >= 40);
    // Every 200 was a stored delivery.
    assert_eq!(
        count(h.db(), "SELECT count(*) FROM inbound_message").await?,
        i64::try_from(traffic.sent.load(Ordering::Relaxed))?
    );
    // Services holding only the new key open every secret, connection tokens included.
    let ring = Keyring::parse(&only_new)?;
    for conn in &conns {
        assert_eq!(
            store::secrets::get(h.db(), &ring, conn.id, "token").await?,
            Some(b"ghp_token".to_vec())
        );
    }
    third.stop().await
}
