//! The shared sync flags as github-sync, gitlab-sync and outline-sync spell them. Deployments set
//! these variables (the Helm values, docs, the services' tests and `forgesync-local` name them), so
//! a flag or variable that changes its spelling, or a default that moves, fails here. The tables
//! are written out letter by letter on purpose: they are what operators type.

use std::collections::BTreeMap;
use std::process::Command;

use clap::{Args as _, FromArgMatches as _};
use github_sync::GithubFlags;
use gitlab_sync::GitlabFlags;
use outline_sync::OutlineFlags;
use sync_engine::{BackfillArgs, BackfillFlags, SyncArgs, SyncFlags};

/// One shared flag of one service: its field, its long flag, its variable (also its value name)
/// and its default (`None`: unset).
type Spelling = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
);

#[rustfmt::skip]
const GITHUB: &[Spelling] = &[
    ("reconcile_cron", "reconcile-cron", "FORGESYNC_GITHUB_RECONCILE_CRON", Some("0 0 3 * * *")),
    ("backfill_cron", "backfill-cron", "FORGESYNC_GITHUB_BACKFILL_CRON", Some("off")),
    ("reconcile_cooldown_secs", "github-reconcile-cooldown", "FORGESYNC_GITHUB_RECONCILE_COOLDOWN", Some("43200")),
    ("backfill_max_passes", "github-backfill-max-passes", "FORGESYNC_GITHUB_BACKFILL_MAX_PASSES", None),
    ("backfill_backoff_ms", "github-backfill-backoff-ms", "FORGESYNC_GITHUB_BACKFILL_BACKOFF_MS", Some("5000")),
    ("backfill_max_backoff_ms", "github-backfill-max-backoff-ms", "FORGESYNC_GITHUB_BACKFILL_MAX_BACKOFF_MS", Some("300000")),
    ("page_size", "page-size", "FORGESYNC_GITHUB_PAGE_SIZE", Some("100")),
    ("page_cap", "page-cap", "FORGESYNC_GITHUB_PAGE_CAP", Some("10000")),
    ("request_timeout_ms", "github-request-timeout-ms", "FORGESYNC_GITHUB_REQUEST_TIMEOUT_MS", Some("30000")),
    ("job_concurrency", "job-concurrency", "FORGESYNC_GITHUB_JOB_CONCURRENCY", Some("2")),
    ("webhook_concurrency", "webhook-concurrency", "FORGESYNC_GITHUB_WEBHOOK_CONCURRENCY", Some("16")),
    ("filter_refresh_ms", "filter-refresh-ms", "FORGESYNC_GITHUB_FILTER_REFRESH_MS", Some("5000")),
    ("clock_skew_secs", "clock-skew-secs", "FORGESYNC_GITHUB_CLOCK_SKEW_SECS", Some("300")),
    ("job_lease_secs", "job-lease", "FORGESYNC_JOB_LEASE", Some("60")),
    ("workspace_jobs", "workspace-jobs", "FORGESYNC_WORKSPACE_JOBS", Some("1")),
];

// GitLab differs from GitHub in its prefix and, on purpose, in the BACKFILL schedule's default
// (its cycle drains the batches requested backfills left pending).
#[rustfmt::skip]
const GITLAB: &[Spelling] = &[
    ("reconcile_cron", "reconcile-cron", "FORGESYNC_GITLAB_RECONCILE_CRON", Some("0 0 3 * * *")),
    ("backfill_cron", "backfill-cron", "FORGESYNC_GITLAB_BACKFILL_CRON", Some("0 */5 * * * *")),
    ("reconcile_cooldown_secs", "gitlab-reconcile-cooldown", "FORGESYNC_GITLAB_RECONCILE_COOLDOWN", Some("43200")),
    ("backfill_max_passes", "gitlab-backfill-max-passes", "FORGESYNC_GITLAB_BACKFILL_MAX_PASSES", None),
    ("backfill_backoff_ms", "gitlab-backfill-backoff-ms", "FORGESYNC_GITLAB_BACKFILL_BACKOFF_MS", Some("5000")),
    ("backfill_max_backoff_ms", "gitlab-backfill-max-backoff-ms", "FORGESYNC_GITLAB_BACKFILL_MAX_BACKOFF_MS", Some("300000")),
    ("page_size", "page-size", "FORGESYNC_GITLAB_PAGE_SIZE", Some("100")),
    ("page_cap", "page-cap", "FORGESYNC_GITLAB_PAGE_CAP", Some("10000")),
    ("request_timeout_ms", "gitlab-request-timeout-ms", "FORGESYNC_GITLAB_REQUEST_TIMEOUT_MS", Some("30000")),
    ("job_concurrency", "job-concurrency", "FORGESYNC_GITLAB_JOB_CONCURRENCY", Some("2")),
    ("webhook_concurrency", "webhook-concurrency", "FORGESYNC_GITLAB_WEBHOOK_CONCURRENCY", Some("16")),
    ("filter_refresh_ms", "filter-refresh-ms", "FORGESYNC_GITLAB_FILTER_REFRESH_MS", Some("5000")),
    ("clock_skew_secs", "clock-skew-secs", "FORGESYNC_GITLAB_CLOCK_SKEW_SECS", Some("300")),
    ("job_lease_secs", "job-lease", "FORGESYNC_JOB_LEASE", Some("60")),
    ("workspace_jobs", "workspace-jobs", "FORGESYNC_WORKSPACE_JOBS", Some("1")),
];

