//! The metric names that operators' queries read: the Grafana dashboards under `deploy/grafana`
//! and the alert rules of the chart. The metrics test of the stack (`tests/webhooks/metrics.rs`)
//! scrapes every service and requires each name to be exported; `cargo xtask chart` (which
//! includes this file) requires each to be named by some source. Dependencies: std and
//! serde_json only, so both can build it.

use std::collections::BTreeSet;

/// Series queries may read that no forgesync code exports, and who exports them.
pub const EXTERNAL_SERIES: &[(&str, &str)] = &[
    (
        "nats_consumer_num_pending",
        "prometheus-nats-exporter (the NATS chart's promExporter)",
    ),
    ("kube_pod_status_ready", "kube-state-metrics"),
];

/// Whether `name` is exported by something other than forgesync.
pub fn is_external(name: &str) -> bool {
    EXTERNAL_SERIES.iter().any(|(s, _)| *s == name)
}

/// Aggregation operators and keywords: identifiers that are never metric names.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "atan2",
    "inf",
    "nan",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: every identifier that is not a function, an
/// operator, a keyword, a label (in a matcher or a `by (...)` list), a string, a duration or a
/// Grafana variable (`$name`, `${name}`).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_group(&chars, i, '{', '}'),
            '[' => i = skip_group(&chars, i, '[', ']'),
            '#' => {
                // A comment runs to the end of the line.
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_group(&chars, i, '{', '}');
                } else {
                    while i < chars.len() && is_ident(chars[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number or a duration (`5m`, `1e3`, `0.95`).
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if chars.get(next) == Some(&'(') {
                        i = skip_group(&chars, next, '(', ')');
                    }
                } else if KEYWORDS.contains(&lower.as_str()) || chars.get(next) == Some(&'(') {
                    // An operator, a keyword or a function call.
                } else {
                    found.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    found
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index after the string opened at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after the group opened at `start`, strings inside included.
fn skip_group(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Every query of a Grafana dashboard: each panel's targets (rows' nested panels included) and
/// each query variable (`label_values(metric, label)` reads `metric`), with where it is.
pub fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("untitled");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((format!("panel {title:?}"), expr.to_owned()));
                }
            }
            panels(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .or_else(|| var["query"].as_str())
            .unwrap_or_default();
        let name = var["name"].as_str().unwrap_or_default();
        let query = match query.trim().strip_prefix("label_values(") {
            // label_values(metric, label): the metric; label_values(label) reads none.
            Some(args) => match args.rsplit_once(',') {
                Some((metric, _)) => metric.to_owned(),
                None => continue,
            },
            None => query.to_owned(),
        };
        out.push((format!("variable ${name}"), query));
    }
    out
}

