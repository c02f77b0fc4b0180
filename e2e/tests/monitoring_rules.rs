//! The Prometheus alerting rules (monitoring/pubjson-alerts.yml) and their
//! unit tests (monitoring/pubjson-alerts.test.yml), checked by Debian's
//! `promtool` (package `prometheus`, installed by scripts/install-deps.sh),
//! and held to the exporter query file
//! (monitoring/pubjson-exporter-queries.yaml): every metric and label an
//! alert reads is one the exporter exports, and the unit tests feed the
//! rules series with the labels the exporter emits. Needs no server.
//!
//! The exporter names a metric `<query name>_<column>` for every column of
//! a query that is not a LABEL, and gives it the query's LABEL columns plus
//! `server` as labels.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use promql_parser::label::{MatchOp, Matchers};
use promql_parser::parser::{self, Expr, LabelModifier, VectorSelector};
use promql_parser::util::{walk_expr, ExprVisitor};
use pubjson_e2e::exporter::repo_root;
use regex::Regex;
use serde_norway::Value;

const RULES: &str = "monitoring/pubjson-alerts.yml";
const RULE_TESTS: &str = "monitoring/pubjson-alerts.test.yml";
const QUERIES: &str = "monitoring/pubjson-exporter-queries.yaml";

/// The label the exporter adds to every metric of the query file.
const EXPORTER_LABEL: &str = "server";

fn read_yaml(relative: &str) -> Value {
    let path = repo_root().join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{relative} is not YAML: {e}"))
}

/// Runs promtool in the repository root; panics (never skips) when it is
/// not installed.
fn promtool(args: &[&str]) -> (bool, String) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): it comes with Debian's `prometheus` package, which \
                 scripts/install-deps.sh installs"
            )
        });
    let text = format!(
        "$ promtool {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A metric the exporter exports with the query file.
#[derive(Debug)]
struct Metric {
    /// `pubjson_slot`, the query it comes from.
    query: String,
    /// GAUGE or COUNTER.
    usage: String,
    /// Its labels: the query's LABEL columns and `server`.
    labels: BTreeSet<String>,
}

/// Every metric of the query file, by name. Panics on a name two queries
/// would both export.
fn exported_metrics() -> BTreeMap<String, Metric> {
    let file = read_yaml(QUERIES);
    let queries = file.as_mapping().expect("the query file is a mapping");
    let mut metrics = BTreeMap::new();
    for (query, body) in queries {
        let query = query.as_str().expect("query names are strings");
        let columns: Vec<(String, String)> = body["metrics"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{query} has no metrics list"))
            .iter()
            .map(|entry| {
                let entry = entry.as_mapping().expect("a metric is a one-key mapping");
                assert_eq!(entry.len(), 1, "{query}: a metric is a one-key mapping");
                let (column, spec) = entry.iter().next().expect("one key");
                let column = column.as_str().expect("column names are strings");
                let usage = spec["usage"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{query}.{column} has no usage"));
                (column.to_string(), usage.to_string())
            })
            .collect();
        let mut labels: BTreeSet<String> = columns
            .iter()
            .filter(|(_, usage)| usage == "LABEL")
            .map(|(column, _)| column.clone())
            .collect();
        labels.insert(EXPORTER_LABEL.to_string());
        for (column, usage) in columns.iter().filter(|(_, usage)| usage != "LABEL") {
            let name = format!("{query}_{column}");
            let metric = Metric {
                query: query.to_string(),
                usage: usage.clone(),
                labels: labels.clone(),
            };
            if let Some(other) = metrics.insert(name.clone(), metric) {
                panic!("{name} is exported by both {} and {query}", other.query);
            }
        }
    }
    assert!(!metrics.is_empty(), "{QUERIES} defines no metric");
    metrics
}

/// One alerting rule of the rule file.
struct Alert {
    name: String,
    expr: String,
    annotations: Vec<(String, String)>,
}

fn alerts() -> Vec<Alert> {
    let file = read_yaml(RULES);
    let groups = file["groups"].as_sequence().expect("groups");
    let names: Vec<&str> = groups.iter().filter_map(|g| g["name"].as_str()).collect();
    assert_eq!(names, ["pubjson"], "{RULES}: one group, pubjson");
    let mut alerts = Vec::new();
    for rule in groups[0]["rules"].as_sequence().expect("rules") {
        let name = rule["alert"]
            .as_str()
            .unwrap_or_else(|| panic!("{RULES}: a rule without `alert`: {rule:?}"));
        let annotations = rule["annotations"]
            .as_mapping()
            .unwrap_or_else(|| panic!("{name} has no annotations"))
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().expect("annotation name").to_string(),
                    v.as_str().expect("annotation text").to_string(),
                )
            })
            .collect();
        alerts.push(Alert {
            name: name.to_string(),
            expr: rule["expr"].as_str().expect("expr").to_string(),
            annotations,
        });
    }
    alerts
}