// Outline has no BACKFILL: its spellings without those rows (defaults as the shared flags').
#[rustfmt::skip]
const OUTLINE: &[Spelling] = &[
    ("reconcile_cron", "reconcile-cron", "FORGESYNC_OUTLINE_RECONCILE_CRON", Some("0 */5 * * * *")),
    ("reconcile_cooldown_secs", "outline-reconcile-cooldown", "FORGESYNC_OUTLINE_RECONCILE_COOLDOWN", Some("21600")),
    ("page_size", "page-size", "FORGESYNC_OUTLINE_PAGE_SIZE", Some("100")),
    ("page_cap", "page-cap", "FORGESYNC_OUTLINE_PAGE_CAP", Some("10000")),
    ("request_timeout_ms", "outline-request-timeout-ms", "FORGESYNC_OUTLINE_REQUEST_TIMEOUT_MS", Some("30000")),
    ("job_concurrency", "job-concurrency", "FORGESYNC_OUTLINE_JOB_CONCURRENCY", Some("2")),
    ("webhook_concurrency", "webhook-concurrency", "FORGESYNC_OUTLINE_WEBHOOK_CONCURRENCY", Some("16")),
    ("filter_refresh_ms", "filter-refresh-ms", "FORGESYNC_OUTLINE_FILTER_REFRESH_MS", Some("5000")),
    ("clock_skew_secs", "clock-skew-secs", "FORGESYNC_OUTLINE_CLOCK_SKEW_SECS", Some("300")),
    ("job_lease_secs", "job-lease", "FORGESYNC_JOB_LEASE", Some("60")),
    ("workspace_jobs", "workspace-jobs", "FORGESYNC_WORKSPACE_JOBS", Some("1")),
];

/// Set in the child process [`reads_each_services_variables_and_defaults`] starts: what it checks.
const CHILD: &str = "SYNC_FLAGS_TEST_CHILD";

/// A value of `field` that is no default and differs per `service` (0 or 1) and per field. Both
/// services read the one job lease variable and the one workspace jobs variable, so their values
/// are the same for both.
fn value(service: u64, index: usize, field: &str) -> String {
    match field {
        "job_lease_secs" => "77".to_owned(),
        "workspace_jobs" => "3".to_owned(),
        f if f.ends_with("_cron") => format!("0 {index} {} * * *", 4 + service),
        _ => (10 + 40 * service + index as u64).to_string(),
    }
}

/// The table's values to set for one service: (field, long flag, variable, value).
fn settings(
    table: &[Spelling],
    service: u64,
) -> Vec<(&'static str, &'static str, &'static str, String)> {
    table
        .iter()
        .enumerate()
        .map(|(i, (field, long, env, _))| (*field, *long, *env, value(service, i, field)))
        .collect()
}

fn parse<F: SyncFlags>(args: &[String]) -> Result<SyncArgs<F>, clap::Error> {
    let matches = SyncArgs::<F>::augment_args(clap::Command::new("probe").no_binary_name(true))
        .try_get_matches_from(args)?;
    SyncArgs::<F>::from_arg_matches(&matches)
}

