//! Outline's JSON shapes of the team, collections, documents, subscriptions and policies,
//! shared by the API's answers and the webhook deliveries.

use serde_json::{Value as Json, json};
use time::OffsetDateTime;

use super::model::{Collection, Document, Model, Subscription};

/// A timestamp as Outline writes it (JavaScript's `toISOString`: UTC, milliseconds, `Z`).
pub fn date(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

fn opt_date(t: Option<OffsetDateTime>) -> Json {
    t.map_or(Json::Null, |t| json!(date(t)))
}

fn slug(title: &str) -> String {
    let s: String = title
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let s = s
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    if s.is_empty() {
        "untitled".to_owned()
    } else {
        s
    }
}

/// The user as Outline presents one.
pub(crate) fn user_json(m: &Model) -> Json {
    json!({
        "id": m.user.id,
        "name": m.user.name,
        "avatarUrl": format!("https://avatars.example/{}.png", m.user.id),
        "color": "#0366d6",
        "email": m.user.email,
        "role": "admin",
        "isSuspended": false,
        "lastActiveAt": null,
        "timezone": "UTC",
        "createdAt": "2024-01-01T00:00:00.000Z",
        "updatedAt": "2024-01-01T00:00:00.000Z",
        "deletedAt": null,
    })
}

/// The team as `auth.info` presents it.
pub(crate) fn team_json(m: &Model) -> Json {
    json!({
        "id": m.team.id,
        "name": m.team.name,
        "description": null,
        "avatarUrl": format!("https://avatars.example/{}.png", m.team.id),
        "sharing": true,
        "memberCollectionCreate": true,
        "memberTeamCreate": true,
        "documentEmbeds": true,
        "guestSignin": false,
        "inviteRequired": false,
        "allowedDomains": [],
        "defaultUserRole": "member",
        "subdomain": m.team.subdomain,
        "domain": null,
        "url": format!("https://{}.getoutline.com", m.team.subdomain),
        "preferences": null,
    })
}

/// A collection.
pub(crate) fn collection_json(c: &Collection) -> Json {
    json!({
        "id": c.id,
        "url": format!("/collection/{}-{}", slug(&c.name), c.url_id),
        "urlId": c.url_id,
        "name": c.name,
        "description": "",
        "data": null,
        "sort": { "field": "index", "direction": "asc" },
        "index": null,
        "color": "#4E5C6E",
        "icon": null,
        "permission": "read_write",
        "sharing": true,
        "commenting": null,
        "createdAt": date(c.created_at),
        "updatedAt": date(c.updated_at),
        "deletedAt": opt_date(c.deleted_at),
        "archivedAt": null,
    })
}

/// A document, with its text.
pub(crate) fn document_json(m: &Model, d: &Document) -> Json {
    let user = user_json(m);
    json!({
        "id": d.id,
        "url": format!("/doc/{}-{}", slug(&d.title), d.url_id),
        "urlId": d.url_id,
        "title": d.title,
        "text": d.text,
        "icon": null,
        "color": null,
        "fullWidth": false,
        "tasks": { "completed": 0, "total": 0 },
        "template": false,
        "revision": d.revision,
        "collaboratorIds": [m.user.id],
        "teamId": m.team.id,
        "collectionId": d.collection_id,
        "parentDocumentId": d.parent_document_id,
        "createdAt": date(d.created_at),
        "createdBy": user,
        "updatedAt": date(d.updated_at),
        "updatedBy": user,
        "publishedAt": opt_date(d.published_at),
        "archivedAt": opt_date(d.archived_at),
        "deletedAt": opt_date(d.deleted_at),
        "isCollectionDeleted": m
            .collection(&d.collection_id)
            .is_none_or(|c| c.deleted_at.is_some()),
        "dataAttributes": null,
    })
}

/// A webhook subscription, its secret included (Outline shows it to the admin).
pub(crate) fn subscription_json(s: &Subscription) -> Json {
    json!({
        "id": s.id,
        "name": s.name,
        "url": s.url,
        "secret": s.secret,
        "events": s.events,
        "enabled": s.enabled,
        "createdAt": date(s.created_at),
        "updatedAt": date(s.updated_at),
    })
}

/// The admin's policy on one object.
pub(crate) fn policy(id: &str, deleted: bool) -> Json {
    json!({
        "id": id,
        "abilities": {
            "read": true,
            "update": !deleted,
            "delete": !deleted,
            "restore": deleted,
            "permanentDelete": deleted,
        },
    })
}