/// A selector's metric name, from `name{...}` or `{__name__="name"}`.
fn selector_name(name: &Option<String>, matchers: &Matchers) -> Option<String> {
    name.clone().or_else(|| {
        matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && m.op == MatchOp::Equal)
            .map(|m| m.value.clone())
    })
}

/// The label names a selector matches on (but `__name__`).
fn matcher_labels(matchers: &Matchers) -> BTreeSet<String> {
    matchers
        .matchers
        .iter()
        .chain(matchers.or_matchers.iter().flatten())
        .map(|m| m.name.clone())
        .filter(|name| name != "__name__")
        .collect()
}

/// What an expression reads: its selectors and the labels named by `on`,
/// `ignoring`, `by` and `without`.
#[derive(Default)]
struct Reads {
    selectors: Vec<VectorSelector>,
    grouping_labels: BTreeSet<String>,
}

impl ExprVisitor for Reads {
    type Error = std::convert::Infallible;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, Self::Error> {
        let modifier_labels = |m: &LabelModifier| m.labels().labels.clone();
        match expr {
            Expr::VectorSelector(vs) => self.selectors.push(vs.clone()),
            Expr::MatrixSelector(ms) => self.selectors.push(ms.vs.clone()),
            Expr::Binary(b) => {
                if let Some(m) = b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                    self.grouping_labels.extend(modifier_labels(m));
                }
            }
            Expr::Aggregate(a) => {
                if let Some(m) = &a.modifier {
                    self.grouping_labels.extend(modifier_labels(m));
                }
            }
            _ => {}
        }
        Ok(true)
    }
}

fn reads(alert: &Alert) -> Reads {
    let expr = parser::parse(&alert.expr)
        .unwrap_or_else(|e| panic!("{}: expr does not parse: {e}\n{}", alert.name, alert.expr));
    let mut reads = Reads::default();
    walk_expr(&mut reads, &expr).expect("infallible");
    reads
}

/// None of these needs a server: scripts/test.sh runs them once, not once
/// per PostgreSQL major (`version_independent::` in their names).
mod version_independent {
    use super::*;

    #[test]
    fn promtool_check_rules() {
        let (ok, output) = promtool(&["check", "rules", RULES]);
        assert!(ok, "promtool rejects the alerting rules:\n{output}");
    }

    #[test]
    fn promtool_test_rules() {
        let (ok, output) = promtool(&["test", "rules", RULE_TESTS]);
        assert!(ok, "the alerting rules fail their unit tests:\n{output}");
    }

