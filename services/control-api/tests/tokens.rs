//! Bearer tokens as an attacker forges them: each is refused with 401 before any handler runs.
//! Valid tokens come as HS256 under the shared secret and as RS256/ES256 under a JWKS key,
//! from a file or from a URL.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::TestEnv;

const RSA_PEM: &[u8] = include_bytes!("fixtures/jwt/rsa.pem");
const RSA_PUBLIC_PEM: &[u8] = include_bytes!("fixtures/jwt/rsa.pub.pem");
const EC_PEM: &[u8] = include_bytes!("fixtures/jwt/ec.pem");
const JWKS: &str = include_str!("fixtures/jwt/jwks.json");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims of a valid operator token, to be spoiled one field at a time.
fn claims() -> Value {
    let now = now();
    json!({
        "sub": "mallory", "role": "admin", "operator": true,
        "iss": testkit::JWT_ISSUER, "aud": testkit::JWT_AUDIENCE,
        "iat": now, "exp": now + 600,
    })
}

fn hs256(claims: &Value) -> String {
    sign(
        Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(testkit::JWT_SECRET.as_bytes()).unwrap(),
    )
}

fn with_kid(alg: Algorithm, kid: &str) -> Header {
    let mut h = Header::new(alg);
    h.kid = Some(kid.to_owned());
    h
}

fn rs256(kid: &str, claims: &Value) -> String {
    sign(
        with_kid(Algorithm::RS256, kid),
        claims,
        &EncodingKey::from_rsa_pem(RSA_PEM).unwrap(),
    )
}

fn es256(kid: &str, claims: &Value) -> String {
    sign(
        with_kid(Algorithm::ES256, kid),
        claims,
        &EncodingKey::from_ec_pem(EC_PEM).unwrap(),
    )
}