/// What `args` holds, by field; an unset optional field is absent.
fn parsed<F: SyncFlags<Backfill = BackfillArgs<F>> + BackfillFlags>(
    args: &SyncArgs<F>,
) -> BTreeMap<&'static str, String> {
    let mut fields = BTreeMap::from([
        ("reconcile_cron", args.reconcile_cron.clone()),
        ("backfill_cron", args.backfill.backfill_cron.clone()),
        (
            "reconcile_cooldown_secs",
            args.reconcile_cooldown_secs.to_string(),
        ),
        (
            "backfill_backoff_ms",
            args.backfill.backfill_backoff_ms.to_string(),
        ),
        (
            "backfill_max_backoff_ms",
            args.backfill.backfill_max_backoff_ms.to_string(),
        ),
        ("page_size", args.page_size.to_string()),
        ("page_cap", args.page_cap.to_string()),
        ("request_timeout_ms", args.request_timeout_ms.to_string()),
        ("job_concurrency", args.job_concurrency.to_string()),
        ("webhook_concurrency", args.webhook_concurrency.to_string()),
        ("filter_refresh_ms", args.filter_refresh_ms.to_string()),
        ("clock_skew_secs", args.clock_skew_secs.to_string()),
        ("job_lease_secs", args.job_lease_secs.to_string()),
        ("workspace_jobs", args.workspace_jobs.to_string()),
    ]);
    if let Some(passes) = args.backfill.backfill_max_passes {
        fields.insert("backfill_max_passes", passes.to_string());
    }
    fields
}

/// Each of the service's shared arguments as clap declares it: (field, long flag, variable), and
/// whether its value name is its variable.
fn declared<F: SyncFlags>() -> Vec<(String, String, String, bool)> {
    let command = SyncArgs::<F>::augment_args(clap::Command::new("probe"));
    command
        .get_arguments()
        .map(|arg| {
            let env = arg
                .get_env()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_default();
            let value_name_is_env = arg
                .get_value_names()
                .is_some_and(|names| names.iter().any(|n| *n == env));
            (
                arg.get_id().to_string(),
                arg.get_long().unwrap_or_default().to_owned(),
                env,
                value_name_is_env,
            )
        })
        .collect()
}

fn assert_spelled<F: SyncFlags>(service: &str, table: &[Spelling]) {
    let mut want: Vec<_> = table
        .iter()
        .map(|(field, long, env, _)| (field.to_string(), long.to_string(), env.to_string(), true))
        .collect();
    let mut got = declared::<F>();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{service}'s shared flags are spelled otherwise");
}

#[test]
fn each_service_keeps_its_flag_and_variable_spellings() {
    assert_spelled::<GithubFlags>("github-sync", GITHUB);
    assert_spelled::<GitlabFlags>("gitlab-sync", GITLAB);
    assert_spelled::<OutlineFlags>("outline-sync", OUTLINE);
    // Outline's defaults, as clap declares them (no BACKFILL, so not through `parsed`).
    let command = SyncArgs::<OutlineFlags>::augment_args(clap::Command::new("probe"));
    for (field, _, _, default) in OUTLINE {
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == *field)
            .unwrap_or_else(|| panic!("outline-sync has no {field}"));
        let got: Vec<_> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_str())
            .collect();
        assert_eq!(
            got,
            default.iter().map(|d| Some(*d)).collect::<Vec<_>>(),
            "{field}"
        );
    }
}

sync_engine::sync_flags! {
    /// A vendor that never backfills (Slack's shape): it declares no `backfill_cron`.
    struct ChannelFlags {
        env: "CHANNEL",
        flag: "channel",
        vendor: "Channel",
        scope: "channel",
        reconcile_cron: "0 0 4 * * *",
        reconcile_cooldown: 43200,
    }
}

