//! How an Outline API call misbehaves. Which calls a fault fires on is the GitHub simulator's
//! [`super::Fault`] and [`super::Calls`], with these kinds, counted per method name.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::model::{Model, NewDocument, OutlineError};

/// The API methods served, as calls are counted and faults matched.
pub mod methods {
    /// `auth.info`
    pub const AUTH_INFO: &str = "auth.info";
    /// `collections.list`
    pub const COLLECTIONS_LIST: &str = "collections.list";
    /// `collections.info`
    pub const COLLECTIONS_INFO: &str = "collections.info";
    /// `documents.list`
    pub const DOCUMENTS_LIST: &str = "documents.list";
    /// `documents.info`
    pub const DOCUMENTS_INFO: &str = "documents.info";
    /// `webhookSubscriptions.create`
    pub const WEBHOOK_SUBSCRIPTIONS_CREATE: &str = "webhookSubscriptions.create";
    /// `webhookSubscriptions.list`
    pub const WEBHOOK_SUBSCRIPTIONS_LIST: &str = "webhookSubscriptions.list";
    /// `webhookSubscriptions.delete`
    pub const WEBHOOK_SUBSCRIPTIONS_DELETE: &str = "webhookSubscriptions.delete";

    /// Every method served; any other answers 404 `not_found`.
    pub const ALL: &[&str] = &[
        AUTH_INFO,
        COLLECTIONS_LIST,
        COLLECTIONS_INFO,
        DOCUMENTS_LIST,
        DOCUMENTS_INFO,
        WEBHOOK_SUBSCRIPTIONS_CREATE,
        WEBHOOK_SUBSCRIPTIONS_LIST,
        WEBHOOK_SUBSCRIPTIONS_DELETE,
    ];
}

/// A change to the model made as a call is served (a closure, from Rust).
#[derive(Clone)]
pub struct Mutation(pub Arc<dyn Fn(&mut Model) + Send + Sync>);

impl fmt::Debug for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mutation(..)")
    }
}

/// A change to the model as data, so the admin routes can script it too: what happens to the
/// team between two pages of a listing. Each is the model method of the same name, with its
/// deliveries.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    /// [`Model::add_document`].
    CreateDocument(NewDocument),
    /// [`Model::delete_document`].
    #[serde(rename_all = "camelCase")]
    DeleteDocument {
        /// The document.
        id: String,
    },
    /// [`Model::move_document`].
    #[serde(rename_all = "camelCase")]
    MoveDocument {
        /// The document.
        id: String,
        /// Where to.
        collection_id: String,
        /// Under this document.
        #[serde(default)]
        parent_document_id: Option<String>,
    },
    /// [`Model::archive_document`].
    ArchiveDocument {
        /// The document.
        id: String,
    },
    /// [`Model::permanently_delete_document`] after [`Model::delete_document`].
    PermanentlyDeleteDocument {
        /// The document.
        id: String,
    },
}

impl Change {
    /// Makes the change.
    pub fn apply(&self, m: &mut Model) -> Result<(), OutlineError> {
        match self {
            Change::CreateDocument(new) => m.add_document(new.clone()).map(drop),
            Change::DeleteDocument { id } => m.delete_document(id),
            Change::MoveDocument {
                id,
                collection_id,
                parent_document_id,
            } => m.move_document(id, collection_id, parent_document_id.as_deref()),
            Change::ArchiveDocument { id } => m.archive_document(id),
            Change::PermanentlyDeleteDocument { id } => {
                if m.document(id).is_some_and(|d| d.deleted_at.is_none()) {
                    m.delete_document(id)?;
                }
                m.permanently_delete_document(id)
            }
        }
    }
}

/// What reaches the client of a call whose work was done (the subscription created, say) but
/// whose answer never arrived whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "lost", rename_all = "snake_case")]
pub enum Lost {
    /// An HTTP error status (a proxy's 502, a timeout's 504) in place of the answer.
    Status {
        /// The status.
        status: u16,
    },
    /// The connection closes before the answer's body is complete.
    Drop,
}

/// How an Outline call misbehaves.
#[derive(Clone, Debug)]
pub enum OutlineFault {
    /// HTTP 429 with `Retry-After` and `{"ok":false,"error":"rate_limit_exceeded"}`; nothing
    /// is done.
    RateLimited {
        /// `Retry-After` seconds.
        retry_after: u64,
    },
    /// An HTTP error status; nothing is done. 500 answers Outline's JSON
    /// (`internal_server_error`), other codes a proxy's plain body.
    Status(u16),
    /// The answer is held back this long (combines with any other kind).
    Delay(Duration),
    /// The page holds at most `keep` items though more follow, as a listing may answer fewer
    /// than `limit` mid-way.
    ShortPage {
        /// Items left on the page.
        keep: usize,
    },
    /// The model changes just before the call is answered (between two pages of a listing,
    /// when fired on the second).
    Mutate(Mutation),
    /// [`Change`]s made just before the call is answered.
    Change(Vec<Change>),
    /// The call's work is done, and then its answer is lost.
    Lost(Lost),
}

impl OutlineFault {
    /// A [`OutlineFault::Mutate`] from a closure.
    pub fn mutate(f: impl Fn(&mut Model) + Send + Sync + 'static) -> Self {
        OutlineFault::Mutate(Mutation(Arc::new(f)))
    }

    /// The call is done and its answer replaced by `status`.
    pub fn lost_with(status: u16) -> Self {
        OutlineFault::Lost(Lost::Status { status })
    }

    /// The call is done and the connection drops before its answer is complete.
    pub fn dropped() -> Self {
        OutlineFault::Lost(Lost::Drop)
    }
}

/// A fault as the admin route `POST /_admin/faults.inject` takes it:
/// `{"method": "documents.list", "nth": 2, "kind": "short_page", "keep": 3}`; exactly one of
/// `nth`, `from`, `every`, `first` or none (every call); no `method`: every method.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct FaultSpec {
    pub method: Option<String>,
    pub nth: Option<u64>,
    pub from: Option<u64>,
    pub every: Option<u64>,
    pub first: Option<u64>,
    #[serde(flatten)]
    pub kind: FaultKindSpec,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum FaultKindSpec {
    RateLimited { retry_after: u64 },
    Status { status: u16 },
    Delay { ms: u64 },
    ShortPage { keep: usize },
    Change { changes: Vec<Change> },
    Lost(Lost),
}

impl FaultSpec {
    pub(crate) fn into_fault(self) -> super::Fault<OutlineFault> {
        use super::Calls;
        let calls = match (self.nth, self.from, self.every, self.first) {
            (Some(n), ..) => Calls::Nth(n),
            (_, Some(n), ..) => Calls::From(n),
            (_, _, Some(n), _) => Calls::Every(n),
            (_, _, _, Some(n)) => Calls::First(n),
            _ => Calls::Always,
        };
        let kind = match self.kind {
            FaultKindSpec::RateLimited { retry_after } => OutlineFault::RateLimited { retry_after },
            FaultKindSpec::Status { status } => OutlineFault::Status(status),
            FaultKindSpec::Delay { ms } => OutlineFault::Delay(Duration::from_millis(ms)),
            FaultKindSpec::ShortPage { keep } => OutlineFault::ShortPage { keep },
            FaultKindSpec::Change { changes } => OutlineFault::Change(changes),
            FaultKindSpec::Lost(l) => OutlineFault::Lost(l),
        };
        super::Fault {
            operation: self.method,
            calls,
            kind,
        }
    }
}
