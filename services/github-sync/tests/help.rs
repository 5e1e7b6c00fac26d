//! `--help` never shows a secret taken from the environment.

#[test]
fn help_hides_secret_env_values() {
    testkit::assert_help_hides_secrets(
        env!("CARGO_BIN_EXE_github-sync"),
        &["DATABASE_URL", "NATS_URL", "FORGESYNC_SECRET_KEY"],
    );
}
