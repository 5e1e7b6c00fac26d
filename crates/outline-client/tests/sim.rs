//! The generated client against the simulated Outline (`vendor_sim::outline`) over real HTTP.
//! The client is generated from `schemas/outline.json` and the simulator is checked against it
//! (vendor-sim's `outline_schema` test); these tests prove the two agree on what is sent, how
//! pages end, what a deletion looks like, and which failures are retried or surfaced.

use std::future::Future;
use std::time::{Duration, Instant};

use lifecycle_core::vendor_error::VendorErrorClass;
use outline_client::{
    CallBudget, Direction, DocumentSort, OutlineClient, OutlineError, Page, RetryPolicy, Settings,
};
use serde_json::{Value, json};
use uuid::Uuid;
use vendor_http::egress::Egress;
use vendor_sim::outline::{
    Fault, Model, NewDocument, OutlineFault, OutlineSim, RateLimit, methods,
};

const TOKEN: &str = "ol_api_sim-token";

/// The page size the listings are read with: small, so every listing spans several pages.
const LIMIT: u32 = 2;

/// A simulated team: three collections; five live documents in the first (created in order,
/// then three of them edited, so `updatedAt` orders them differently), one in the second, and
/// one soft-deleted in the first.
struct Team {
    sim: OutlineSim,
    /// Collection ids, in the order they were created.
    collections: Vec<Uuid>,
    /// The first collection's live documents, in the order they were created.
    created: Vec<Uuid>,
    /// The same, in the order they were last changed.
    updated: Vec<Uuid>,
    /// The second collection's document.
    elsewhere: Uuid,
    /// Soft-deleted: `deletedAt` set, still found by `documents.info`.
    deleted: Uuid,
}

fn id(text: &str) -> Uuid {
    text.parse().expect("the simulator's ids are uuids")
}

impl Team {
    async fn start() -> Team {
        let mut model = Model::new("acme");
        model.add_token(TOKEN);
        let names = ["Engineering", "Handbook", "Archive"];
        let collections: Vec<String> = names.iter().map(|n| model.add_collection(n)).collect();
        let created: Vec<String> = (0..5)
            .map(|n| {
                let new = NewDocument::new(&collections[0], &format!("Doc {n}")).text("body");
                model.add_document(new).unwrap()
            })
            .collect();
        let elsewhere = model
            .add_document(NewDocument::new(&collections[1], "Onboarding"))
            .unwrap();
        let deleted = model
            .add_document(NewDocument::new(&collections[0], "Gone"))
            .unwrap();
        model.delete_document(&deleted).unwrap();
        for n in [1, 3, 0] {
            model
                .update_document(&created[n], None, Some("edited"))
                .unwrap();
        }
        let updated = [2, 4, 1, 3, 0].map(|n| id(&created[n])).to_vec();
        Team {
            sim: OutlineSim::start(model).await.unwrap(),
            collections: collections.iter().map(|c| id(c)).collect(),
            created: created.iter().map(|d| id(d)).collect(),
            updated,
            elsewhere: id(&elsewhere),
            deleted: id(&deleted),
        }
    }

    /// A client of the simulator with `token` and `retry`.
    fn client_with(&self, token: &str, retry: RetryPolicy) -> OutlineClient {
        install_crypto();
        let settings = Settings {
            base_url: self.sim.base_url().to_owned(),
            retry,
            request_timeout: Duration::from_secs(5),
            // The simulator listens on 127.0.0.1.
            egress: Egress::unrestricted(),
            ..Settings::default()
        };
        OutlineClient::new(&settings, token).unwrap()
    }

    fn client(&self, retry: RetryPolicy) -> OutlineClient {
        self.client_with(TOKEN, retry)
    }

    /// The bodies of the calls of `method` the simulator received.
    fn bodies(&self, method: &str) -> Vec<Value> {
        self.sim
            .calls_of(method)
            .into_iter()
            .map(|c| c.body)
            .collect()
    }
}

/// The process's rustls provider, as a binary installs it first thing.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Quick retries, so tests spend their time only where `Retry-After` says.
fn retries(max_retries: usize) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(20),
        ..RetryPolicy::default()
    }
}

