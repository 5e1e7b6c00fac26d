//! A nats-server of a test's own, for what the shared server cannot show: an outage, credentials,
//! JetStream off, a small `max_payload`. It runs the binary `cargo xtask test` names in
//! `FORGESYNC_TEST_NATS_SERVER`, from a config file written per server, and is killed on drop.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// How a test's own server is set up.
#[derive(Debug, Clone)]
pub struct NatsSetup {
    /// The port to listen on; [`OwnNats::free_port`] picks one before the server exists (an
    /// outage test points a service at it first).
    pub port: u16,
    /// Whether JetStream runs.
    pub jetstream: bool,
    /// Further lines of nats-server configuration (`max_payload: 64KB`, an `authorization`
    /// block, ...).
    pub config: String,
}

impl NatsSetup {
    /// JetStream on a free port, nothing else.
    pub fn jetstream() -> Result<NatsSetup> {
        Ok(NatsSetup {
            port: OwnNats::free_port()?,
            jetstream: true,
            config: String::new(),
        })
    }
}

/// A running nats-server of this test's own; killed, and its store removed, on drop.
pub struct OwnNats {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl OwnNats {
    /// A port nothing listens on right now.
    pub fn free_port() -> Result<u16> {
        let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        Ok(l.local_addr()?.port())
    }

    /// The URL of a server at `port` (it may not be running yet).
    pub fn url_of(port: u16) -> String {
        format!("nats://127.0.0.1:{port}")
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(setup: &NatsSetup) -> Result<OwnNats> {
        let bin = std::env::var("FORGESYNC_TEST_NATS_SERVER").context(
            "FORGESYNC_TEST_NATS_SERVER is not set: run the tests through `cargo xtask test`",
        )?;
        let dir = std::env::temp_dir().join(format!("fs-nats-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let mut conf = format!("listen: 127.0.0.1:{}\n", setup.port);
        if setup.jetstream {
            conf.push_str(&format!(
                "jetstream {{\n  store_dir: \"{}\"\n}}\n",
                dir.join("store").display()
            ));
        }
        conf.push_str(&setup.config);
        conf.push('\n');
        let conf_path = dir.join("nats.conf");
        std::fs::write(&conf_path, conf)?;
        let log = std::fs::File::create(dir.join("nats.log"))?;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting nats-server")?;
        let mut server = OwnNats {
            child,
            dir,
            port: setup.port,
        };
        server.wait_listening()?;
        Ok(server)
    }

    fn wait_listening(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(self.dir.join("nats.log")).unwrap_or_default();
                bail!("nats-server exited during start ({status}): {log}");
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("nats-server did not listen on {addr} within 15 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        Self::url_of(self.port)
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
