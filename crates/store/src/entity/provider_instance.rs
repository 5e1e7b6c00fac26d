//! `provider_instance`: a vendor server (kind + URL). `None` is the kind's registered default.

use sea_orm::entity::prelude::*;

use super::ConnectionKind;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "provider_instance")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub kind: ConnectionKind,
    pub server_url: Option<String>,
    pub created_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// Normalises a server URL so that one server has one row: trims, lowercases the scheme and
/// host, drops a trailing slash. An empty URL means the default instance.
pub fn normalise_server_url(url: Option<&str>) -> Option<String> {
    let url = url?.trim().trim_end_matches('/');
    if url.is_empty() {
        return None;
    }
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
            let mut out = format!(
                "{}://{}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            );
            if !path.is_empty() {
                out.push('/');
                out.push_str(path);
            }
            Some(out)
        }
        None => Some(url.to_owned()),
    }
}

/// Checks a server URL a connection names before it is stored: https only unless the operator
/// allows plain http (the local simulators), with a host and no user info, query or fragment.
/// The error says what is wrong, for the caller.
pub fn check_server_url(url: &str, allow_insecure: bool) -> Result<(), String> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // Credentials belong in the connection's secrets, never in its URL (nor in this error).
    if authority.contains('@') {
        return Err(
            "server_url must not carry user info (user:password@); put credentials \
                    in the connection's secrets"
                .to_owned(),
        );
    }
    match scheme.to_ascii_lowercase().as_str() {
        "https" => {}
        // Vendor credentials never cross the network in the clear unless the operator says so.
        "http" if allow_insecure => {}
        "http" => {
            return Err(format!(
                "server_url {url:?} is not https; plain http is allowed only when the operator \
                 sets FORGESYNC_ALLOW_INSECURE_SERVER_URLS"
            ));
        }
        "" => {
            return Err(format!(
                "server_url {url:?} is not an absolute URL such as https://git.example.com"
            ));
        }
        other => return Err(format!("server_url scheme {other:?} is not https")),
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err(format!("server_url {url:?} names no host"));
    }
    if url.contains(['?', '#']) || url.chars().any(char::is_whitespace) {
        return Err(format!(
            "server_url {url:?} must be a plain origin and path, without spaces, query or fragment"
        ));
    }
    Ok(())
}

/// Finds or creates the row for `(kind, url)`; safe under concurrent callers.
pub async fn ensure<C: ConnectionTrait>(
    db: &C,
    kind: ConnectionKind,
    server_url: Option<&str>,
) -> Result<Model, DbErr> {
    let url = normalise_server_url(server_url);
    let find = || {
        let mut q = Entity::find().filter(Column::Kind.eq(kind));
        q = match &url {
            Some(u) => q.filter(Column::ServerUrl.eq(u.clone())),
            None => q.filter(Column::ServerUrl.is_null()),
        };
        q
    };
    if let Some(found) = find().one(db).await? {
        return Ok(found);
    }
    // Insert-or-ignore against the unique index, then read: never check-then-insert.
    let stmt = sea_orm::Statement::from_sql_and_values(
        sea_orm::DbBackend::Postgres,
        "INSERT INTO provider_instance (id, kind, server_url) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        [
            Uuid::now_v7().into(),
            kind.to_value().into(),
            url.clone().into(),
        ],
    );
    db.execute_raw(stmt).await?;
    find()
        .one(db)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound("provider_instance after insert".into()))
}

#[cfg(test)]
mod tests {
    use super::{check_server_url, normalise_server_url};

    #[test]
    fn server_urls_are_https_without_user_info_unless_allowed() {
        assert!(check_server_url("https://git.example.com/sub", false).is_ok());
        assert!(check_server_url(" HTTPS://git.example.com:8443 ", false).is_ok());
        let err = check_server_url("http://127.0.0.1:9000", false).unwrap_err();
        assert!(
            err.contains("FORGESYNC_ALLOW_INSECURE_SERVER_URLS"),
            "{err}"
        );
        assert!(check_server_url("http://127.0.0.1:9000", true).is_ok());
        let err = check_server_url("http://u:hunter2@h", false).unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        for bad in [
            "https://user:pw@git.example.com",
            "https://token@git.example.com/x",
            "http://user:pw@127.0.0.1:9000",
            "user:pw@git.example.com",
            "ftp://git.example.com",
            "file:///etc/passwd",
            "git.example.com",
            "https://",
            "https:///path",
            "https://git.example.com/?q=1",
            "https://git.example.com/#f",
            "https://git.exa mple.com",
        ] {
            assert!(check_server_url(bad, true).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn one_server_one_spelling() {
        assert_eq!(
            normalise_server_url(Some(" HTTPS://GitLab.Example.com/ ")),
            Some("https://gitlab.example.com".into())
        );
        assert_eq!(
            normalise_server_url(Some("https://git.example.com/Sub/Path")),
            Some("https://git.example.com/Sub/Path".into())
        );
        assert_eq!(normalise_server_url(Some("  ")), None);
        assert_eq!(normalise_server_url(None), None);
    }
}