/// Reads a listing page by page, `LIMIT` at a time and moving on by `LIMIT` as Outline's
/// `nextPath` does, until Outline answers an empty page; the items in order and the size of
/// every page read.
async fn read_to_the_empty_page<T, F, Fut>(mut next: F) -> (Vec<T>, Vec<usize>)
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<Page<T>, OutlineError>>,
{
    let mut items = Vec::new();
    let mut sizes = Vec::new();
    let mut offset = 0;
    loop {
        let page = next(offset).await.unwrap();
        assert_eq!((page.offset, page.limit), (offset, LIMIT));
        sizes.push(page.items.len());
        if page.items.is_empty() {
            return (items, sizes);
        }
        assert!(sizes.len() < 20, "the listing never ends");
        items.extend(page.items);
        offset += u64::from(LIMIT);
    }
}

mod the_client_reads_what_the_simulator_serves {
    use super::*;

    #[tokio::test]
    async fn auth_info_names_the_simulated_user_and_team() {
        let team = Team::start().await;
        let auth = team.client(retries(0)).auth_info().await.unwrap();
        let (user, want) = (auth.user.unwrap(), team.sim.model(|m| m.user.clone()));
        assert_eq!(user.id, Some(id(&want.id)));
        assert_eq!(user.name.as_deref(), Some(want.name.as_str()));
        let (got, want) = (auth.team.unwrap(), team.sim.model(|m| m.team.clone()));
        assert_eq!(got.id, Some(id(&want.id)));
        assert_eq!(got.name.as_deref(), Some("acme"));
        let calls = team.sim.calls_of(methods::AUTH_INFO);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].token.as_deref(), Some(TOKEN));
    }

    #[tokio::test]
    async fn collections_are_paged_to_the_empty_page_and_each_read_by_id() {
        let team = Team::start().await;
        let client = &team.client(retries(0));
        let (listed, sizes) =
            read_to_the_empty_page(|offset| client.collections_list(offset, LIMIT)).await;
        // Outline's default order: the sidebar's, here the order of creation.
        let ids: Vec<_> = listed.iter().map(|c| c.id.unwrap()).collect();
        assert_eq!(ids, team.collections);
        assert_eq!(sizes, [2, 1, 0]);
        assert_eq!(
            team.bodies(methods::COLLECTIONS_LIST),
            [0, 2, 4].map(|offset| json!({ "offset": offset, "limit": LIMIT }))
        );
        for collection in &listed {
            let one = client
                .collections_info(collection.id.unwrap())
                .await
                .unwrap();
            assert_eq!(one.name, collection.name);
            assert_eq!(one.url_id, collection.url_id);
            assert!(one.deleted_at.is_none());
        }
    }

    #[tokio::test]
    async fn documents_are_paged_to_the_empty_page_in_each_order_the_client_offers() {
        let team = Team::start().await;
        let client = &team.client(retries(0));
        let collection = team.collections[0];
        let reversed = |ids: &[Uuid]| ids.iter().rev().copied().collect::<Vec<_>>();
        let orders = [
            (
                DocumentSort::CreatedAt,
                Direction::Asc,
                team.created.clone(),
            ),
            (
                DocumentSort::CreatedAt,
                Direction::Desc,
                reversed(&team.created),
            ),
            (
                DocumentSort::UpdatedAt,
                Direction::Asc,
                team.updated.clone(),
            ),
            (
                DocumentSort::UpdatedAt,
                Direction::Desc,
                reversed(&team.updated),
            ),
        ];
        for (sort, direction, want) in orders {
            let (listed, sizes) = read_to_the_empty_page(|offset| {
                client.documents_list(Some(collection), offset, LIMIT, sort, direction)
            })
            .await;
            let ids: Vec<_> = listed.iter().map(|d| d.id.unwrap()).collect();
            assert_eq!(ids, want, "{sort:?} {direction:?}");
            assert_eq!(sizes, [2, 2, 1, 0], "{sort:?} {direction:?}");
            assert!(listed.iter().all(|d| d.deleted_at.is_none()));
            assert!(listed.iter().all(|d| d.collection_id == Some(collection)));
            // The order asked for is the order answered: the timestamps agree.
            let stamps: Vec<_> = listed
                .iter()
                .map(|d| match sort {
                    DocumentSort::CreatedAt => d.created_at.unwrap(),
                    DocumentSort::UpdatedAt => d.updated_at.unwrap(),
                })
                .collect();
            let mut sorted = stamps.clone();
            sorted.sort();
            if direction == Direction::Desc {
                sorted.reverse();
            }
            assert_eq!(stamps, sorted, "{sort:?} {direction:?}");
        }
        let bodies = team.bodies(methods::DOCUMENTS_LIST);
        assert_eq!(bodies.len(), 16);
        assert_eq!(
            bodies[0],
            json!({
                "collectionId": collection,
                "offset": 0,
                "limit": LIMIT,
                "sort": "createdAt",
                "direction": "ASC",
            })
        );
        assert_eq!(bodies[15]["sort"], "updatedAt");
        assert_eq!(bodies[15]["direction"], "DESC");
        assert_eq!(bodies[15]["offset"], 6);
    }

    #[tokio::test]
    async fn documents_of_every_collection_are_listed_without_a_collection() {
        let team = Team::start().await;
        let client = &team.client(retries(0));
        let (listed, _) = read_to_the_empty_page(|offset| {
            client.documents_list(None, offset, LIMIT, DocumentSort::CreatedAt, Direction::Asc)
        })
        .await;
        let ids: Vec<_> = listed.iter().map(|d| d.id.unwrap()).collect();
        let mut want = team.created.clone();
        want.push(team.elsewhere);
        assert_eq!(ids, want, "the soft-deleted document is not listed");
        assert!(
            team.bodies(methods::DOCUMENTS_LIST)
                .iter()
                .all(|b| b.get("collectionId").is_none())
        );
    }

    #[tokio::test]
    async fn a_draft_of_the_token_s_user_is_listed_without_published_at() {
        let team = Team::start().await;
        let handbook = team.collections[1];
        let draft = team.sim.model(|m| {
            m.add_document(NewDocument::new(&handbook.to_string(), "Unfinished").draft())
                .unwrap()
        });
        let client = &team.client(retries(0));
        let (listed, _) = read_to_the_empty_page(|offset| {
            client.documents_list(
                Some(handbook),
                offset,
                LIMIT,
                DocumentSort::CreatedAt,
                Direction::Asc,
            )
        })
        .await;
        // Outline lists the published documents and the token user's drafts: a caller that
        // wants only published ones checks `publishedAt`.
        let listed: Vec<_> = listed
            .iter()
            .map(|d| (d.id.unwrap(), d.published_at.is_some()))
            .collect();
        assert_eq!(listed, [(team.elsewhere, true), (id(&draft), false)]);
    }

    #[tokio::test]
    async fn documents_of_a_deleted_or_unknown_collection_are_forbidden() {
        let team = Team::start().await;
        let client = team.client(retries(2));
        let archive = team.collections[2];
        team.sim
            .model(|m| m.delete_collection(&archive.to_string()))
            .unwrap();
        for collection in [archive, Uuid::new_v4()] {
            let err = client
                .documents_list(
                    Some(collection),
                    0,
                    LIMIT,
                    DocumentSort::CreatedAt,
                    Direction::Asc,
                )
                .await
                .unwrap_err();
            assert!(matches!(err, OutlineError::Forbidden { .. }), "{err}");
        }
        // Refused, not failed: never retried.
        assert_eq!(team.sim.calls(methods::DOCUMENTS_LIST), 2);
    }

    #[tokio::test]
    async fn a_live_document_is_read_with_its_text() {
        let team = Team::start().await;
        let doc = team
            .client(retries(0))
            .documents_info(team.created[2])
            .await
            .unwrap();
        assert_eq!(doc.id, Some(team.created[2]));
        assert_eq!(doc.title.as_deref(), Some("Doc 2"));
        assert_eq!(doc.text.as_deref(), Some("body"));
        assert_eq!(doc.collection_id, Some(team.collections[0]));
        assert!(doc.published_at.is_some());
        assert!(doc.deleted_at.is_none());
        assert_eq!(
            team.bodies(methods::DOCUMENTS_INFO),
            [json!({ "id": team.created[2].to_string() })]
        );
    }

    #[tokio::test]
    async fn a_soft_deleted_document_is_read_with_deleted_at() {
        let team = Team::start().await;
        let doc = team
            .client(retries(0))
            .documents_info(team.deleted)
            .await
            .unwrap();
        assert_eq!(doc.title.as_deref(), Some("Gone"));
        let deleted_at = doc.deleted_at.expect("a deleted document says when");
        let want = team.sim.model(|m| {
            vendor_sim::outline::date(
                m.document(&team.deleted.to_string())
                    .unwrap()
                    .deleted_at
                    .unwrap(),
            )
        });
        assert_eq!(
            deleted_at,
            want.parse::<chrono::DateTime<chrono::Utc>>().unwrap()
        );
    }

    #[tokio::test]
    async fn an_unknown_or_permanently_deleted_document_is_not_found() {
        let team = Team::start().await;
        let client = team.client(retries(2));
        let err = client.documents_info(Uuid::new_v4()).await.unwrap_err();
        assert!(err.is_not_found(), "{err}");
        assert_eq!(err.class(), VendorErrorClass::NotFound);
        team.sim.model(|m| {
            m.permanently_delete_document(&team.deleted.to_string())
                .unwrap();
        });
        let err = client.documents_info(team.deleted).await.unwrap_err();
        assert!(err.is_not_found(), "{err}");
        // A 404 is an answer, not a failure: never retried.
        assert_eq!(team.sim.calls(methods::DOCUMENTS_INFO), 2);
    }

    #[tokio::test]
    async fn a_webhook_subscription_is_created_listed_and_deleted() {
        let team = Team::start().await;
        let client = &team.client(retries(0));
        let events = ["documents".to_owned(), "collections".to_owned()];
        let created = client
            .webhook_subscriptions_create(
                "forgesync:abc",
                "https://hooks.example/outline",
                &events,
                Some("s3cret"),
            )
            .await
            .unwrap();
        let sub = created.id.unwrap();
        assert_eq!(created.name.as_deref(), Some("forgesync:abc"));
        assert_eq!(
            created.url.as_deref(),
            Some("https://hooks.example/outline")
        );
        assert_eq!(created.events, events);
        assert_eq!(created.enabled, Some(true));
        let stored = team
            .sim
            .model(|m| m.subscription(&sub.to_string()).cloned())
            .expect("the simulator holds the subscription");
        assert_eq!(stored.secret.as_deref(), Some("s3cret"));

        let (listed, sizes) =
            read_to_the_empty_page(|offset| client.webhook_subscriptions_list(offset, LIMIT)).await;
        assert_eq!(listed.iter().map(|s| s.id).collect::<Vec<_>>(), [Some(sub)]);
        assert_eq!(sizes, [1, 0]);

        client.webhook_subscriptions_delete(sub).await.unwrap();
        assert!(
            team.sim
                .model(|m| m.subscription(&sub.to_string()).is_none())
        );
        let (listed, _) =
            read_to_the_empty_page(|offset| client.webhook_subscriptions_list(offset, LIMIT)).await;
        assert!(listed.is_empty());
        let again = client.webhook_subscriptions_delete(sub).await.unwrap_err();
        assert!(again.is_not_found(), "{again}");
        assert_eq!(
            team.bodies(methods::WEBHOOK_SUBSCRIPTIONS_CREATE),
            [json!({
                "name": "forgesync:abc",
                "url": "https://hooks.example/outline",
                "events": ["documents", "collections"],
                "secret": "s3cret",
            })]
        );
        assert_eq!(
            team.bodies(methods::WEBHOOK_SUBSCRIPTIONS_DELETE)[0],
            json!({ "id": sub })
        );
    }
}

