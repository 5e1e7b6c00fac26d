//! Credentials in NATS_URL reach the server (async-nats by itself ignores a URL's user info):
//! against a nats-server of this test's own that requires a user and password.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result};
use bus::{Bus, Namespace, StreamSettings};

/// A nats-server requiring `forgesync` / `p@ss:word` (the binary `cargo xtask test` names),
/// killed on drop.
struct AuthNats(Child, std::path::PathBuf);

impl AuthNats {
    fn start(port: u16) -> Result<AuthNats> {
        let bin = std::env::var("FORGESYNC_TEST_NATS_SERVER").context(
            "FORGESYNC_TEST_NATS_SERVER is not set: run the tests through `cargo xtask test`",
        )?;
        let store = std::env::temp_dir().join(format!("fs-auth-{port}-{}", std::process::id()));
        let child = Command::new(bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .args(["--user", "forgesync", "--pass", "p@ss:word"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nats-server")?;
        Ok(AuthNats(child, store))
    }
}

impl Drop for AuthNats {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// Whether a bus on `url` can declare its streams within a few seconds.
async fn declares(url: &str) -> bool {
    let Ok(bus) = Bus::connect(
        url,
        None,
        Namespace::new("auth").unwrap(),
        StreamSettings::default(),
    )
    .await
    else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), bus.declare_streams()).await,
        Ok(Ok(()))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_s_user_and_password_authenticate() -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let _nats = AuthNats::start(port)?;
    // Percent-encoded, as a URL must carry `@` and `:` in a password.
    assert!(declares(&format!("nats://forgesync:p%40ss%3Aword@127.0.0.1:{port}")).await);
    assert!(!declares(&format!("nats://forgesync:wrong@127.0.0.1:{port}")).await);
    assert!(!declares(&format!("nats://127.0.0.1:{port}")).await);
    Ok(())
}
