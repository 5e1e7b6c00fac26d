//! GitLab: operator hooks with a plain token on the shared route; hooks we registered with a
//! route credential bound to connection, key, route and origin.

use anyhow::Result;
use bus::Stream;
use lifecycle_core::gitlab::route_credential::{RouteBinding, mint};
use reqwest::StatusCode;
use serde_json::json;
use store::entity::ConnectionKind;
use store::entity::inbound_endpoint::Registration;

use crate::support::{Harness, assert_refused};

const ORIGIN: &str = "https://gitlab.example.com";

fn merge_request() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "object_kind": "merge_request", "event_type": "merge_request",
        "user": {"id": 1, "username": "root"},
        "project": {"id": 15, "name": "api", "path_with_namespace": "acme/platform/api",
            "web_url": "https://gitlab.example.com/acme/platform/api"},
        "object_attributes": {"id": 99, "iid": 3, "state": "opened", "action": "open",
            "updated_at": "2026-01-02 03:04:05 UTC"},
        "labels": [], "changes": {}
    }))
    .unwrap()
}

fn hook_headers(token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("X-Gitlab-Event", "Merge Request Hook".to_owned()),
        ("X-Gitlab-Token", token.to_owned()),
        ("X-Gitlab-Event-UUID", "5b8f-uuid".to_owned()),
        ("Idempotency-Key", "idem-1".to_owned()),
        ("X-Gitlab-Instance", ORIGIN.to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_hooks_verify_the_token_and_route_by_path() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Gitlab, Some(ORIGIN)).await?;
    let ep = h
        .endpoint(
            &conn,
            Registration::Operator,
            None,
            None,
            "glpat-hook-token",
        )
        .await?;

    assert_refused(
        &h,
        h.post(
            "/webhooks/gitlab",
            &hook_headers("wrong-token"),
            merge_request(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    let mut none = hook_headers("x");
    none.retain(|(k, _)| *k != "X-Gitlab-Token");
    assert_refused(
        &h,
        h.post("/webhooks/gitlab", &none, merge_request()).await?,
        StatusCode::UNAUTHORIZED,
        "missing_signature",
    )
    .await?;

    let (s, text) = h
        .post(
            "/webhooks/gitlab",
            &hook_headers("glpat-hook-token"),
            merge_request(),
        )
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    let got = h.settled(Stream::WebhooksGitlab, 1).await?;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].subject, "gitlab.acme/platform.api.merge_request");
    // Idempotency-Key is the event id.
    assert_eq!(
        got[0].msg_id.as_deref(),
        Some(format!("{}:event:idem-1", ep.id).as_str())
    );

    // Group-level events ride the root group.
    let create = serde_json::to_vec(&json!({"event_name": "project_create", "name": "new",
        "path_with_namespace": "acme/platform/new", "project_id": 16}))?;
    let mut hs = hook_headers("glpat-hook-token");
    hs[0].1 = "System Hook".into();
    hs[3].1 = "idem-2".into();
    let (s, _) = h.post("/webhooks/gitlab", &hs, create).await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        h.stream(Stream::WebhooksGitlab, "gitlab.acme.?.project_create", 1)
            .await?
            .len(),
        1
    );
    h.ingress.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_hooks_accept_only_their_own_route_credential() -> Result<()> {
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Gitlab, Some(ORIGIN)).await?;
    let route = h
        .endpoint(
            &conn,
            Registration::Registered,
            Some("acme"),
            None,
            "unused",
        )
        .await?;
    let other = h
        .endpoint(
            &conn,
            Registration::Registered,
            Some("acme"),
            None,
            "unused",
        )
        .await?;
    let (c, r, o) = (
        conn.id.to_string(),
        route.id.to_string(),
        other.id.to_string(),
    );
    let path = |route: &str| format!("/webhooks/gitlab/connections/{c}/k1/{route}");
    let cred = |key: &[u8], route: &str, origin: &str| {
        mint(
            key,
            &RouteBinding {
                connection_id: &c,
                key_id: "k1",
                route_id: route,
                origin,
            },
        )
    };
    let good = cred(testkit::ROUTING_KEY, &r, ORIGIN);

    // Forged: signed with another key.
    assert_refused(
        &h,
        h.post(
            &path(&r),
            &hook_headers(&cred(&[7u8; 32], &r, ORIGIN)),
            merge_request(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    // Re-targeted: a valid credential of one route presented on another.
    assert_refused(
        &h,
        h.post(&path(&o), &hook_headers(&good), merge_request())
            .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    // Signed for another GitLab origin than the connection's.
    assert_refused(
        &h,
        h.post(
            &path(&r),
            &hook_headers(&cred(testkit::ROUTING_KEY, &r, "https://evil.example.com")),
            merge_request(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    // An instance header that contradicts the signed origin.
    let mut lying = hook_headers(&good);
    lying[4].1 = "https://other.example.com".into();
    assert_refused(
        &h,
        h.post(&path(&r), &lying, merge_request()).await?,
        StatusCode::UNAUTHORIZED,
        "origin_mismatch",
    )
    .await?;
    // A key id nobody configured.
    assert_refused(
        &h,
        h.post(
            &format!("/webhooks/gitlab/connections/{c}/k9/{r}"),
            &hook_headers(&good),
            merge_request(),
        )
        .await?,
        StatusCode::UNAUTHORIZED,
        "bad_signature",
    )
    .await?;
    // The route under another connection's path does not exist.
    let stranger = h.connection(ConnectionKind::Gitlab, Some(ORIGIN)).await?;
    assert_refused(
        &h,
        h.post(
            &format!("/webhooks/gitlab/connections/{}/k1/{r}", stranger.id),
            &hook_headers(&good),
            merge_request(),
        )
        .await?,
        StatusCode::NOT_FOUND,
        "unknown_endpoint",
    )
    .await?;
    // A payload from outside the registered group.
    let outside = serde_json::to_vec(
        &json!({"object_kind": "push", "project": {"path_with_namespace": "intruder/api"}}),
    )?;
    assert_refused(
        &h,
        h.post(&path(&r), &hook_headers(&good), outside).await?,
        StatusCode::BAD_REQUEST,
        "malformed",
    )
    .await?;

    let (s, text) = h
        .post(&path(&r), &hook_headers(&good), merge_request())
        .await?;
    assert_eq!(s, StatusCode::OK, "{text}");
    let got = h.settled(Stream::WebhooksGitlab, 1).await?;
    assert_eq!(got.len(), 1);
    // Routed by connection only, whatever the payload's paths say.
    assert_eq!(
        got[0].subject,
        format!("gitlab.?connection.{c}.merge_request")
    );
    h.ingress.stop().await
}

/// A group hook fires for the members of the group's subgroups too, and GitLab names such a
/// group by its own path segment (`team-a` for `acme/team-a`): a hook registered for `acme`
/// takes it, to be admitted by group id downstream. A group stated outside `acme` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_group_hooks_take_subgroup_member_events_and_refuse_groups_outside() -> Result<()>
{
    let h = Harness::start().await?;
    let conn = h.connection(ConnectionKind::Gitlab, Some(ORIGIN)).await?;
    let route = h
        .endpoint(
            &conn,
            Registration::Registered,
            Some("acme"),
            None,
            "unused",
        )
        .await?;
    let (c, r) = (conn.id.to_string(), route.id.to_string());
    let path = format!("/webhooks/gitlab/connections/{c}/k1/{r}");
    let credential = mint(
        testkit::ROUTING_KEY,
        &RouteBinding {
            connection_id: &c,
            key_id: "k1",
            route_id: &r,
            origin: ORIGIN,
        },
    );
    let headers = |event: &str, id: &str| {
        let mut headers = hook_headers(&credential);
        headers[0].1 = event.to_owned();
        headers[2].1 = format!("{id}-uuid");
        headers[3].1 = format!("idem-{id}");
        headers
    };
    let member = |group_id: u64, group_path: &str| {
        serde_json::to_vec(&json!({
            "event_name": "user_add_to_group", "group_id": group_id,
            "group_name": group_path, "group_path": group_path,
            "user_id": 7, "user_username": "carol", "group_access": "Developer"
        }))
    };

    // A subgroup's stated full path outside the registered group.
    let outside = serde_json::to_vec(&json!({
        "event_name": "subgroup_create", "group_id": 40, "full_path": "globex/team",
        "path": "team", "parent_full_path": "globex"
    }))?;
    assert_refused(
        &h,
        h.post(&path, &headers("Subgroup Hook", "outside"), outside)
            .await?,
        StatusCode::BAD_REQUEST,
        "malformed",
    )
    .await?;

    // The root group's member, then a member of `acme/team-a`.
    for (i, body) in [member(1, "acme")?, member(2, "team-a")?]
        .into_iter()
        .enumerate()
    {
        let (s, text) = h
            .post(&path, &headers("Member Hook", &format!("member-{i}")), body)
            .await?;
        assert_eq!(s, StatusCode::OK, "{text}");
    }
    let got = h.settled(Stream::WebhooksGitlab, 2).await?;
    assert_eq!(got.len(), 2);
    for message in &got {
        assert_eq!(
            message.subject,
            format!("gitlab.?connection.{c}.user_add_to_group")
        );
    }
    h.ingress.stop().await
}
