//! Requests reqwest cannot send: a body shorter than the length it declares.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// POSTs to `url` a request declaring a `Content-Length` of `declared` bytes but sending only
/// `sent`, and returns the answer's status and body. For refusals of bodies past a limit: a
/// client that sends the whole oversize body races the server, which answers once it has read
/// past its limit and closes with the rest unread; the reset that unread rest causes can reach
/// the client before the answer does, and the answer is lost. Sending no more than the server
/// reads leaves nothing to reset.
pub async fn post_declaring(
    url: &str,
    headers: &[(&str, String)],
    declared: usize,
    sent: &[u8],
) -> Result<(StatusCode, String)> {
    let mut all = vec![("Connection", "close".to_owned())];
    all.extend(headers.iter().cloned());
    let exchange = async {
        let mut stream = open_post(url, &all, declared, sent).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .context("no answer within 10 s")??;
    parse(&answer)
}

/// Connects to `url`'s server and writes a POST head declaring a `Content-Length` of `declared`
/// bytes, with `headers`, then `sent` of the body; the connection stays open for the caller to
/// read the answer from (or to send more, or to hold).
pub async fn open_post(
    url: &str,
    headers: &[(&str, String)],
    declared: usize,
    sent: &[u8],
) -> Result<tokio::net::TcpStream> {
    let url = reqwest::Url::parse(url)?;
    let host = url.host_str().context("the url names no host")?;
    let port = url
        .port_or_known_default()
        .context("the url names no port")?;
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let mut head =
        format!("POST {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {declared}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(sent).await?;
    Ok(stream)
}

/// The status and body of one HTTP/1.1 answer (plain or chunked).
fn parse(answer: &[u8]) -> Result<(StatusCode, String)> {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer has no end of headers")?;
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut body = &answer[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .context("the answer has no status line")?;
    let status = StatusCode::from_u16(status.parse()?)?;
    let chunked = lines.any(|line| {
        line.to_ascii_lowercase()
            .replace(' ', "")
            .starts_with("transfer-encoding:chunked")
    });
    if !chunked {
        return Ok((status, String::from_utf8_lossy(body).into_owned()));
    }
    let mut text = Vec::new();
    loop {
        let end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk has no size line")?;
        let size = usize::from_str_radix(std::str::from_utf8(&body[..end])?.trim(), 16)?;
        if size == 0 {
            return Ok((status, String::from_utf8_lossy(&text).into_owned()));
        }
        let chunk = body
            .get(end + 2..end + 2 + size)
            .context("a chunk is cut short")?;
        text.extend_from_slice(chunk);
        body = body
            .get(end + 2 + size + 2..)
            .context("a chunk has no end")?;
        if body.is_empty() {
            bail!("the chunked answer has no last chunk");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn plain_and_chunked_answers_parse() {
        let (s, b) =
            parse(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((s.as_u16(), b.as_str()), (413, "{}"));
        let (s, b) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((s.as_u16(), b.as_str()), (200, "abcde"));
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
