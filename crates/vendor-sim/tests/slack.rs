//! The simulated Slack over real HTTP: the Web API's paging, bounds and errors as Slack answers
//! them, each fault kind, rate-limit tiers, the call log, and the Events API's signed deliveries
//! and retries.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value as Json, json};
use vendor_sim::slack::{Fault, Model, RateLimits, RetrySchedule, SlackFault, SlackSim, methods};

const TOKEN: &str = "xoxb-test";
const SECRET: &str = "signing-secret";

/// A team with a token, a public channel the bot is in, and a user.
struct Fixture {
    sim: SlackSim,
    team: String,
    general: String,
    alice: String,
    http: reqwest::Client,
}

async fn fixture(model: impl FnOnce(&mut Model, &str)) -> Fixture {
    let mut m = Model::default();
    let team = m.add_team("acme");
    m.add_token(TOKEN, &team);
    let general = m.add_channel(&team, "general", false).unwrap();
    m.join_bot(&general).unwrap();
    let alice = m.add_user(&team);
    model(&mut m, &team);
    Fixture {
        sim: SlackSim::start(m).await.unwrap(),
        team,
        general,
        alice,
        http: reqwest::Client::new(),
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Json,
}

impl Fixture {
    /// GET `<api_url><method>?<params>` with the bot token.
    async fn call(&self, method: &str, params: &[(&str, &str)]) -> Answer {
        self.call_as(TOKEN, method, params).await
    }

    async fn call_as(&self, token: &str, method: &str, params: &[(&str, &str)]) -> Answer {
        let mut url = reqwest::Url::parse(&format!("{}{method}", self.sim.api_url())).unwrap();
        url.query_pairs_mut().extend_pairs(params);
        let r = self.http.get(url).bearer_auth(token).send().await.unwrap();
        Answer {
            status: r.status(),
            headers: r.headers().clone(),
            body: r.json().await.unwrap_or(Json::Null),
        }
    }

    /// POSTs a form body.
    async fn post_form(&self, method: &str, params: &[(&str, &str)]) -> Json {
        let mut url = reqwest::Url::parse("http://form.invalid/").unwrap();
        url.query_pairs_mut().extend_pairs(params);
        let body = url.query().unwrap_or_default().to_owned();
        self.http
            .post(format!("{}{method}", self.sim.api_url()))
            .bearer_auth(TOKEN)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Posts `n` messages one second apart from `from` (Unix seconds); their ts, oldest first.
    fn seed(&self, n: u64, from: u64) -> Vec<String> {
        (0..n)
            .map(|i| {
                let ts = format!("{}.000100", from + i);
                self.sim
                    .model(|m| m.post_at(&self.general, &self.alice, &format!("m{i}"), &ts))
                    .unwrap()
            })
            .collect()
    }

    /// Every message of a history walk by cursor, with the pages' sizes.
    async fn walk_history(&self, extra: &[(&str, &str)]) -> (Vec<String>, Vec<usize>) {
        let mut cursor = String::new();
        let (mut seen, mut sizes) = (Vec::new(), Vec::new());
        loop {
            let mut params = vec![("channel", self.general.as_str())];
            params.extend_from_slice(extra);
            if !cursor.is_empty() {
                params.push(("cursor", &cursor));
            }
            let a = self.call(methods::CONVERSATIONS_HISTORY, &params).await;
            assert_eq!(a.body["ok"], true, "{}", a.body);
            let page = a.body["messages"].as_array().unwrap();
            sizes.push(page.len());
            seen.extend(page.iter().map(|m| m["ts"].as_str().unwrap().to_owned()));
            cursor = next_cursor(&a.body);
            if cursor.is_empty() {
                return (seen, sizes);
            }
        }
    }
}

fn next_cursor(body: &Json) -> String {
    body["response_metadata"]["next_cursor"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn texts(body: &Json) -> Vec<&str> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn auth_test_names_the_bot_and_bad_tokens_fail_with_ok_false() {
    let f = fixture(|_, _| {}).await;
    let a = f.call(methods::AUTH_TEST, &[]).await;
    let bot = f.sim.model(|m| m.team(&f.team).unwrap().clone());
    assert_eq!(a.body["ok"], true);
    assert_eq!(a.body["team_id"], json!(f.team));
    assert_eq!(a.body["user_id"], json!(bot.bot_user));
    assert_eq!(a.body["bot_id"], json!(bot.bot_id));

    let unknown = f.call_as("xoxb-nope", methods::AUTH_TEST, &[]).await;
    assert_eq!(unknown.status, StatusCode::OK);
    assert_eq!(
        unknown.body,
        json!({ "ok": false, "error": "invalid_auth" })
    );
    f.sim.model(|m| m.revoke_token(TOKEN));
    let revoked = f.call(methods::CONVERSATIONS_LIST, &[]).await;
    assert_eq!(revoked.body["error"], "token_revoked");
}

#[tokio::test]
async fn history_pages_newest_first_by_cursor_and_omits_thread_replies() {
    let f = fixture(|_, _| {}).await;
    let ts = f.seed(7, 1_700_000_000);
    let (seen, sizes) = f.walk_history(&[("limit", "3")]).await;
    let mut newest_first = ts.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    assert_eq!(sizes, vec![3, 3, 1]);

    let first = f
        .call(
            methods::CONVERSATIONS_HISTORY,
            &[("channel", &f.general), ("limit", "7")],
        )
        .await;
    assert_eq!(first.body["has_more"], false);
    assert!(first.body.get("response_metadata").is_none());

    // A reply is in the thread, not the history, unless broadcast.
    let root = &ts[0];
    let quiet = f
        .sim
        .model(|m| m.reply(&f.general, root, &f.alice, "quiet", false))
        .unwrap();
    let loud = f
        .sim
        .model(|m| m.reply(&f.general, root, &f.alice, "loud", true))
        .unwrap();
    let (seen, _) = f.walk_history(&[]).await;
    assert!(!seen.contains(&quiet));
    assert_eq!(seen.first(), Some(&loud));
    let a = f
        .call(
            methods::CONVERSATIONS_HISTORY,
            &[
                ("channel", &f.general),
                ("inclusive", "true"),
                ("oldest", root),
                ("latest", root),
            ],
        )
        .await;
    let parent = &a.body["messages"][0];
    assert_eq!(parent["thread_ts"], json!(root));
    assert_eq!(parent["reply_count"], 2);
    assert_eq!(parent["latest_reply"], json!(loud));
    let b = f
        .call(
            methods::CONVERSATIONS_HISTORY,
            &[("channel", &f.general), ("limit", "1")],
        )
        .await;
    assert_eq!(b.body["messages"][0]["subtype"], "thread_broadcast");
}

#[tokio::test]
async fn history_bounds_are_exclusive_unless_inclusive() {
    let f = fixture(|_, _| {}).await;
    let ts = f.seed(5, 1_700_000_000);
    let (seen, _) = f
        .walk_history(&[("oldest", &ts[1]), ("latest", &ts[3])])
        .await;
    assert_eq!(seen, vec![ts[2].clone()]);
    let (seen, _) = f
        .walk_history(&[
            ("oldest", &ts[1]),
            ("latest", &ts[3]),
            ("inclusive", "true"),
        ])
        .await;
    assert_eq!(seen, vec![ts[3].clone(), ts[2].clone(), ts[1].clone()]);
    // Whole seconds are accepted as bounds.
    let (seen, _) = f.walk_history(&[("oldest", "1700000003")]).await;
    assert_eq!(seen, vec![ts[4].clone(), ts[3].clone()]);
    let bad = f
        .call(
            methods::CONVERSATIONS_HISTORY,
            &[("channel", &f.general), ("oldest", "soon")],
        )
        .await;
    assert_eq!(bad.body["error"], "invalid_ts_oldest");
}

#[tokio::test]
async fn replies_list_the_root_first_then_replies_oldest_first_in_pages() {
    let f = fixture(|_, _| {}).await;
    let root = f.seed(1, 1_700_000_000).remove(0);
    let replies: Vec<String> = (0..5)
        .map(|i| {
            f.sim
                .model(|m| m.reply(&f.general, &root, &f.alice, &format!("r{i}"), false))
                .unwrap()
        })
        .collect();
    let mut cursor = String::new();
    let mut seen = Vec::new();
    loop {
        let mut params = vec![
            ("channel", f.general.as_str()),
            ("ts", root.as_str()),
            ("limit", "2"),
        ];
        if !cursor.is_empty() {
            params.push(("cursor", &cursor));
        }
        let a = f.call(methods::CONVERSATIONS_REPLIES, &params).await;
        assert_eq!(a.body["ok"], true, "{}", a.body);
        for m in a.body["messages"].as_array().unwrap() {
            seen.push(m["ts"].as_str().unwrap().to_owned());
        }
        cursor = next_cursor(&a.body);
        if cursor.is_empty() {
            assert_eq!(a.body["has_more"], false);
            break;
        }
    }
    let mut expected = vec![root.clone()];
    expected.extend(replies.iter().cloned());
    assert_eq!(seen, expected);

    let after = f
        .call(
            methods::CONVERSATIONS_REPLIES,
            &[
                ("channel", &f.general),
                ("ts", &root),
                ("oldest", &replies[2]),
            ],
        )
        .await;
    assert_eq!(texts(&after.body), vec!["m0", "r3", "r4"]);
    assert_eq!(after.body["messages"][1]["parent_user_id"], json!(f.alice));
    let missing = f
        .call(
            methods::CONVERSATIONS_REPLIES,
            &[("channel", &f.general), ("ts", "1.000000")],
        )
        .await;
    assert_eq!(missing.body["error"], "thread_not_found");
}

#[tokio::test]
async fn channels_the_bot_is_not_in_are_refused_as_slack_refuses_them() {
    let mut ids = Vec::new();
    let f = fixture(|m, team| {
        let outside = m.add_channel(team, "outside", false).unwrap();
        let secret = m.add_channel(team, "secret", true).unwrap();
        let other_team = m.add_team("other");
        let theirs = m.add_channel(&other_team, "theirs", false).unwrap();
        m.join_bot(&theirs).unwrap();
        ids = vec![outside, secret, theirs];
    })
    .await;
    let [outside, secret, theirs] = [&ids[0], &ids[1], &ids[2]];
    let history = |c: &str| {
        let c = c.to_owned();
        let f = &f;
        async move {
            f.call(methods::CONVERSATIONS_HISTORY, &[("channel", &c)])
                .await
                .body["error"]
                .clone()
        }
    };
    assert_eq!(history(outside).await, "not_in_channel");
    assert_eq!(history(secret).await, "channel_not_found");
    assert_eq!(history(theirs).await, "channel_not_found");
    let info = f
        .call(methods::CONVERSATIONS_INFO, &[("channel", outside)])
        .await;
    assert_eq!(info.body["channel"]["is_member"], false);
    let info = f
        .call(methods::CONVERSATIONS_INFO, &[("channel", theirs)])
        .await;
    assert_eq!(info.body["error"], "channel_not_found");

    // Listing: the team's public channels, private ones only once the bot is in them.
    let list = |types: &'static str| {
        let f = &f;
        async move {
            let a = f
                .call(
                    methods::CONVERSATIONS_LIST,
                    &[("types", types), ("limit", "1")],
                )
                .await;
            let mut names = Vec::new();
            let mut cursor = next_cursor(&a.body);
            names.extend(
                a.body["channels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["name"].as_str().unwrap().to_owned()),
            );
            while !cursor.is_empty() {
                let a = f
                    .call(
                        methods::CONVERSATIONS_LIST,
                        &[("types", types), ("limit", "1"), ("cursor", &cursor)],
                    )
                    .await;
                names.extend(
                    a.body["channels"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["name"].as_str().unwrap().to_owned()),
                );
                cursor = next_cursor(&a.body);
            }
            names
        }
    };
    assert_eq!(
        list("public_channel,private_channel").await,
        vec!["general", "outside"]
    );
    f.sim.model(|m| m.join_bot(secret)).unwrap();
    assert_eq!(
        list("public_channel,private_channel").await,
        vec!["general", "outside", "secret"]
    );
    assert_eq!(list("private_channel").await, vec!["secret"]);
}

#[tokio::test]
async fn post_message_posts_as_the_bot_and_refuses_where_slack_does() {
    let mut outside = String::new();
    let f = fixture(|m, team| {
        outside = m.add_channel(team, "outside", false).unwrap();
    })
    .await;
    let (url, seen) = receiver(Vec::new()).await;
    f.sim.subscribe_events(&url, SECRET);
    let a = f
        .post_form(
            methods::CHAT_POST_MESSAGE,
            &[("channel", &f.general), ("text", "hi from bot")],
        )
        .await;
    assert_eq!(a["ok"], true, "{a}");
    let bot = f.sim.model(|m| m.team(&f.team).unwrap().clone());
    assert_eq!(a["channel"], json!(f.general));
    assert_eq!(a["message"]["user"], json!(bot.bot_user));
    assert_eq!(a["message"]["bot_id"], json!(bot.bot_id));
    assert_eq!(a["message"]["ts"], a["ts"]);
    let history = f
        .call(methods::CONVERSATIONS_HISTORY, &[("channel", &f.general)])
        .await;
    assert_eq!(texts(&history.body), vec!["hi from bot"]);
    // Posted like any message: its event goes out too.
    f.sim.settle().await;
    let event = &events(&seen)[0]["event"];
    assert_eq!(event["ts"], a["ts"]);
    assert_eq!(event["bot_id"], json!(bot.bot_id));

    // JSON bodies are accepted too.
    let thread: Json = f
        .http
        .post(format!("{}chat.postMessage", f.sim.api_url()))
        .bearer_auth(TOKEN)
        .json(&json!({ "channel": f.general, "text": "in thread", "thread_ts": a["ts"] }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(thread["message"]["thread_ts"], a["ts"]);

    let refused = f
        .post_form(
            methods::CHAT_POST_MESSAGE,
            &[("channel", &outside), ("text", "x")],
        )
        .await;
    assert_eq!(refused["error"], "not_in_channel");
    f.sim.model(|m| m.archive(&f.general)).unwrap();
    let refused = f
        .post_form(
            methods::CHAT_POST_MESSAGE,
            &[("channel", &f.general), ("text", "x")],
        )
        .await;
    assert_eq!(refused["error"], "is_archived");
}

#[tokio::test]
async fn faults_answer_as_slack_misbehaves() {
    let f = fixture(|_, _| {}).await;
    f.seed(6, 1_700_000_000);
    let history = methods::CONVERSATIONS_HISTORY;

    f.sim.inject(Fault::nth(
        history,
        1,
        SlackFault::RateLimited { retry_after: 7 },
    ));
    let a = f.call(history, &[("channel", &f.general)]).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.headers["retry-after"], "7");
    assert_eq!(a.body, json!({ "ok": false, "error": "ratelimited" }));

    f.sim
        .inject(Fault::nth(history, 1, SlackFault::Status(503)));
    let a = f.call(history, &[("channel", &f.general)]).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);

    f.sim
        .inject(Fault::nth(history, 1, SlackFault::error("internal_error")));
    let a = f.call(history, &[("channel", &f.general)]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body, json!({ "ok": false, "error": "internal_error" }));

    f.sim.inject(Fault::nth(
        history,
        1,
        SlackFault::Delay(Duration::from_millis(300)),
    ));
    let started = Instant::now();
    let a = f.call(history, &[("channel", &f.general)]).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(a.body["ok"], true);

    // has_more true on the last page, with no cursor to follow.
    f.sim
        .inject(Fault::nth(history, 1, SlackFault::HasMore(true)));
    let a = f.call(history, &[("channel", &f.general)]).await;
    assert_eq!(a.body["has_more"], true);
    assert_eq!(next_cursor(&a.body), "");
    assert_eq!(a.body["messages"].as_array().unwrap().len(), 6);

    // has_more false with more left.
    f.sim
        .inject(Fault::nth(history, 1, SlackFault::HasMore(false)));
    let a = f
        .call(history, &[("channel", &f.general), ("limit", "2")])
        .await;
    assert_eq!(a.body["has_more"], false);
    assert_eq!(next_cursor(&a.body), "");

    // A short page keeps a cursor that loses nothing.
    f.sim
        .inject(Fault::nth(history, 1, SlackFault::ShortPage { keep: 1 }));
    let (seen, sizes) = f.walk_history(&[("limit", "4")]).await;
    assert_eq!(sizes, vec![1, 4, 1]);
    assert_eq!(seen.len(), 6);
}

#[tokio::test]
async fn a_mutation_between_pages_is_applied_when_the_call_is_served() {
    let f = fixture(|_, _| {}).await;
    let ts = f.seed(6, 1_700_000_000);
    let (channel, user) = (f.general.clone(), f.alice.clone());
    let (gone, edited) = (ts[1].clone(), ts[0].clone());
    // On the second page: an older message deleted, the oldest edited, a new one posted.
    f.sim.inject(Fault::nth(
        methods::CONVERSATIONS_HISTORY,
        2,
        SlackFault::mutate(move |m| {
            m.delete(&channel, &gone).unwrap();
            m.edit(&channel, &edited, "changed").unwrap();
            m.post(&channel, &user, "late").unwrap();
        }),
    ));
    let (seen, _) = f.walk_history(&[("limit", "3")]).await;
    assert_eq!(
        seen,
        vec![
            ts[5].clone(),
            ts[4].clone(),
            ts[3].clone(),
            ts[2].clone(),
            ts[0].clone()
        ]
    );
    let a = f
        .call(
            methods::CONVERSATIONS_HISTORY,
            &[
                ("channel", &f.general),
                ("limit", "1"),
                ("inclusive", "1"),
                ("latest", &ts[0]),
            ],
        )
        .await;
    assert_eq!(a.body["messages"][0]["text"], "changed");
    assert!(a.body["messages"][0]["edited"]["ts"].is_string());
}

#[tokio::test]
async fn tiers_answer_429_with_retry_after_per_token_and_method() {
    let f = fixture(|m, team| {
        m.rate_limits = Some(RateLimits {
            window: Duration::from_secs(2),
        });
        m.add_token("xoxb-second", team);
    })
    .await;
    // conversations.list is Tier 2: 20 a window.
    for _ in 0..20 {
        assert_eq!(
            f.call(methods::CONVERSATIONS_LIST, &[]).await.body["ok"],
            true
        );
    }
    let a = f.call(methods::CONVERSATIONS_LIST, &[]).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.body["error"], "ratelimited");
    let wait: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "{wait}");
    // Another method, or another token, has its own allowance.
    assert_eq!(
        f.call(methods::CONVERSATIONS_INFO, &[("channel", &f.general)])
            .await
            .body["ok"],
        true
    );
    assert_eq!(
        f.call_as("xoxb-second", methods::CONVERSATIONS_LIST, &[])
            .await
            .body["ok"],
        true
    );
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(
        f.call(methods::CONVERSATIONS_LIST, &[]).await.body["ok"],
        true
    );
}

#[tokio::test]
async fn the_call_log_keeps_each_calls_parameters() {
    let f = fixture(|_, _| {}).await;
    let ts = f.seed(4, 1_700_000_000);
    f.walk_history(&[("limit", "2"), ("oldest", &ts[0])]).await;
    let calls = f.sim.calls_of(methods::CONVERSATIONS_HISTORY);
    assert_eq!(calls.len(), 2);
    assert_eq!(f.sim.calls(methods::CONVERSATIONS_HISTORY), 2);
    assert!(
        calls
            .iter()
            .all(|c| c.param("oldest") == Some(ts[0].as_str()))
    );
    assert!(
        calls
            .iter()
            .all(|c| c.param("channel") == Some(f.general.as_str()))
    );
    assert_eq!(calls[0].param("cursor"), None);
    assert!(calls[1].param("cursor").is_some());
    assert_eq!(calls[0].token.as_deref(), Some(TOKEN));
    assert!(!calls[0].params.contains_key("token"));
}

type Seen = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// A receiver on a free port answering the scripted statuses (then 200), each after its delay;
/// what it received.
async fn receiver(script: Vec<(StatusCode, Duration)>) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let kept = seen.clone();
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let app = Router::new().route(
        "/slack",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let kept = kept.clone();
            let script = script.clone();
            async move {
                kept.lock().unwrap().push((headers, body.to_vec()));
                let next = script.lock().unwrap().pop_front();
                let (status, delay) = next.unwrap_or((StatusCode::OK, Duration::ZERO));
                tokio::time::sleep(delay).await;
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/slack", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Slack's signature, computed here from the definition.
fn verifies(h: &HeaderMap, body: &[u8]) -> bool {
    let ts = header(h, "x-slack-request-timestamp");
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:").as_bytes());
    mac.update(body);
    let expected = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
    !ts.is_empty() && header(h, "x-slack-signature") == expected
}

fn events(seen: &Seen) -> Vec<Json> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(_, body)| serde_json::from_slice(body).unwrap())
        .collect()
}

#[tokio::test]
async fn changes_are_delivered_as_signed_event_callbacks_in_order() {
    let (url, seen) = receiver(Vec::new()).await;
    let mut outside = String::new();
    let f = fixture(|m, team| {
        outside = m.add_channel(team, "outside", false).unwrap();
    })
    .await;
    f.sim.subscribe_events(&url, SECRET);
    let (c, u) = (f.general.clone(), f.alice.clone());
    let root = f
        .sim
        .model(|m| m.post(&c, &u, "hello https://example.org"))
        .unwrap();
    f.sim.model(|m| {
        m.reply(&c, &root, &u, "in thread", false).unwrap();
        m.reply(&c, &root, &u, "broadcast", true).unwrap();
        m.edit(&c, &root, "hello again").unwrap();
        m.unfurl(&c, &root).unwrap();
        let file = m.share_file(&c, &u, "plot.png").unwrap();
        m.delete(&c, &file).unwrap();
        m.bot_message(&c, "B0OTHER", "deploys", "shipped").unwrap();
        // Nothing from a channel the bot is not in.
        m.post(&outside, &u, "unseen").unwrap();
        m.rename(&c, "town-square").unwrap();
        m.archive(&c).unwrap();
        m.unarchive(&c).unwrap();
        m.remove_bot(&c).unwrap();
    });
    f.sim.settle().await;

    let received = seen.lock().unwrap().clone();
    assert!(received.iter().all(|(h, body)| verifies(h, body)));
    assert!(
        received
            .iter()
            .all(|(h, _)| header(h, "x-slack-retry-num").is_empty())
    );
    let got = events(&seen);
    assert_eq!(
        kinds(&got),
        vec![
            "message",
            "message",
            "message.thread_broadcast",
            "message.message_changed",
            "message.message_changed",
            "message.file_share",
            "message.message_deleted",
            "message.bot_message",
            "channel_rename",
            "channel_archive",
            "channel_unarchive",
            "member_left_channel",
            "channel_left",
        ]
    );
    let first = &got[0];
    assert_eq!(first["type"], "event_callback");
    assert_eq!(first["team_id"], json!(f.team));
    assert!(first["event_id"].as_str().unwrap().starts_with("Ev"));
    assert!(first["event_time"].is_i64());
    assert!(first["api_app_id"].as_str().unwrap().starts_with('A'));
    assert_eq!(first["event"]["channel"], json!(c));
    assert_eq!(first["event"]["ts"], json!(root));
    assert_eq!(got[1]["event"]["thread_ts"], json!(root));
    let edit = &got[3]["event"];
    assert_eq!(edit["message"]["text"], "hello again");
    assert_eq!(
        edit["previous_message"]["text"],
        "hello https://example.org"
    );
    assert!(edit["message"]["edited"]["ts"].is_string());
    let unfurl = &got[4]["event"];
    assert_eq!(unfurl["message"]["edited"], edit["message"]["edited"]);
    assert!(unfurl["message"]["attachments"].is_array());
    assert_eq!(got[5]["event"]["files"][0]["mimetype"], "image/png");
    assert_eq!(got[6]["event"]["deleted_ts"], got[5]["event"]["ts"]);
    assert_eq!(got[8]["event"]["channel"]["name"], "town-square");
    let deliveries = f.sim.deliveries();
    assert_eq!(deliveries.len(), got.len());
    assert!(
        deliveries
            .iter()
            .all(|d| d.succeeded() && d.status == Some(200))
    );
}

#[tokio::test]
async fn a_failed_delivery_is_retried_with_its_number_and_reason() {
    let (url, seen) = receiver(vec![
        (StatusCode::INTERNAL_SERVER_ERROR, Duration::ZERO),
        // Answers after the timeout.
        (StatusCode::OK, Duration::from_millis(1600)),
    ])
    .await;
    let f = fixture(|_, _| {}).await;
    f.sim.subscribe_events(&url, SECRET);
    f.sim.set_retry_schedule(RetrySchedule {
        timeout: Duration::from_millis(800),
        delays: vec![
            Duration::ZERO,
            Duration::from_millis(50),
            Duration::from_millis(100),
        ],
    });
    f.sim
        .model(|m| m.post(&f.general, &f.alice, "retry me"))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), f.sim.settle())
        .await
        .unwrap();

    let received = seen.lock().unwrap().clone();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|(h, body)| verifies(h, body)));
    assert_eq!(header(&received[0].0, "x-slack-retry-num"), "");
    assert_eq!(header(&received[1].0, "x-slack-retry-num"), "1");
    assert_eq!(header(&received[1].0, "x-slack-retry-reason"), "http_error");
    assert_eq!(header(&received[2].0, "x-slack-retry-num"), "2");
    assert_eq!(
        header(&received[2].0, "x-slack-retry-reason"),
        "http_timeout"
    );
    // The same event each time.
    assert!(received.iter().all(|(_, body)| body == &received[0].1));

    let d = f.sim.deliveries();
    let summary: Vec<_> = d
        .iter()
        .map(|a| (a.retry_num, a.status, a.failure))
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, Some(500), Some("http_error")),
            (1, None, Some("http_timeout")),
            (2, Some(200), None),
        ]
    );
}

