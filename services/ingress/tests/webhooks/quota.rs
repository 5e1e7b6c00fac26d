//! Deliveries a second per workspace. Workspace B signs deliveries itself (its endpoint's
//! secret is one it chose) and floods them: past its burst each is answered 429 with
//! Retry-After and nothing is stored. Workspace C, also tenant-keyed, has a bucket of its own,
//! and A's deliveries, signed by a secret no tenant knows, are never counted.

use anyhow::Result;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, count, github_push, sign};

const SECRET: &str = "a-secret-of-the-tenants-choosing";

fn headers(hook: &str, delivery: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", "push".to_owned()),
        ("X-GitHub-Delivery", delivery.to_owned()),
        ("X-GitHub-Hook-ID", hook.to_owned()),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", sign(SECRET, &[body])),
        ),
    ]
}

async fn stored(h: &Harness, connection: uuid::Uuid) -> Result<i64> {
    count(
        h.db(),
        &format!("SELECT count(*) FROM inbound_message WHERE connection_id = '{connection}'"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_flooding_what_it_signs_itself_is_held_to_its_quota_and_no_one_else_is()
-> Result<()> {
    // A sustained rate low enough that no token comes back while the test sends.
    let h = Harness::start_with(|c| {
        c.workspace_deliveries_per_sec = 1;
        c.workspace_delivery_burst = 5;
    })
    .await?;
    let mut hooks = Vec::new();
    for (hook, tenant_keyed) in [("1111", false), ("2222", true), ("3333", true)] {
        let conn = h.connection(ConnectionKind::Github, None).await?;
        h.endpoint(&conn, Registration::Operator, Some(hook), None, SECRET)
            .await?;
        if tenant_keyed {
            h.db()
                .execute_unprepared(&format!(
                    "UPDATE inbound_endpoint SET tenant_keyed = true WHERE connection_id = '{}'",
                    conn.id
                ))
                .await?;
        }
        hooks.push((hook, conn.id));
    }
    let [(a_hook, a), (b_hook, b), (c_hook, c)] = hooks[..] else {
        unreachable!()
    };
    let send = |hook: &'static str, n: u64| {
        let body = github_push(n);
        let req = h
            .http
            .post(format!("{}/webhooks/github", h.ingress.url()))
            .header("Content-Type", "application/json")
            .body(body.clone());
        headers(hook, &format!("{hook}-{n}"), &body)
            .into_iter()
            .fold(req, |r, (k, v)| r.header(k, v))
            .send()
    };
    let mut answers = Vec::new();
    for n in 0..8 {
        let res = send(b_hook, n).await?;
        answers.push((
            res.status(),
            res.headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ));
    }
    assert!(
        answers[..5].iter().all(|(s, _)| *s == StatusCode::OK),
        "{answers:?}"
    );
    assert!(
        answers[5..]
            .iter()
            .all(|(s, retry)| *s == StatusCode::TOO_MANY_REQUESTS && retry.as_deref() == Some("1")),
        "{answers:?}"
    );
    assert_eq!(stored(&h, b).await?, 5, "a refused delivery was stored");

    // C's quota is its own, and A's deliveries are the vendor's: neither waits for B.
    assert_eq!(send(c_hook, 100).await?.status(), StatusCode::OK);
    for n in 200..210 {
        assert_eq!(send(a_hook, n).await?.status(), StatusCode::OK);
    }
    assert_eq!((stored(&h, a).await?, stored(&h, c).await?), (10, 1));
    let metrics = h.metrics().await?;
    assert!(
        metrics.contains(r#"ingress_rejections_total{vendor="github",reason="over_quota"} 3"#),
        "{metrics}"
    );
    h.ingress.stop().await
}

/// Bytes a day per workspace, of what it signs itself: B stores three deliveries' worth and the
/// fourth is answered 429 until midnight UTC, nothing of it stored; the vendor's deliveries to A
/// and C's own are not counted against B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_bytes_for_the_day_stores_nothing_more_and_no_one_else_is_held()
-> Result<()> {
    let size = github_push(10).len() as u64;
    let h = Harness::start_with(|c| {
        c.workspace_deliveries_per_sec = 0;
        c.workspace_bytes_per_day = 3 * size + size / 2;
    })
    .await?;
    let mut hooks = Vec::new();
    for (hook, tenant_keyed) in [("1111", false), ("2222", true), ("3333", true)] {
        let conn = h.connection(ConnectionKind::Github, None).await?;
        h.endpoint(&conn, Registration::Operator, Some(hook), None, SECRET)
            .await?;
        if tenant_keyed {
            h.db()
                .execute_unprepared(&format!(
                    "UPDATE inbound_endpoint SET tenant_keyed = true WHERE connection_id = '{}'",
                    conn.id
                ))
                .await?;
        }
        hooks.push((hook, conn));
    }
    let send = |hook: &'static str, n: u64| {
        let body = github_push(n);
        let req = h
            .http
            .post(format!("{}/webhooks/github", h.ingress.url()))
            .header("Content-Type", "application/json")
            .body(body.clone());
        headers(hook, &format!("{hook}-{n}"), &body)
            .into_iter()
            .fold(req, |r, (k, v)| r.header(k, v))
            .send()
    };
    let (a, b, c) = (&hooks[0].1, &hooks[1].1, &hooks[2].1);
    for n in 10..13 {
        assert_eq!(send("2222", n).await?.status(), StatusCode::OK);
    }
    let refused = send("2222", 13).await?;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .expect("a Retry-After");
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert_eq!(stored(&h, b.id).await?, 3, "a refused delivery was stored");
    let used = count(
        h.db(),
        &format!(
            "SELECT stored_bytes FROM workspace_usage WHERE workspace_id = '{}'",
            b.workspace_id
        ),
    )
    .await?;
    assert!(used as u64 <= 3 * size + size / 2, "{used}");

    for n in 20..25 {
        assert_eq!(send("1111", n).await?.status(), StatusCode::OK);
    }
    assert_eq!(send("3333", 30).await?.status(), StatusCode::OK);
    assert_eq!((stored(&h, a.id).await?, stored(&h, c.id).await?), (5, 1));
    assert_eq!(
        count(
            h.db(),
            &format!(
                "SELECT count(*) FROM workspace_usage WHERE workspace_id = '{}'",
                a.workspace_id
            ),
        )
        .await?,
        0,
        "the vendor's deliveries were counted"
    );
    h.ingress.stop().await
}
