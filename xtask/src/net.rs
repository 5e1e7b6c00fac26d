//! Small networking helpers shared by the Postgres and NATS checks.

use std::net::TcpListener;

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Splits `host[:port]` or `[v6]:port`, with `default_port` when none is given.
pub fn split_host_port(hostport: &str, default_port: u16) -> anyhow::Result<(String, u16)> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| anyhow::anyhow!("unclosed [ in {hostport:?}"))?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    let port = match port {
        Some(port) => port
            .parse()
            .map_err(|_| anyhow::anyhow!("bad port {port:?} in {hostport:?}"))?,
        None => default_port,
    };
    let host = if host.is_empty() { "localhost" } else { host };
    Ok((host.to_owned(), port))
}

/// Decodes `%XX` escapes, as used in URL user names and paths.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .filter(|_| bytes[i] == b'%')
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_host_and_port() {
        assert_eq!(split_host_port("h:42", 1).unwrap(), ("h".into(), 42));
        assert_eq!(split_host_port("h", 1).unwrap(), ("h".into(), 1));
        assert_eq!(split_host_port("[::1]:42", 1).unwrap(), ("::1".into(), 42));
        assert_eq!(split_host_port("", 7).unwrap(), ("localhost".into(), 7));
        assert!(split_host_port("h:x", 1).is_err());
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%40b%zz%"), "a@b%zz%");
    }
}
