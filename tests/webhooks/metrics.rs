//! What operators read is what the services export: every metric the Grafana dashboards
//! (`deploy/grafana/*.json`) and the chart's alert rules name is on the `/metrics` of a running
//! stack (control-api, ingress, github-sync, the eraser, slack-ingest and provider-repair) once a little traffic went through
//! it, so a renamed metric fails this test rather than leaving a panel empty or an alert silent.
//! The same scrape shows that no request path or payload value became a label.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use testkit::promql::{dashboard_queries, exposed_names, template_alerts, unexported};
use vendor_sim::github::Scenario;
use vendor_sim::github::webhook::{Delivery, issues_payload};

use crate::support::LiveStack;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// Each dashboard's queries, by file name.
fn dashboards() -> Result<Vec<(String, serde_json::Value)>> {
    let dir = workspace().join("deploy/grafana");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path)?;
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let json = serde_json::from_str(&text).with_context(|| format!("parsing {name}"))?;
            out.push((name, json));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Every query the dashboards and the alert rules hold, with where it is.
fn referenced() -> Result<Vec<(String, String)>> {
    let mut queries = Vec::new();
    let dashboards = dashboards()?;
    assert!(
        dashboards.len() >= 3,
        "deploy/grafana holds the overview, ingress and sync worker dashboards"
    );
    for (name, dashboard) in &dashboards {
        let found = dashboard_queries(dashboard);
        assert!(!found.is_empty(), "{name} has no query");
        queries.extend(
            found
                .into_iter()
                .map(|(at, q)| (format!("{name}: {at}"), q)),
        );
    }
    let rules = workspace().join("helm/forgesync/templates/monitoring.yaml");
    let alerts = template_alerts(&std::fs::read_to_string(&rules)?);
    assert!(alerts.len() >= 5, "the chart's alerts were not found");
    queries.extend(
        alerts
            .into_iter()
            .map(|(alert, expr)| (format!("alert {alert}"), expr)),
    );
    Ok(queries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_metric_the_dashboards_and_alerts_read_is_exported() -> Result<()> {
    // Started: an App connection activated, its INITIAL job run against the simulator (jobs,
    // items, vendor quota, the relay, control-api's routes).
    let stack = LiveStack::start(Scenario {
        repositories: 2,
        items: 3,
        ..Scenario::default()
    })
    .await?;
    let eraser = testkit::spawn(testkit::eraser_config(stack.env.common_args())).await?;
    // slack-ingest, for its own dashboard: its consent counters start at zero.
    let slack: slack_ingest::Config = testkit::config(
        stack.env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--slack-api-url=http://127.0.0.1:9/api/".to_owned(),
            "--reconcile-cron=off".to_owned(),
        ],
    )?;
    let slack = testkit::spawn(slack).await?;
    // provider-repair, for its alerts: its fence gauges are read from the table at start.
    let repair: provider_repair::Config = testkit::config(
        stack.env.common_args(),
        &[
            format!("--secret-key={}", testkit::secret_key()),
            "--provider-repair-cron=off".to_owned(),
        ],
    )?;
    let repair = testkit::spawn(repair).await?;

    // A delivery github-sync applies, the same again (a duplicate), and a forged one (refused).
    let repo = stack.repositories[0];
    let payload = stack.sim.model(|m| {
        let r = m.repository(repo).expect("repository exists");
        issues_payload(m, "edited", r, r.issues().next().expect("an issue"))
    });
    let delivery = stack.deliver("issues", &payload).await?;
    assert_eq!(
        stack.send(&delivery).await?,
        200,
        "a duplicate is answered 200"
    );
    let forged = Delivery::new("issues", &payload);
    let url = format!("{}/webhooks/github", stack.ingress);
    let refused = forged
        .send(&stack.http, &url, b"not-the-secret")
        .await?
        .as_u16();
    assert_eq!(refused, 401, "a delivery signed with another secret");
    stack.settle().await?;

    let mut exported = BTreeSet::new();
    let mut scrapes = Vec::new();
    for (service, url) in stack.service_urls().into_iter().chain([
        ("eraser", eraser.url()),
        ("slack-ingest", slack.url()),
        ("provider-repair", repair.url()),
    ]) {
        let res = stack.http.get(format!("{url}/metrics")).send().await?;
        assert_eq!(res.status(), 200, "{service}'s /metrics");
        let text = res.text().await?;
        exported.extend(exposed_names(&text));
        scrapes.push((service, text));
    }

    let queries = referenced()?;
    let missing = unexported(&queries, &exported);
    assert!(
        missing.is_empty(),
        "queries read metrics no service exports (renamed? never recorded?):\n{}\n\nexported: {exported:?}",
        missing
            .iter()
            .map(|(at, name)| format!("  {at}: {name}"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The check bites: the overview with one metric renamed is refused, naming the metric.
    let (_, overview) = dashboards()?
        .into_iter()
        .find(|(name, _)| name == "overview.json")
        .context("deploy/grafana/overview.json")?;
    let renamed: serde_json::Value = serde_json::from_str(
        &overview
            .to_string()
            .replace("bus_redeliveries_total", "bus_redeliveries_renamed_total"),
    )?;
    let reported: BTreeSet<String> = unexported(&dashboard_queries(&renamed), &exported)
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert_eq!(
        reported.into_iter().collect::<Vec<_>>(),
        ["bus_redeliveries_renamed_total"]
    );

    // Labels are bounded: routes are templates, and no workspace id (it is in control-api's
    // paths) or delivery id (a header) is a label value. The connection id is, by design, on the
    // vendor quota only.
    for (service, text) in &scrapes {
        for forbidden in [stack.ws.as_str(), delivery.delivery_id.as_str()] {
            assert!(
                !text.contains(forbidden),
                "{service}'s /metrics holds {forbidden:?}"
            );
        }
        for line in text.lines().filter(|l| l.contains(&stack.conn)) {
            assert!(
                line.starts_with("vendor_quota_"),
                "{service}: the connection id labels {line}"
            );
        }
    }
    let text = &scrapes[0].1;
    assert!(
        text.lines().any(|l| l.starts_with("http_requests_total{")
            && l.contains("service=\"control-api\"")
            && l.contains(
                "route=\"/workspaces/{workspace_id}/connections/{connection_id}/{transition}\""
            )),
        "control-api's requests are counted by route template:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("vendor_quota_remaining{")
                && l.contains(&format!("connection=\"{}\"", stack.conn))
                && l.contains("vendor=\"github\"")),
        "github-sync reports the connection's quota:\n{text}"
    );
    eraser.stop().await?;
    repair.stop().await?;
    Ok(())
}
