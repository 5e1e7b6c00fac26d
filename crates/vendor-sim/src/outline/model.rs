//! What the simulated Outline knows: one team with its API user and tokens, collections,
//! documents (soft-deleted ones kept with `deletedAt`, permanently deleted ones gone), webhook
//! subscriptions with their secrets, and the clock that stamps every change. A change made
//! through the model's methods queues one delivery per subscription whose `events` take it
//! (see [`super::deliveries`]); the simulator sends them.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::{Value as Json, json};
use time::OffsetDateTime;
use uuid::Uuid;

use super::wire;

/// An Outline API error: the HTTP status and the `error` code its body carries
/// (`not_found`, `validation_error`, ...), with a message. What the model's methods refuse
/// with, too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlineError {
    /// HTTP status (400, 401, 403, 404).
    pub status: u16,
    /// `error` in the body.
    pub code: &'static str,
    /// `message` in the body.
    pub message: String,
}

impl OutlineError {
    /// 404 `not_found`.
    pub fn not_found() -> Self {
        Self {
            status: 404,
            code: "not_found",
            message: "Resource not found".to_owned(),
        }
    }

    /// 400 `validation_error` saying `message`.
    pub fn validation(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            code: "validation_error",
            message: message.into(),
        }
    }

    /// 401 `authentication_required`.
    pub fn unauthenticated(message: &str) -> Self {
        Self {
            status: 401,
            code: "authentication_required",
            message: message.to_owned(),
        }
    }

    /// 403 `authorization_error`.
    pub fn forbidden() -> Self {
        Self {
            status: 403,
            code: "authorization_error",
            message: "Authorization error".to_owned(),
        }
    }
}

impl fmt::Display for OutlineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for OutlineError {}

/// The team (Outline calls it a workspace) every token acts in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team {
    /// uuid
    pub id: String,
    /// Display name.
    pub name: String,
    /// `<subdomain>.getoutline.com`.
    pub subdomain: String,
}

/// The user the API tokens belong to (an admin, as creating webhook subscriptions requires).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// uuid
    pub id: String,
    /// Display name.
    pub name: String,
    /// Email.
    pub email: String,
}

/// A collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collection {
    /// uuid
    pub id: String,
    /// Short id used in URLs.
    pub url_id: String,
    /// Name.
    pub name: String,
    /// Created.
    pub created_at: OffsetDateTime,
    /// Last changed.
    pub updated_at: OffsetDateTime,
    /// Deleted (its documents with it); listings leave it out, `collections.info` says 404.
    pub deleted_at: Option<OffsetDateTime>,
}

/// A document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// uuid
    pub id: String,
    /// Short id used in URLs; `documents.info` takes it in place of the uuid.
    pub url_id: String,
    /// Title.
    pub title: String,
    /// Markdown text.
    pub text: String,
    /// Its collection.
    pub collection_id: String,
    /// The document it is nested under.
    pub parent_document_id: Option<String>,
    /// Created.
    pub created_at: OffsetDateTime,
    /// Last changed (every change through the model bumps it).
    pub updated_at: OffsetDateTime,
    /// Published; `None` for a draft.
    pub published_at: Option<OffsetDateTime>,
    /// Archived: out of `documents.list` unless asked for, still found by `documents.info`.
    pub archived_at: Option<OffsetDateTime>,
    /// Soft-deleted: out of `documents.list`, found by `documents.info` with this set.
    pub deleted_at: Option<OffsetDateTime>,
    /// Counts saves.
    pub revision: u64,
}

/// A webhook subscription, as `webhookSubscriptions.create` made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// uuid
    pub id: String,
    /// Name given at creation.
    pub name: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// Events it takes: full names (`documents.update`), a model's prefix (`documents`) or `*`.
    pub events: Vec<String>,
    /// Signs deliveries when set (Outline sends no signature without one).
    pub secret: Option<String>,
    /// Disabled subscriptions receive nothing.
    pub enabled: bool,
    /// Created.
    pub created_at: OffsetDateTime,
    /// Last changed.
    pub updated_at: OffsetDateTime,
}