mod failures {
    use super::*;

    #[tokio::test]
    async fn a_429_is_waited_out_by_its_retry_after_then_succeeds() {
        let team = Team::start().await;
        team.sim.inject(Fault::nth(
            methods::DOCUMENTS_LIST,
            1,
            OutlineFault::RateLimited { retry_after: 1 },
        ));
        let client = team.client(retries(2));
        let started = Instant::now();
        let page = client
            .documents_list(None, 0, LIMIT, DocumentSort::CreatedAt, Direction::Asc)
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "Retry-After waited out"
        );
        assert_eq!(page.items.len(), 2);
        assert_eq!(team.sim.calls(methods::DOCUMENTS_LIST), 2);
        assert_eq!(client.calls(), 2);
    }

    #[tokio::test]
    async fn the_rate_limiter_s_429_is_waited_out_until_its_window_ends() {
        let team = Team::start().await;
        team.sim.model(|m| {
            m.rate_limit = Some(RateLimit {
                limit: 2,
                window: Duration::from_secs(1),
            });
        });
        let client = team.client(retries(2));
        let started = Instant::now();
        for _ in 0..3 {
            client.auth_info().await.unwrap();
        }
        // The third call was refused with Retry-After until the window ended, then sent again.
        assert!(started.elapsed() >= Duration::from_millis(900));
        assert_eq!(team.sim.calls(methods::AUTH_INFO), 4);
    }

    #[tokio::test]
    async fn what_the_rate_limiter_says_is_left_is_reported_and_its_wait_surfaced() {
        let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this process");
        let team = Team::start().await;
        team.sim.model(|m| {
            m.rate_limit = Some(RateLimit {
                limit: 3,
                window: Duration::from_secs(60),
            });
        });
        let client = team.client(retries(0));
        client.report_quota_as("conn-sim");
        let labels = r#"{vendor="outline",resource="api",connection="conn-sim"}"#;
        let gauge = |name: &str, value: u32| format!("{name}{labels} {value}\n");
        client.auth_info().await.unwrap();
        client.auth_info().await.unwrap();
        let rendered = metrics.render();
        assert!(
            rendered.contains(&gauge("vendor_quota_remaining", 1)),
            "{rendered}"
        );
        assert!(
            rendered.contains(&gauge("vendor_quota_limit", 3)),
            "{rendered}"
        );
        client.auth_info().await.unwrap();
        let err = client.auth_info().await.unwrap_err();
        let OutlineError::RateLimited {
            retry_after: Some(wait),
            ..
        } = err
        else {
            panic!("past the limit is rate limited with a wait: {err}");
        };
        // Most of the minute's window is left; the fraction Outline sends is rounded up.
        assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert!(
            metrics
                .render()
                .contains(&gauge("vendor_quota_remaining", 0))
        );
    }

    #[tokio::test]
    async fn a_5xx_on_documents_list_is_retried_and_the_page_read() {
        let team = Team::start().await;
        // Outline's own 500, then a proxy's 502 without Outline's body.
        team.sim.inject(Fault::nth(
            methods::DOCUMENTS_LIST,
            1,
            OutlineFault::Status(500),
        ));
        team.sim.inject(Fault::nth(
            methods::DOCUMENTS_LIST,
            2,
            OutlineFault::Status(502),
        ));
        let client = team.client(retries(3));
        let page = client
            .documents_list(
                Some(team.collections[0]),
                0,
                LIMIT,
                DocumentSort::CreatedAt,
                Direction::Asc,
            )
            .await
            .unwrap();
        let ids: Vec<_> = page.items.iter().map(|d| d.id.unwrap()).collect();
        assert_eq!(ids, team.created[..2]);
        assert_eq!(team.sim.calls(methods::DOCUMENTS_LIST), 3);
    }

    #[tokio::test]
    async fn a_5xx_outlasting_the_retries_is_a_server_error() {
        let team = Team::start().await;
        team.sim.inject(Fault::always(
            methods::DOCUMENTS_LIST,
            OutlineFault::Status(503),
        ));
        let err = team
            .client(retries(2))
            .documents_list(None, 0, LIMIT, DocumentSort::UpdatedAt, Direction::Desc)
            .await
            .unwrap_err();
        assert!(
            matches!(err, OutlineError::Server { status: 503, .. }),
            "{err}"
        );
        assert_eq!(err.class(), VendorErrorClass::ServerError);
        assert_eq!(team.sim.calls(methods::DOCUMENTS_LIST), 3);
    }

    #[tokio::test]
    async fn a_page_whose_answer_breaks_off_is_read_again() {
        let team = Team::start().await;
        team.sim.inject(Fault::nth(
            methods::COLLECTIONS_LIST,
            1,
            OutlineFault::dropped(),
        ));
        let client = team.client(retries(2));
        let page = client.collections_list(0, LIMIT).await.unwrap();
        let ids: Vec<_> = page.items.iter().map(|c| c.id.unwrap()).collect();
        assert_eq!(ids, team.collections[..2]);
        assert_eq!(team.sim.calls(methods::COLLECTIONS_LIST), 2);
    }

    #[tokio::test]
    async fn a_subscription_create_is_retried_when_throttled_but_not_when_its_answer_is_lost() {
        let team = Team::start().await;
        let client = team.client(retries(3));
        let events = ["documents".to_owned()];
        let create = |name: &'static str| {
            client.webhook_subscriptions_create(name, "https://hooks.example/o", &events, None)
        };
        team.sim.inject(Fault::nth(
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            1,
            OutlineFault::RateLimited { retry_after: 0 },
        ));
        // Throttled: nothing was created, so it is sent again.
        create("forgesync:throttled").await.unwrap();
        assert_eq!(team.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_CREATE), 2);
        // Created, then the answer lost behind a proxy's 502: sending it again would make a
        // second subscription, so the caller gets the error and looks for it by name.
        team.sim.inject(Fault::nth(
            methods::WEBHOOK_SUBSCRIPTIONS_CREATE,
            1,
            OutlineFault::lost_with(502),
        ));
        let err = create("forgesync:lost").await.unwrap_err();
        assert!(
            matches!(err, OutlineError::Server { status: 502, .. }),
            "{err}"
        );
        assert_eq!(team.sim.calls(methods::WEBHOOK_SUBSCRIPTIONS_CREATE), 3);
        let mut names: Vec<_> = team
            .sim
            .model(|m| m.subscriptions().map(|s| s.name.clone()).collect());
        names.sort();
        assert_eq!(names, ["forgesync:lost", "forgesync:throttled"]);
    }

    #[tokio::test]
    async fn a_page_larger_than_outline_serves_is_a_validation_error_not_retried() {
        let team = Team::start().await;
        let err = team
            .client(retries(3))
            .collections_list(0, 101)
            .await
            .unwrap_err();
        let OutlineError::Status {
            status,
            error,
            message,
            ..
        } = &err
        else {
            panic!("a validation error is a status error: {err}");
        };
        // The contract declares no 400 for the method; Outline's error object is read anyway.
        assert_eq!((*status, error.as_str()), (400, "validation_error"));
        assert!(message.contains("max 100"), "{message}");
        assert_eq!(err.class(), VendorErrorClass::InvalidResponse);
        assert_eq!(team.sim.calls(methods::COLLECTIONS_LIST), 1);
    }

    #[tokio::test]
    async fn a_revoked_token_is_bad_credentials_and_not_retried() {
        let team = Team::start().await;
        let client = team.client(retries(3));
        client.auth_info().await.unwrap();
        team.sim.model(|m| m.revoke_token(TOKEN));
        let err = client.auth_info().await.unwrap_err();
        assert!(matches!(err, OutlineError::BadCredentials { .. }), "{err}");
        assert!(err.class().refuses_credentials());
        let err = client.collections_list(0, LIMIT).await.unwrap_err();
        assert_eq!(err.class(), VendorErrorClass::BadCredentials, "{err}");
        let unknown = team.client_with("ol_api_never-issued", retries(3));
        let err = unknown.auth_info().await.unwrap_err();
        assert_eq!(err.class(), VendorErrorClass::BadCredentials, "{err}");
        assert_eq!(team.sim.calls(methods::AUTH_INFO), 3);
        assert_eq!(team.sim.calls(methods::COLLECTIONS_LIST), 1);
    }

    #[tokio::test]
    async fn the_call_budget_stops_calls_retries_included() {
        let team = Team::start().await;
        team.sim.inject(Fault::nth(
            methods::DOCUMENTS_LIST,
            1,
            OutlineFault::Status(502),
        ));
        let budget = CallBudget::new(3);
        let client = team.client(retries(3)).with_budget(budget.clone());
        let list = |offset| {
            client.documents_list(None, offset, LIMIT, DocumentSort::CreatedAt, Direction::Asc)
        };
        // The 502 and its retry spend two.
        assert_eq!(list(0).await.unwrap().items.len(), 2);
        assert_eq!(budget.left(), 1);
        assert_eq!(list(2).await.unwrap().items.len(), 2);
        let err = list(4).await.unwrap_err();
        assert!(matches!(err, OutlineError::BudgetExhausted { .. }), "{err}");
        assert_eq!(err.class(), VendorErrorClass::BudgetExhausted);
        // Nothing past the budget reached Outline.
        assert_eq!(team.sim.calls(methods::DOCUMENTS_LIST), 3);
        assert_eq!(client.calls(), 3);
    }
}