#[tokio::test]
async fn crafted_and_replayed_deliveries_are_signed_by_the_sim() {
    let (url, seen) = receiver(Vec::new()).await;
    let f = fixture(|_, _| {}).await;
    f.sim.subscribe_events(&url, SECRET);
    f.sim
        .model(|m| m.post(&f.general, &f.alice, "once"))
        .unwrap();
    f.sim.settle().await;
    let body = f.sim.deliveries()[0].body.clone();
    // The same event again, as a retry Slack would send.
    let status = f
        .sim
        .send_event(&body, Some((1, "http_timeout")))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let received = seen.lock().unwrap().clone();
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].1, body);
    assert!(verifies(&received[1].0, &received[1].1));
    assert_eq!(header(&received[1].0, "x-slack-retry-num"), "1");

    let headers = f.sim.sign(b"{}").unwrap();
    assert!(verifies(&headers, b"{}"));
    assert!(!verifies(&headers, b"{ }"));
}

#[tokio::test]
async fn admin_routes_change_the_model() {
    let (url, seen) = receiver(Vec::new()).await;
    let f = fixture(|_, _| {}).await;
    let admin = |action: &str, body: Json| {
        let request = f
            .http
            .post(format!("{}/_admin/{action}", f.sim.base_url()))
            .json(&body);
        async move { request.send().await.unwrap().json::<Json>().await.unwrap() }
    };
    let a = admin(
        "subscribe_events",
        json!({ "url": url, "signing_secret": SECRET }),
    )
    .await;
    assert_eq!(a["ok"], true);
    let a = admin(
        "post",
        json!({ "channel": f.general, "user": f.alice, "text": "via admin" }),
    )
    .await;
    let ts = a["ts"].as_str().unwrap().to_owned();
    let history = f
        .call(methods::CONVERSATIONS_HISTORY, &[("channel", &f.general)])
        .await;
    assert_eq!(history.body["messages"][0]["ts"], json!(ts));
    let refused = admin(
        "post",
        json!({ "channel": "C404", "user": f.alice, "text": "x" }),
    )
    .await;
    assert_eq!(refused["error"], "channel_not_found");
    f.sim.settle().await;
    assert_eq!(events(&seen)[0]["event"]["text"], "via admin");
}