    /// Every metric an alert reads (and every `pubjson_*` metric its
    /// annotations name) is exported by the query file, with the labels its
    /// selectors, `on (...)` clauses and `$labels.x` annotations use. A
    /// renamed metric or label would otherwise leave an alert that never fires.
    #[test]
    fn alerts_read_exported_metrics_and_labels() {
        let metrics = exported_metrics();
        let metric_word = Regex::new(r"\bpubjson_[a-z0-9_]+").expect("regex");
        let label_ref = Regex::new(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)").expect("regex");
        let alerts = alerts();
        assert!(!alerts.is_empty(), "{RULES} has no alert");
        let mut problems = Vec::new();
        let mut used = BTreeSet::new();
        for alert in &alerts {
            let reads = reads(alert);
            // The labels the alert's series carry (both sides of a binary
            // operation have the same here), plus the rule's own.
            let mut labels = BTreeSet::new();
            if reads.selectors.is_empty() {
                problems.push(format!("{}: reads no metric", alert.name));
            }
            for vs in &reads.selectors {
                let Some(name) = selector_name(&vs.name, &vs.matchers) else {
                    problems.push(format!("{}: a selector without a metric name", alert.name));
                    continue;
                };
                let Some(metric) = metrics.get(&name) else {
                    problems.push(format!(
                        "{}: reads {name}, which {QUERIES} does not export",
                        alert.name
                    ));
                    continue;
                };
                used.insert(name.clone());
                for label in matcher_labels(&vs.matchers).difference(&metric.labels) {
                    problems.push(format!(
                        "{}: matches label {label} of {name}, which has only {:?}",
                        alert.name, metric.labels
                    ));
                }
                labels.extend(metric.labels.iter().cloned());
            }
            for label in reads.grouping_labels.difference(&labels) {
                problems.push(format!(
                    "{}: groups or matches on label {label}, which its metrics do not have",
                    alert.name
                ));
            }
            for (key, text) in &alert.annotations {
                for word in metric_word.find_iter(text) {
                    if !metrics.contains_key(word.as_str()) {
                        problems.push(format!(
                            "{}: annotation {key} names {}, which {QUERIES} does not export",
                            alert.name,
                            word.as_str()
                        ));
                    }
                }
                for label in label_ref.captures_iter(text) {
                    if !labels.contains(&label[1]) {
                        problems.push(format!(
                            "{}: annotation {key} prints $labels.{}, which its metrics do not have",
                            alert.name, &label[1]
                        ));
                    }
                }
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));

        // The conditions issue 15 names are all watched.
        for needed in [
            "pubjson_pending_transaction_age_seconds",
            "pubjson_pending_transaction_retained_wal_bytes",
            "pubjson_slot_retained_wal_bytes",
            "pubjson_slot_state_info",
            "pubjson_subscription_disabled_by_error",
            "pubjson_subscription_apply_errors_total",
            "pubjson_standby_query_time_left_seconds",
            "pubjson_standby_replay_conflict_waiting",
        ] {
            assert!(used.contains(needed), "no alert reads {needed}");
        }
        // increase() is only meaningful on counters.
        let counter = &metrics["pubjson_subscription_apply_errors_total"];
        assert_eq!(counter.usage, "COUNTER", "{counter:?}");
    }

    /// The unit tests cover every alert both ways (a case where it fires and
    /// one where it must not), name no alert the rules lack, and feed series
    /// that look like the exporter's: an exported metric with exactly its
    /// labels.
    #[test]
    fn unit_tests_cover_every_alert_with_exporter_series() {
        let metrics = exported_metrics();
        let file = read_yaml(RULE_TESTS);
        let alert_names: BTreeSet<String> = alerts().into_iter().map(|a| a.name).collect();
        let mut fires = BTreeSet::new();
        let mut quiet = BTreeSet::new();
        let mut problems = Vec::new();
        for case in file["tests"].as_sequence().expect("tests") {
            let case_name = case["name"].as_str().unwrap_or("(unnamed)");
            for series in case["input_series"].as_sequence().expect("input_series") {
                let text = series["series"].as_str().expect("series");
                let selector = match parser::parse(text) {
                    Ok(Expr::VectorSelector(vs)) => vs,
                    other => {
                        problems.push(format!("{case_name}: {text} is not a series: {other:?}"));
                        continue;
                    }
                };
                let Some(name) = selector_name(&selector.name, &selector.matchers) else {
                    problems.push(format!("{case_name}: {text} has no metric name"));
                    continue;
                };
                let Some(metric) = metrics.get(&name) else {
                    problems.push(format!("{case_name}: {name} is not exported by {QUERIES}"));
                    continue;
                };
                if selector
                    .matchers
                    .matchers
                    .iter()
                    .any(|m| m.op != MatchOp::Equal)
                {
                    problems.push(format!(
                        "{case_name}: {text}: series labels are `name=\"value\"`"
                    ));
                }
                let labels = matcher_labels(&selector.matchers);
                if labels != metric.labels {
                    problems.push(format!(
                        "{case_name}: {text} has labels {labels:?}, the exporter emits {:?}",
                        metric.labels
                    ));
                }
            }
            for check in case["alert_rule_test"]
                .as_sequence()
                .expect("alert_rule_test")
            {
                let alert = check["alertname"].as_str().expect("alertname").to_string();
                if !alert_names.contains(&alert) {
                    problems.push(format!("{case_name}: tests {alert}, which {RULES} lacks"));
                }
                let expected = check["exp_alerts"].as_sequence().map_or(0, Vec::len);
                if expected == 0 {
                    quiet.insert(alert);
                } else {
                    fires.insert(alert);
                }
            }
        }
        for alert in &alert_names {
            if !fires.contains(alert) {
                problems.push(format!("{alert}: no case where it fires"));
            }
            if !quiet.contains(alert) {
                problems.push(format!("{alert}: no case where it must stay quiet"));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