impl Subscription {
    /// Whether it takes `event`: its exact name, its model's prefix, or `*`.
    pub fn takes(&self, event: &str) -> bool {
        self.enabled
            && self.events.iter().any(|e| {
                e == "*"
                    || e == event
                    || event
                        .strip_prefix(e.as_str())
                        .is_some_and(|r| r.starts_with('.'))
            })
    }
}

/// Event names the simulator sends (what a subscription's `events` may name, besides a
/// model's prefix and `*`).
pub mod events {
    /// A document was created.
    pub const DOCUMENTS_CREATE: &str = "documents.create";
    /// A document was published.
    pub const DOCUMENTS_PUBLISH: &str = "documents.publish";
    /// A document's title or text changed.
    pub const DOCUMENTS_UPDATE: &str = "documents.update";
    /// A document went to another collection or parent.
    pub const DOCUMENTS_MOVE: &str = "documents.move";
    /// A document was archived.
    pub const DOCUMENTS_ARCHIVE: &str = "documents.archive";
    /// A document was soft-deleted.
    pub const DOCUMENTS_DELETE: &str = "documents.delete";
    /// A document was deleted for good (`model` is null).
    pub const DOCUMENTS_PERMANENT_DELETE: &str = "documents.permanent_delete";
    /// A deleted or archived document came back.
    pub const DOCUMENTS_RESTORE: &str = "documents.restore";
    /// A collection was created.
    pub const COLLECTIONS_CREATE: &str = "collections.create";
    /// A collection was renamed.
    pub const COLLECTIONS_UPDATE: &str = "collections.update";
    /// A collection was deleted, its documents with it.
    pub const COLLECTIONS_DELETE: &str = "collections.delete";

    /// Every event the simulator sends.
    pub const ALL: &[&str] = &[
        DOCUMENTS_CREATE,
        DOCUMENTS_PUBLISH,
        DOCUMENTS_UPDATE,
        DOCUMENTS_MOVE,
        DOCUMENTS_ARCHIVE,
        DOCUMENTS_DELETE,
        DOCUMENTS_PERMANENT_DELETE,
        DOCUMENTS_RESTORE,
        COLLECTIONS_CREATE,
        COLLECTIONS_UPDATE,
        COLLECTIONS_DELETE,
    ];
}

/// Outline's rate limiter: `limit` calls per API key in each fixed `window`, every answer
/// saying what is left (`RateLimit-Limit`, `-Remaining`, `-Reset`); past it, 429 with
/// `Retry-After` until the window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Calls allowed a window.
    pub limit: u32,
    /// The window.
    pub window: std::time::Duration,
}

impl Default for RateLimit {
    /// A self-hosted Outline's default: 1000 calls a minute.
    fn default() -> Self {
        Self {
            limit: 1000,
            window: std::time::Duration::from_secs(60),
        }
    }
}

/// A document to add: its collection and title, the rest optional (a published, top-level,
/// empty document created now).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewDocument {
    /// The collection.
    pub collection_id: String,
    /// Title.
    pub title: String,
    /// Markdown text.
    #[serde(default)]
    pub text: String,
    /// Nested under this document.
    #[serde(default)]
    pub parent_document_id: Option<String>,
    /// Created at this time instead of now (an old document, for a horizon); later changes are
    /// still stamped after the latest time issued.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub created_at: Option<OffsetDateTime>,
    /// Last changed at this time (defaults to `created_at`).
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub updated_at: Option<OffsetDateTime>,
    /// A draft (no `publishedAt`).
    #[serde(default)]
    pub draft: bool,
}

impl NewDocument {
    /// A published, top-level document created now.
    pub fn new(collection_id: &str, title: &str) -> Self {
        Self {
            collection_id: collection_id.to_owned(),
            title: title.to_owned(),
            ..Self::default()
        }
    }

    /// With this text.
    pub fn text(mut self, text: &str) -> Self {
        self.text = text.to_owned();
        self
    }

    /// Nested under `parent`.
    pub fn parent(mut self, parent: &str) -> Self {
        self.parent_document_id = Some(parent.to_owned());
        self
    }

