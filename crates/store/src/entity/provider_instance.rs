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
    use super::normalise_server_url;

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