/// The shared flags without the BACKFILL ones, as every service spells them (GitHub's table
/// minus its backfill rows, respelled for `CHANNEL`).
fn without_backfill() -> Vec<(String, String, String, Option<String>)> {
    GITHUB
        .iter()
        .filter(|(field, ..)| !field.starts_with("backfill"))
        .map(|(field, long, env, default)| {
            (
                field.to_string(),
                long.replace("github", "channel"),
                env.replace("GITHUB", "CHANNEL"),
                default.map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn a_vendor_that_does_not_backfill_has_no_backfill_flag_and_no_backfill_schedule() {
    let mut want: Vec<_> = without_backfill()
        .into_iter()
        .map(|(field, long, env, _)| (field, long, env, true))
        .collect();
    let mut got = declared::<ChannelFlags>();
    want.sort();
    got.sort();
    assert_eq!(
        got, want,
        "a vendor without BACKFILL has only the other flags"
    );
    assert!(
        parse::<ChannelFlags>(&["--backfill-cron=0 0 5 * * *".to_owned()]).is_err(),
        "--backfill-cron is not a flag of a vendor that does not backfill"
    );
    let args = parse::<ChannelFlags>(&[]).expect("the defaults parse");
    let schedules: Vec<_> = args
        .job_schedules()
        .iter()
        .map(|s| (s.job_type, s.cron.to_owned(), s.variable))
        .collect();
    assert_eq!(
        schedules,
        vec![(
            store::entity::JobType::Reconciliation,
            "0 0 4 * * *".to_owned(),
            "FORGESYNC_CHANNEL_RECONCILE_CRON"
        )]
    );
    // Both forges keep their BACKFILL schedule.
    let github = parse::<GithubFlags>(&[]).expect("the defaults parse");
    let types: Vec<_> = github.job_schedules().iter().map(|s| s.job_type).collect();
    assert_eq!(
        types,
        [
            store::entity::JobType::Reconciliation,
            store::entity::JobType::Backfill
        ]
    );
}

fn assert_flags_parse<F: SyncFlags<Backfill = BackfillArgs<F>> + BackfillFlags>(
    service: &str,
    table: &[Spelling],
    index: u64,
) {
    let set = settings(table, index);
    let args: Vec<String> = set
        .iter()
        .map(|(_, long, _, v)| format!("--{long}={v}"))
        .collect();
    let got = parse::<F>(&args).unwrap_or_else(|e| panic!("{service}: {e}"));
    let want: BTreeMap<_, _> = set.into_iter().map(|(field, _, _, v)| (field, v)).collect();
    assert_eq!(parsed(&got), want, "{service}: flags {args:?}");
}

#[test]
fn each_service_reads_its_flags() {
    assert_flags_parse::<GithubFlags>("github-sync", GITHUB, 0);
    assert_flags_parse::<GitlabFlags>("gitlab-sync", GITLAB, 1);
    // The other service's vendor-named flags are unknown here.
    let foreign = parse::<GithubFlags>(&["--gitlab-reconcile-cooldown=5".to_owned()]);
    assert!(foreign.is_err(), "github-sync took a gitlab-sync flag");
}

/// In the child: each service parses nothing but the environment (`CHILD` says which was set).
fn child_checks(mode: &str) {
    for (service, table, index, got) in [
        (
            "github-sync",
            GITHUB,
            0,
            parse::<GithubFlags>(&[]).map(|a| parsed(&a)),
        ),
        (
            "gitlab-sync",
            GITLAB,
            1,
            parse::<GitlabFlags>(&[]).map(|a| parsed(&a)),
        ),
    ] {
        let got = got.unwrap_or_else(|e| panic!("{service}: {e}"));
        let want: BTreeMap<_, _> = match mode {
            "defaults" => table
                .iter()
                .filter_map(|(field, _, _, default)| Some((*field, (*default)?.to_owned())))
                .collect(),
            _ => settings(table, index)
                .into_iter()
                .map(|(f, _, _, v)| (f, v))
                .collect(),
        };
        assert_eq!(got, want, "{service} from the environment ({mode})");
    }
}

/// clap reads the variables from the process environment, which a test may not change (setting
/// it is `unsafe`, and other tests share it): each case runs this test again in a child process
/// with an environment of its own. Both services' variables are set at once, with different
/// values, so each must read its own.
#[test]
fn reads_each_services_variables_and_defaults() {
    if let Ok(mode) = std::env::var(CHILD) {
        child_checks(&mode);
        return;
    }
    let both: Vec<(&str, String)> = settings(GITHUB, 0)
        .into_iter()
        .chain(settings(GITLAB, 1))
        .map(|(_, _, env, v)| (env, v))
        .collect();
    for (mode, vars) in [("defaults", Vec::new()), ("variables", both)] {
        let out = Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "reads_each_services_variables_and_defaults",
                "--exact",
                "--nocapture",
            ])
            .env_clear()
            .env(CHILD, mode)
            .envs(vars)
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        // A filter that matched no test would pass too: the child must have run this one.
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{mode}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