    /// Created and last changed at `at`.
    pub fn dated(mut self, at: OffsetDateTime) -> Self {
        self.created_at = Some(at);
        self.updated_at = Some(at);
        self
    }

    /// Left a draft.
    pub fn draft(mut self) -> Self {
        self.draft = true;
        self
    }
}

/// A delivery queued for one subscription: the whole body, built when the change happened.
#[derive(Debug, Clone)]
pub(crate) struct QueuedDelivery {
    pub id: String,
    pub subscription_id: String,
    pub event: String,
    pub body: Json,
}

/// The simulated Outline's state. Change it through its methods: they stamp times in order and
/// queue the deliveries Outline would make.
#[derive(Debug, Clone)]
pub struct Model {
    /// The team.
    pub team: Team,
    /// The user every token acts as.
    pub user: User,
    /// Outline's request allowance per API key; off (`None`) by default.
    pub rate_limit: Option<RateLimit>,
    pub(crate) tokens: BTreeMap<String, bool>,
    pub(crate) collections: BTreeMap<String, Collection>,
    pub(crate) documents: BTreeMap<String, Document>,
    pub(crate) subscriptions: BTreeMap<String, Subscription>,
    clock: Option<OffsetDateTime>,
    last: OffsetDateTime,
    muted: bool,
    pub(crate) deliveries: Vec<QueuedDelivery>,
}

impl Default for Model {
    fn default() -> Self {
        Self::new("acme")
    }
}

fn uuid() -> String {
    Uuid::new_v4().to_string()
}

/// Ten letters and digits, as Outline's `urlId`s look.
fn url_id() -> String {
    let u = Uuid::new_v4();
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    u.as_bytes()[..10]
        .iter()
        .map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char)
        .collect()
}

/// Cut to whole milliseconds, as Outline's timestamps are.
fn millis(t: OffsetDateTime) -> OffsetDateTime {
    let nanos = t.nanosecond();
    t.replace_nanosecond(nanos - nanos % 1_000_000).unwrap_or(t)
}

impl Model {
    /// A team named `name` (its subdomain too) with its admin user and no tokens.
    pub fn new(name: &str) -> Self {
        Self {
            team: Team {
                id: uuid(),
                name: name.to_owned(),
                subdomain: name.to_ascii_lowercase(),
            },
            user: User {
                id: uuid(),
                name: "Sim Admin".to_owned(),
                email: format!("admin@{}.example", name.to_ascii_lowercase()),
            },
            rate_limit: None,
            tokens: BTreeMap::new(),
            collections: BTreeMap::new(),
            documents: BTreeMap::new(),
            subscriptions: BTreeMap::new(),
            clock: None,
            last: OffsetDateTime::UNIX_EPOCH,
            muted: false,
            deliveries: Vec::new(),
        }
    }

    /// Accepts `token` as an API key of the team's user.
    pub fn add_token(&mut self, token: &str) {
        self.tokens.insert(token.to_owned(), true);
    }

    /// From now on `token` answers 401.
    pub fn revoke_token(&mut self, token: &str) {
        self.tokens.insert(token.to_owned(), false);
    }

    /// Fixes the clock at `at`: changes are stamped from it (each one past the last one issued).
    /// Without it the clock is the system's.
    pub fn set_clock(&mut self, at: OffsetDateTime) {
        self.clock = Some(millis(at));
    }

    /// Moves a fixed clock forward (fixing it at the system time first if it was not).
    pub fn advance_clock(&mut self, by: std::time::Duration) {
        self.clock = Some(self.now() + by);
    }

    /// The clock's reading.
    pub fn now(&self) -> OffsetDateTime {
        self.clock
            .unwrap_or_else(|| millis(OffsetDateTime::now_utc()))
    }

    /// A fresh timestamp: the clock's reading, or a millisecond past the last one issued.
    fn stamp(&mut self) -> OffsetDateTime {
        let t = self.now().max(self.last + time::Duration::milliseconds(1));
        self.last = t;
        t
    }