fn sign(header: Header, claims: &Value, key: &EncodingKey) -> String {
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// control-api with the local HS256 secret and, when given, a JWKS source.
async fn api(env: &TestEnv, jwks: Option<String>, secret: bool) -> Result<testkit::Running> {
    let mut config = testkit::control_api_config(env.common_args());
    config.jwt_jwks = jwks;
    if !secret {
        config.jwt_secret = None;
    }
    config.jwt_max_lifetime_secs = 3600;
    testkit::spawn(config).await
}

async fn status(api: &testkit::Running, token: &str) -> Result<(StatusCode, Value)> {
    let res = reqwest::Client::new()
        .get(format!("{}/workspaces", api.url()))
        .bearer_auth(token)
        .send()
        .await?;
    let status = res.status();
    Ok((status, res.json().await.unwrap_or(Value::Null)))
}

fn jwks_file() -> Result<tempfile_path::Path> {
    tempfile_path::write(JWKS)
}

/// A file in the system temp dir, removed on drop.
mod tempfile_path {
    pub struct Path(pub std::path::PathBuf);

    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    pub fn write(text: &str) -> anyhow::Result<Path> {
        let path =
            std::env::temp_dir().join(format!("forgesync-jwks-{}.json", uuid::Uuid::new_v4()));
        std::fs::write(&path, text)?;
        Ok(Path(path))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_tokens_are_refused() -> Result<()> {
    let env = TestEnv::new().await?;
    let file = jwks_file()?;
    let api = api(&env, Some(file.0.display().to_string()), true).await?;

    // The genuine article passes, in each algorithm.
    for token in [
        hs256(&claims()),
        rs256("rsa-1", &claims()),
        es256("ec-1", &claims()),
    ] {
        let (st, body) = status(&api, &token).await?;
        assert_eq!(st, StatusCode::OK, "{body}");
    }

    let spoil = |f: &dyn Fn(&mut Value)| {
        let mut c = claims();
        f(&mut c);
        c
    };
    let now = now();
    let forged: Vec<(&str, String)> = vec![
        (
            "wrong iss",
            hs256(&spoil(&|c| c["iss"] = json!("someone-else"))),
        ),
        (
            "wrong aud",
            hs256(&spoil(&|c| c["aud"] = json!("another-api"))),
        ),
        (
            "no iss",
            hs256(&spoil(&|c| {
                c.as_object_mut().unwrap().remove("iss");
            })),
        ),
        (
            "no aud",
            hs256(&spoil(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            })),
        ),
        (
            "expired",
            hs256(&spoil(&|c| {
                c["iat"] = json!(now - 7200);
                c["exp"] = json!(now - 3600);
            })),
        ),
        (
            "too long-lived",
            hs256(&spoil(&|c| c["exp"] = json!(now + 3601))),
        ),
        (
            "no iat",
            hs256(&spoil(&|c| {
                c.as_object_mut().unwrap().remove("iat");
            })),
        ),
        (
            "issued in the future",
            hs256(&spoil(&|c| {
                c["iat"] = json!(now + 600);
                c["exp"] = json!(now + 900);
            })),
        ),
        (
            "no operator, no workspace",
            hs256(&spoil(&|c| {
                c.as_object_mut().unwrap().remove("operator");
            })),
        ),
        (
            "operator false, no workspace",
            hs256(&spoil(&|c| c["operator"] = json!(false))),
        ),
        (
            "operator and workspace",
            hs256(&spoil(&|c| c["workspace_id"] = json!(uuid::Uuid::now_v7()))),
        ),
        ("unknown kid", rs256("rsa-2", &claims())),
        ("RS256 under the EC key", rs256("ec-1", &claims())),
        ("ES256 under the RSA key", es256("rsa-1", &claims())),
        (
            "RS256 without kid",
            sign(
                Header::new(Algorithm::RS256),
                &claims(),
                &EncodingKey::from_rsa_pem(RSA_PEM)?,
            ),
        ),
        // Alg confusion: HS256 with the RSA public key as the HMAC secret.
        (
            "HS256 signed with the RSA public key",
            sign(
                with_kid(Algorithm::HS256, "rsa-1"),
                &claims(),
                &EncodingKey::from_secret(RSA_PUBLIC_PEM).unwrap(),
            ),
        ),
        (
            "HS512",
            sign(
                Header::new(Algorithm::HS512),
                &claims(),
                &EncodingKey::from_secret(testkit::JWT_SECRET.as_bytes()).unwrap(),
            ),
        ),
        ("alg none", unsigned(&claims())),
    ];
    let mut accepted = Vec::new();
    for (what, token) in forged {
        let (st, body) = status(&api, &token).await?;
        if st != StatusCode::UNAUTHORIZED || body["error"] != "unauthorized" {
            accepted.push(format!("{what}: {st} {body}"));
        }
    }
    assert!(
        accepted.is_empty(),
        "forged tokens not refused with 401: {accepted:#?}"
    );
    api.stop().await
}

/// A token with `"alg": "none"` and no signature.
fn unsigned(claims: &Value) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
        b64.encode(serde_json::to_vec(claims).unwrap())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_secret_hs256_is_refused_even_signed_with_the_public_key() -> Result<()> {
    let env = TestEnv::new().await?;
    let file = jwks_file()?;
    let api = api(&env, Some(file.0.display().to_string()), false).await?;
    assert_eq!(
        status(&api, &rs256("rsa-1", &claims())).await?.0,
        StatusCode::OK
    );
    for token in [
        hs256(&claims()),
        sign(
            with_kid(Algorithm::HS256, "rsa-1"),
            &claims(),
            &EncodingKey::from_secret(RSA_PUBLIC_PEM).unwrap(),
        ),
    ] {
        assert_eq!(status(&api, &token).await?.0, StatusCode::UNAUTHORIZED);
    }
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_url_is_fetched_and_read_again_for_an_unknown_kid() -> Result<()> {
    let env = TestEnv::new().await?;
    // The JWKS server starts with the EC key only; the RSA key appears later (a rotation).
    let all: Value = serde_json::from_str(JWKS)?;
    let ec_only = json!({"keys": [all["keys"][1].clone()]});
    let served = std::sync::Arc::new(std::sync::Mutex::new(ec_only));
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get({
            let served = served.clone();
            move || {
                let body = served.lock().unwrap().clone();
                async move { axum::Json(body) }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/jwks.json", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let api = api(&env, Some(url), true).await?;
    assert_eq!(
        status(&api, &es256("ec-1", &claims())).await?.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&api, &rs256("rsa-1", &claims())).await?.0,
        StatusCode::UNAUTHORIZED,
        "a kid the JWKS does not hold"
    );
    *served.lock().unwrap() = all;
    // Unknown kids read the set again at most every few seconds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (st, body) = status(&api, &rs256("rsa-1", &claims())).await?;
    assert_eq!(st, StatusCode::OK, "{body}");
    api.stop().await?;
    server.abort();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_token_reaches_its_workspace_only_and_an_operator_all() -> Result<()> {
    let env = TestEnv::new().await?;
    let api = api(&env, None, true).await?;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for name in ["alpha", "bravo"] {
        let res = http
            .post(format!("{}/workspaces", api.url()))
            .bearer_auth(hs256(&claims()))
            .json(&json!({ "name": name }))
            .send()
            .await?;
        assert_eq!(res.status(), StatusCode::CREATED);
        ids.push(
            res.json::<Value>().await?["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let mut b = claims();
    b.as_object_mut().unwrap().remove("operator");
    b["workspace_id"] = json!(ids[1]);
    let (st, list) = status(&api, &hs256(&b)).await?;
    assert_eq!(st, StatusCode::OK);
    let seen: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(seen, vec![ids[1].as_str()]);
    let (_, all) = status(&api, &hs256(&claims())).await?;
    assert_eq!(all.as_array().unwrap().len(), 2);
    // A workspace token is not an operator's: it cannot create workspaces.
    let res = http
        .post(format!("{}/workspaces", api.url()))
        .bearer_auth(hs256(&b))
        .json(&json!({ "name": "charlie" }))
        .send()
        .await?;
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    api.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_configuration_stops_startup() -> Result<()> {
    let env = TestEnv::new().await?;
    // Neither a secret nor a JWKS.
    assert!(api(&env, None, false).await.is_err());
    // A JWKS that cannot be read.
    assert!(
        api(&env, Some("/nonexistent/jwks.json".into()), true)
            .await
            .is_err()
    );
    Ok(())
}