fn kinds(got: &[Json]) -> Vec<String> {
    got.iter()
        .map(|e| {
            let ev = &e["event"];
            match ev["subtype"].as_str() {
                Some(sub) => format!("{}.{sub}", ev["type"].as_str().unwrap()),
                None => ev["type"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

#[tokio::test]
async fn private_channels_send_group_events_and_only_to_a_member_bot() {
    let (url, seen) = receiver(Vec::new()).await;
    let f = fixture(|_, _| {}).await;
    f.sim.subscribe_events(&url, SECRET);
    let (team, u) = (f.team.clone(), f.alice.clone());
    let secret = f.sim.model(|m| {
        let secret = m.add_channel(&team, "secret", true).unwrap();
        m.post(&secret, &u, "before the bot").unwrap();
        m.join_bot(&secret).unwrap();
        m.post(&secret, &u, "seen").unwrap();
        m.rename(&secret, "hush").unwrap();
        m.archive(&secret).unwrap();
        m.unarchive(&secret).unwrap();
        m.remove_bot(&secret).unwrap();
        m.post(&secret, &u, "after the bot").unwrap();
        m.delete_channel(&secret).unwrap();
        let open = m.add_channel(&team, "open", false).unwrap();
        m.delete_channel(&open).unwrap();
        secret
    });
    f.sim.settle().await;
    let got = events(&seen);
    assert_eq!(
        kinds(&got),
        vec![
            "member_joined_channel",
            "message",
            "group_rename",
            "group_archive",
            "group_unarchive",
            "member_left_channel",
            "group_left",
            "channel_created",
            "channel_deleted",
        ]
    );
    assert_eq!(got[0]["event"]["channel_type"], "G");
    assert_eq!(got[0]["event"]["channel"], json!(secret));
    assert_eq!(got[1]["event"]["channel_type"], "group");
    assert_eq!(got[1]["event"]["text"], "seen");
    assert_eq!(got[2]["event"]["channel"]["name"], "hush");
}

#[tokio::test]
async fn deleting_a_thread_root_with_replies_leaves_a_tombstone() {
    let (url, seen) = receiver(Vec::new()).await;
    let f = fixture(|_, _| {}).await;
    f.sim.subscribe_events(&url, SECRET);
    let (c, u) = (f.general.clone(), f.alice.clone());
    let root = f.sim.model(|m| m.post(&c, &u, "root")).unwrap();
    f.sim
        .model(|m| m.reply(&c, &root, &u, "reply", false))
        .unwrap();
    f.sim.model(|m| m.delete(&c, &root)).unwrap();
    let a = f
        .call(methods::CONVERSATIONS_HISTORY, &[("channel", &f.general)])
        .await;
    assert_eq!(a.body["messages"][0]["subtype"], "tombstone");
    assert_eq!(a.body["messages"][0]["reply_count"], 1);
    f.sim.settle().await;
    let got = events(&seen);
    assert_eq!(
        kinds(&got),
        vec!["message", "message", "message.message_changed"]
    );
    assert_eq!(got[2]["event"]["message"]["subtype"], "tombstone");
}

#[tokio::test]
async fn a_receiver_asking_for_no_retry_gets_none_and_an_unreachable_one_is_retried() {
    let app = Router::new().route(
        "/slack",
        post(|| async {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [("x-slack-no-retry", "1")],
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/slack", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let f = fixture(|_, _| {}).await;
    f.sim.set_retry_schedule(RetrySchedule {
        timeout: Duration::from_secs(2),
        ..RetrySchedule::time_scale(0.001)
    });
    f.sim.subscribe_events(&url, SECRET);
    f.sim.model(|m| m.post(&f.general, &f.alice, "x")).unwrap();
    f.sim.settle().await;
    let d = f.sim.deliveries();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].failure, Some("http_error"));

    // Nothing listens on a closed port: every retry is made.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/slack", l.local_addr().unwrap())
    };
    f.sim.subscribe_events(&closed, SECRET);
    f.sim.model(|m| m.post(&f.general, &f.alice, "y")).unwrap();
    tokio::time::timeout(Duration::from_secs(10), f.sim.settle())
        .await
        .unwrap();
    let d = f.sim.deliveries();
    let retries: Vec<_> = d[1..]
        .iter()
        .map(|a| (a.retry_num, a.retry_reason.clone(), a.failure))
        .collect();
    let failed = Some("connection_failed");
    assert_eq!(
        retries,
        vec![
            (0, None, failed),
            (1, Some("connection_failed".to_owned()), failed),
            (2, Some("connection_failed".to_owned()), failed),
            (3, Some("connection_failed".to_owned()), failed),
        ]
    );
}

#[tokio::test]
async fn url_verification_expects_the_challenge_back() {
    let app = Router::new().route(
        "/slack",
        post(
            |body: axum::Json<Json>| async move { body["challenge"].as_str().unwrap().to_owned() },
        ),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/slack", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (silent, _) = receiver(Vec::new()).await;
    let f = fixture(|_, _| {}).await;
    f.sim.subscribe_events(&url, SECRET);
    assert!(f.sim.verify_url().await.unwrap());
    f.sim.subscribe_events(&silent, SECRET);
    assert!(!f.sim.verify_url().await.unwrap());
}

#[tokio::test]
async fn a_non_marketplace_app_reads_15_messages_a_call_and_one_call_a_window() {
    let f = fixture(|m, _| {
        m.non_marketplace = true;
        m.rate_limits = Some(RateLimits {
            window: Duration::from_secs(60),
        });
    })
    .await;
    f.seed(20, 1_700_000_000);
    let a = f
        .call(
            methods::CONVERSATIONS_HISTORY,
            &[("channel", &f.general), ("limit", "200")],
        )
        .await;
    assert_eq!(a.body["messages"].as_array().unwrap().len(), 15);
    assert_eq!(a.body["has_more"], true);
    let b = f
        .call(methods::CONVERSATIONS_HISTORY, &[("channel", &f.general)])
        .await;
    assert_eq!(b.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(b.headers["retry-after"], "60");
}

#[tokio::test]
async fn ts_values_come_from_the_clock_unique_and_increasing() {
    let f = fixture(|m, _| m.set_clock(1_700_000_000)).await;
    let ts: Vec<String> = (0..3)
        .map(|i| {
            f.sim
                .model(|m| m.post(&f.general, &f.alice, &format!("{i}")))
                .unwrap()
        })
        .collect();
    assert_eq!(
        ts,
        vec![
            "1700000000.000000",
            "1700000000.000001",
            "1700000000.000002"
        ]
    );
    f.sim.model(|m| m.advance_clock(Duration::from_secs(60)));
    let later = f
        .sim
        .model(|m| m.post(&f.general, &f.alice, "later"))
        .unwrap();
    assert_eq!(later, "1700000060.000000");
    let edited = f
        .sim
        .model(|m| m.edit(&f.general, &ts[0], "edited"))
        .unwrap();
    assert_eq!(edited, "1700000060.000001");
}