/// Every alert of a chart template and its expression, with the template's actions
/// (`{{ ... }}`) removed: what they insert is configuration (a namespace matcher, a threshold,
/// an external series name), never a forgesync metric.
pub fn template_alerts(template: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut alert = None;
    let lines: Vec<&str> = template.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        if let Some(name) = line
            .strip_prefix("- alert:")
            .or_else(|| line.strip_prefix("alert:"))
        {
            alert = Some(name.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("expr:") {
            let mut expr = rest.trim().to_owned();
            if expr == "|" || expr == ">" || expr == "|-" || expr == ">-" {
                // A block: the lines indented deeper than `expr:`.
                let indent = lines[i].len() - line.len();
                expr.clear();
                while i + 1 < lines.len() {
                    let next = lines[i + 1];
                    let next_indent = next.len() - next.trim_start().len();
                    if !next.trim().is_empty() && next_indent <= indent {
                        break;
                    }
                    expr.push_str(next.trim());
                    expr.push('\n');
                    i += 1;
                }
            }
            let name = alert.clone().unwrap_or_else(|| "unnamed".to_owned());
            out.push((name, strip_actions(&expr)));
        }
        i += 1;
    }
    out
}

/// `text` without its Go template actions.
fn strip_actions(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        rest = match rest[start..].find("}}") {
            Some(end) => &rest[start + end + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// The metric names of a Prometheus text exposition (`_bucket`, `_sum` and `_count` of a
/// histogram as they are written).
pub fn exposed_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// `(where, name)` of every name `queries` read that is neither in `exported` nor external.
pub fn unexported(
    queries: &[(String, String)],
    exported: &BTreeSet<String>,
) -> BTreeSet<(String, String)> {
    queries
        .iter()
        .flat_map(|(place, expr)| metric_names(expr).into_iter().map(move |n| (place, n)))
        .filter(|(_, name)| !exported.contains(name) && !is_external(name))
        .map(|(place, name)| (place.clone(), name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn finds_metrics_not_functions_labels_or_variables() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.95, sum by (consumer, le) (rate(bus_message_duration_seconds_bucket{namespace=~"$namespace", consumer=~"(.+_)?$worker-.+"}[$__rate_interval])))"#
            ),
            ["bus_message_duration_seconds_bucket"]
        );
        assert_eq!(
            names(
                "1 - min by (vendor) (vendor_quota_remaining) / max by (vendor) (vendor_quota_limit > 0)"
            ),
            ["vendor_quota_limit", "vendor_quota_remaining"]
        );
        assert_eq!(
            names(
                "sum without (pod) (a_total) / on (vendor) group_left (class) b offset 5m and c_total"
            ),
            ["a_total", "b", "c_total"]
        );
        assert_eq!(
            names(r#"max(outbox_relay_lag_seconds{ namespace="x"}) > 60"#),
            ["outbox_relay_lag_seconds"]
        );
        assert!(names(r#"vector(0) + label_replace(time(), "a", "$1", "b", "(.*)")"#).is_empty());
    }

    #[test]
    fn reads_dashboard_panels_rows_and_variables() {
        let dashboard = serde_json::json!({
            "panels": [
                {"title": "a", "targets": [{"expr": "rate(one_total[5m])"}]},
                {"title": "row", "type": "row", "panels": [
                    {"title": "b", "targets": [{"expr": "two"}]}
                ]}
            ],
            "templating": {"list": [
                {"name": "ns", "type": "query", "query": {"query": "label_values(three_total, namespace)"}},
                {"name": "n", "type": "query", "query": "label_values(namespace)"},
                {"name": "c", "type": "constant", "query": "not_a_metric"}
            ]}
        });
        let queries = dashboard_queries(&dashboard);
        let all: BTreeSet<String> = queries.iter().flat_map(|(_, q)| metric_names(q)).collect();
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            ["one_total", "three_total", "two"]
        );
    }

    #[test]
    fn reads_alerts_of_a_template() {
        let template = r#"
        - alert: A
          expr: sum(increase(bus_messages_total{ {{- $ns }}, outcome="dead"}[15m])) > 0
        - alert: B
          expr: max by (c) ({{ $rule.metric }}{c=~{{ $x | quote }}}) > {{ $rule.t }}
        - alert: C
          expr: |
            max(outbox_relay_lag_seconds)
              > 3
          for: 5m
"#;
        let alerts = template_alerts(template);
        let names: Vec<(String, Vec<String>)> = alerts
            .iter()
            .map(|(a, e)| (a.clone(), metric_names(e).into_iter().collect()))
            .collect();
        assert_eq!(
            names,
            [
                ("A".to_owned(), vec!["bus_messages_total".to_owned()]),
                ("B".to_owned(), vec![]),
                ("C".to_owned(), vec!["outbox_relay_lag_seconds".to_owned()]),
            ]
        );
    }

    #[test]
    fn a_name_nothing_exports_is_reported_and_external_ones_are_not() {
        let scrape =
            "# TYPE a_total counter\na_total{x=\"1\"} 3\nb_seconds_bucket{le=\"1\"} 1\nc 2\n";
        let exported = exposed_names(scrape);
        let queries = vec![
            (
                "panel".to_owned(),
                "rate(a_total[5m]) + b_seconds_bucket + c".to_owned(),
            ),
            (
                "alert".to_owned(),
                "kube_pod_status_ready + renamed_total".to_owned(),
            ),
        ];
        assert_eq!(
            unexported(&queries, &exported)
                .into_iter()
                .collect::<Vec<_>>(),
            [("alert".to_owned(), "renamed_total".to_owned())]
        );
    }
}