    /// Runs `f` without queueing deliveries for what it changes (a change Outline's webhooks
    /// never told anybody about).
    pub fn quietly<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let was = std::mem::replace(&mut self.muted, true);
        let out = f(self);
        self.muted = was;
        out
    }

    // ---- collections

    /// Adds a collection; its id (`collections.create`).
    pub fn add_collection(&mut self, name: &str) -> String {
        let now = self.stamp();
        let c = Collection {
            id: uuid(),
            url_id: url_id(),
            name: name.to_owned(),
            created_at: now,
            updated_at: now,
            deleted_at: None,
        };
        let id = c.id.clone();
        let model = wire::collection_json(&c);
        self.collections.insert(id.clone(), c);
        self.emit(events::COLLECTIONS_CREATE, &id, Some(model));
        id
    }

    /// A collection, deleted ones included.
    pub fn collection(&self, id: &str) -> Option<&Collection> {
        self.collections.get(id)
    }

    /// Every collection (deleted ones too), by id.
    pub fn collections(&self) -> impl Iterator<Item = &Collection> {
        self.collections.values()
    }

    fn live_collection(&self, id: &str) -> Result<&Collection, OutlineError> {
        self.collections
            .get(id)
            .filter(|c| c.deleted_at.is_none())
            .ok_or_else(OutlineError::not_found)
    }

    /// Renames a collection (`collections.update`).
    pub fn rename_collection(&mut self, id: &str, name: &str) -> Result<(), OutlineError> {
        self.live_collection(id)?;
        let now = self.stamp();
        let c = self
            .collections
            .get_mut(id)
            .ok_or_else(OutlineError::not_found)?;
        c.name = name.to_owned();
        c.updated_at = now;
        let model = wire::collection_json(c);
        self.emit(events::COLLECTIONS_UPDATE, id, Some(model));
        Ok(())
    }

    /// Deletes a collection and soft-deletes its documents (`collections.delete` only, as
    /// Outline sends no event per document for it).
    pub fn delete_collection(&mut self, id: &str) -> Result<(), OutlineError> {
        self.live_collection(id)?;
        let now = self.stamp();
        for d in self.documents.values_mut() {
            if d.collection_id == id && d.deleted_at.is_none() {
                d.deleted_at = Some(now);
                d.updated_at = now;
            }
        }
        let c = self
            .collections
            .get_mut(id)
            .ok_or_else(OutlineError::not_found)?;
        c.deleted_at = Some(now);
        c.updated_at = now;
        let model = wire::collection_json(c);
        self.emit(events::COLLECTIONS_DELETE, id, Some(model));
        Ok(())
    }

    // ---- documents

    /// A document by uuid or `urlId`, soft-deleted ones included.
    pub fn document(&self, id: &str) -> Option<&Document> {
        self.documents.get(id).or_else(|| {
            // `documents.info` also takes `<slug>-<urlId>`.
            let url_id = id.rsplit('-').next().unwrap_or(id);
            self.documents.values().find(|d| d.url_id == url_id)
        })
    }

    /// Every document (soft-deleted ones too), by id.
    pub fn documents(&self) -> impl Iterator<Item = &Document> {
        self.documents.values()
    }

    /// The ids of a collection's listed documents (neither deleted nor archived), by id.
    pub fn document_ids_in(&self, collection_id: &str) -> Vec<String> {
        self.documents
            .values()
            .filter(|d| d.collection_id == collection_id)
            .filter(|d| d.deleted_at.is_none() && d.archived_at.is_none())
            .map(|d| d.id.clone())
            .collect()
    }

    fn doc_mut(&mut self, id: &str) -> Result<&mut Document, OutlineError> {
        self.documents
            .get_mut(id)
            .ok_or_else(OutlineError::not_found)
    }

    fn live_doc(&self, id: &str) -> Result<&Document, OutlineError> {
        self.documents
            .get(id)
            .filter(|d| d.deleted_at.is_none())
            .ok_or_else(OutlineError::not_found)
    }

    /// Adds a document; its id (`documents.create`, then `documents.publish` unless a draft).
    pub fn add_document(&mut self, new: NewDocument) -> Result<String, OutlineError> {
        self.live_collection(&new.collection_id)?;
        if let Some(parent) = &new.parent_document_id
            && self.live_doc(parent)?.collection_id != new.collection_id
        {
            return Err(OutlineError::validation(
                "parentDocumentId must be in the same collection",
            ));
        }
        let (created, updated) = match (new.created_at, new.updated_at) {
            (Some(c), u) => {
                let c = millis(c);
                let u = millis(u.unwrap_or(c)).max(c);
                self.last = self.last.max(u);
                (c, u)
            }
            (None, _) => {
                let now = self.stamp();
                (now, now)
            }
        };
        let d = Document {
            id: uuid(),
            url_id: url_id(),
            title: new.title,
            text: new.text,
            collection_id: new.collection_id,
            parent_document_id: new.parent_document_id,
            created_at: created,
            updated_at: updated,
            published_at: (!new.draft).then_some(created),
            archived_at: None,
            deleted_at: None,
            revision: 1,
        };
        let id = d.id.clone();
        let draft = new.draft;
        self.documents.insert(id.clone(), d);
        self.emit_doc(events::DOCUMENTS_CREATE, &id);
        if !draft {
            self.emit_doc(events::DOCUMENTS_PUBLISH, &id);
        }
        Ok(id)
    }

    /// Changes a document's title and/or text (`documents.update`).
    pub fn update_document(
        &mut self,
        id: &str,
        title: Option<&str>,
        text: Option<&str>,
    ) -> Result<(), OutlineError> {
        self.live_doc(id)?;
        let now = self.stamp();
        let d = self.doc_mut(id)?;
        if let Some(t) = title {
            d.title = t.to_owned();
        }
        if let Some(t) = text {
            d.text = t.to_owned();
        }
        d.updated_at = now;
        d.revision += 1;
        self.emit_doc(events::DOCUMENTS_UPDATE, id);
        Ok(())
    }

    /// Publishes a draft (`documents.publish`).
    pub fn publish_document(&mut self, id: &str) -> Result<(), OutlineError> {
        self.live_doc(id)?;
        let now = self.stamp();
        let d = self.doc_mut(id)?;
        d.published_at = Some(now);
        d.updated_at = now;
        self.emit_doc(events::DOCUMENTS_PUBLISH, id);
        Ok(())
    }

    /// Moves a document (and the documents nested under it) to `collection_id`, under `parent`
    /// when given (`documents.move`).
    pub fn move_document(
        &mut self,
        id: &str,
        collection_id: &str,
        parent: Option<&str>,
    ) -> Result<(), OutlineError> {
        self.live_doc(id)?;
        self.live_collection(collection_id)?;
        if let Some(p) = parent
            && (p == id || self.live_doc(p)?.collection_id != collection_id)
        {
            return Err(OutlineError::validation("invalid parentDocumentId"));
        }
        let now = self.stamp();
        let moved = self.subtree(id);
        for child in &moved {
            let d = self.doc_mut(child)?;
            d.collection_id = collection_id.to_owned();
            d.updated_at = now;
        }
        self.doc_mut(id)?.parent_document_id = parent.map(str::to_owned);
        self.emit_doc(events::DOCUMENTS_MOVE, id);
        Ok(())
    }

    /// `id` and every document nested under it, at any depth.
    fn subtree(&self, id: &str) -> Vec<String> {
        let mut out = vec![id.to_owned()];
        let mut i = 0;
        while i < out.len() {
            let parent = out[i].clone();
            out.extend(
                self.documents
                    .values()
                    .filter(|d| d.parent_document_id.as_deref() == Some(parent.as_str()))
                    .map(|d| d.id.clone()),
            );
            i += 1;
        }
        out
    }

    /// Archives a document (`documents.archive`).
    pub fn archive_document(&mut self, id: &str) -> Result<(), OutlineError> {
        self.live_doc(id)?;
        let now = self.stamp();
        let d = self.doc_mut(id)?;
        d.archived_at = Some(now);
        d.updated_at = now;
        self.emit_doc(events::DOCUMENTS_ARCHIVE, id);
        Ok(())
    }

    /// Soft-deletes a document and the documents nested under it (`documents.delete` for the
    /// one named). It stays found by `documents.info`, with `deletedAt`.
    pub fn delete_document(&mut self, id: &str) -> Result<(), OutlineError> {
        self.live_doc(id)?;
        let now = self.stamp();
        for child in self.subtree(id) {
            let d = self.doc_mut(&child)?;
            if d.deleted_at.is_none() {
                d.deleted_at = Some(now);
                d.updated_at = now;
            }
        }
        self.emit_doc(events::DOCUMENTS_DELETE, id);
        Ok(())
    }

    /// Brings back a soft-deleted or archived document (`documents.restore`); into
    /// `collection_id` when given (its own collection may be gone).
    pub fn restore_document(
        &mut self,
        id: &str,
        collection_id: Option<&str>,
    ) -> Result<(), OutlineError> {
        let target = collection_id
            .map(str::to_owned)
            .unwrap_or(self.doc_mut(id)?.collection_id.clone());
        self.live_collection(&target)?;
        let d = self.doc_mut(id)?;
        if d.deleted_at.is_none() && d.archived_at.is_none() {
            return Err(OutlineError::validation(
                "Document is not archived or deleted",
            ));
        }
        let now = self.stamp();
        let d = self.doc_mut(id)?;
        d.deleted_at = None;
        d.archived_at = None;
        d.updated_at = now;
        if d.collection_id != target {
            d.collection_id = target;
            d.parent_document_id = None;
        }
        self.emit_doc(events::DOCUMENTS_RESTORE, id);
        Ok(())
    }

    /// Deletes a soft-deleted document for good (`documents.permanent_delete`, `model` null):
    /// from then on `documents.info` answers 404.
    pub fn permanently_delete_document(&mut self, id: &str) -> Result<(), OutlineError> {
        let d = self.documents.get(id).ok_or_else(OutlineError::not_found)?;
        if d.deleted_at.is_none() {
            return Err(OutlineError::validation(
                "Document must be deleted before it is permanently deleted",
            ));
        }
        self.stamp();
        self.documents.remove(id);
        self.emit(events::DOCUMENTS_PERMANENT_DELETE, id, None);
        Ok(())
    }

    // ---- webhook subscriptions

    /// Every subscription, by id.
    pub fn subscriptions(&self) -> impl Iterator<Item = &Subscription> {
        self.subscriptions.values()
    }

    /// One subscription.
    pub fn subscription(&self, id: &str) -> Option<&Subscription> {
        self.subscriptions.get(id)
    }

    /// Creates a subscription as `webhookSubscriptions.create` does; it.
    pub fn create_subscription(
        &mut self,
        name: &str,
        url: &str,
        events: &[String],
        secret: Option<&str>,
    ) -> Result<Subscription, OutlineError> {
        if name.trim().is_empty() {
            return Err(OutlineError::validation("name is required"));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(OutlineError::validation("url must be a valid URL"));
        }
        if events.is_empty() {
            return Err(OutlineError::validation("events is required"));
        }
        if let Some(bad) = events.iter().find(|e| {
            e.as_str() != "*"
                && !events::ALL
                    .iter()
                    .any(|known| known == e || known.split('.').next() == Some(e.as_str()))
        }) {
            return Err(OutlineError::validation(format!("unknown event {bad}")));
        }
        let now = self.stamp();
        let s = Subscription {
            id: uuid(),
            name: name.to_owned(),
            url: url.to_owned(),
            events: events.to_vec(),
            secret: secret.filter(|s| !s.is_empty()).map(str::to_owned),
            enabled: true,
            created_at: now,
            updated_at: now,
        };
        self.subscriptions.insert(s.id.clone(), s.clone());
        Ok(s)
    }

    /// Deletes a subscription; nothing is sent to it afterwards.
    pub fn delete_subscription(&mut self, id: &str) -> Result<Subscription, OutlineError> {
        self.subscriptions
            .remove(id)
            .ok_or_else(OutlineError::not_found)
    }

    // ---- deliveries

    fn emit_doc(&mut self, event: &str, id: &str) {
        let model = self.documents.get(id).map(|d| wire::document_json(self, d));
        self.emit(event, id, model);
    }

    /// Queues `event` for every subscription that takes it, unless muted.
    fn emit(&mut self, event: &str, id: &str, model: Option<Json>) {
        if self.muted {
            return;
        }
        let created_at = wire::date(self.last);
        let takers: Vec<String> = self
            .subscriptions
            .values()
            .filter(|s| s.takes(event))
            .map(|s| s.id.clone())
            .collect();
        for subscription_id in takers {
            let delivery_id = uuid();
            let body = json!({
                "id": delivery_id,
                "actorId": self.user.id,
                "webhookSubscriptionId": subscription_id,
                "createdAt": created_at,
                "event": event,
                "payload": { "id": id, "model": model },
            });
            self.deliveries.push(QueuedDelivery {
                id: delivery_id,
                subscription_id,
                event: event.to_owned(),
                body,
            });
        }
    }

    /// Takes the queued deliveries, oldest first.
    pub(crate) fn take_deliveries(&mut self) -> Vec<QueuedDelivery> {
        std::mem::take(&mut self.deliveries)
    }

    /// Whether `token` is a live API key.
    pub(crate) fn authenticate(&self, token: Option<&str>) -> Result<(), OutlineError> {
        let token =
            token.ok_or_else(|| OutlineError::unauthenticated("Authentication required"))?;
        match self.tokens.get(token) {
            Some(true) => Ok(()),
            _ => Err(OutlineError::unauthenticated("Invalid API key")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscribed(events: &[&str]) -> Subscription {
        let mut m = Model::default();
        let events: Vec<String> = events.iter().map(|e| (*e).to_owned()).collect();
        m.create_subscription("s", "http://127.0.0.1:9/", &events, None)
            .unwrap()
    }

    #[test]
    fn a_subscription_takes_its_events_their_model_or_everything() {
        let s = subscribed(&["documents.update", "collections"]);
        assert!(s.takes("documents.update"));
        assert!(!s.takes("documents.delete"));
        assert!(s.takes("collections.delete"));
        assert!(subscribed(&["*"]).takes("documents.move"));
        // A prefix is a whole model name, not any leading text.
        let mut doc = subscribed(&["documents"]);
        doc.events = vec!["doc".to_owned()];
        assert!(!doc.takes("documents.update"));
        doc.enabled = false;
        doc.events = vec!["*".to_owned()];
        assert!(!doc.takes("documents.update"), "disabled");
    }

    #[test]
    fn unknown_events_and_bad_urls_are_refused() {
        let mut m = Model::default();
        let refused = |m: &mut Model, url: &str, e: &str| {
            m.create_subscription("s", url, &[e.to_owned()], None)
                .unwrap_err()
                .code
        };
        assert_eq!(
            refused(&mut m, "http://x/", "pages.update"),
            "validation_error"
        );
        assert_eq!(refused(&mut m, "ftp://x/", "documents"), "validation_error");
    }

    #[test]
    fn changes_are_stamped_in_order_and_a_quiet_one_delivers_nothing() {
        let mut m = Model::default();
        m.set_clock(time::macros::datetime!(2026-01-01 00:00 UTC));
        m.create_subscription("s", "http://x/", &["*".to_owned()], None)
            .unwrap();
        let c = m.add_collection("c");
        let d = m.add_document(NewDocument::new(&c, "t")).unwrap();
        let created = m.document(&d).unwrap().updated_at;
        m.update_document(&d, Some("u"), None).unwrap();
        assert!(m.document(&d).unwrap().updated_at > created);
        let queued = m.take_deliveries().len();
        assert_eq!(
            queued, 4,
            "collections.create, documents.create, .publish, .update"
        );
        m.quietly(|m| m.delete_document(&d)).unwrap();
        assert!(m.take_deliveries().is_empty());
        assert!(m.document(&d).unwrap().deleted_at.is_some());
    }
}
