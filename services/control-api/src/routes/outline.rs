//! Reads of the Outline mirror for one workspace: its collections with where their reconcile
//! stands, a page of their documents (never the text), and one document with its text. Every
//! row belongs to the connection that read it, and every read goes through `outline_mirror`'s
//! workspace-bound queries, so another workspace's ids answer 404 like ids that exist nowhere.

use axum::Json;
use axum::extract::State;
use outline_mirror::collection::{self, Collection};
use outline_mirror::document::{self, Summary, View};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::workspaces::find_reachable;
use super::{KeysetPage, WorkspacePath, rfc3339};
use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, BadRequest, ErrorBody, PathParams, QueryParams, Unauthorized};

/// A collection an Outline connection read, with where its reconcile stands.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CollectionView {
    pub id: Uuid,
    /// Outline's id of the collection.
    pub outline_id: String,
    pub connection_id: Uuid,
    /// As Outline last named it; null until a listing reported it, and once it is deleted.
    pub name: Option<String>,
    /// Outline's `updatedAt` of the version kept; null until a listing reported it.
    pub updated_at: Option<String>,
    /// True until a reconcile lists its documents whole: until then no vanished document of
    /// it is tombstoned.
    pub awaiting_clean_pass: bool,
    /// When a reconcile last listed it whole.
    pub last_clean_pass_at: Option<String>,
    /// The last pass's outcome: `clean`, or why it was not (`budget_exhausted`, ...).
    pub last_outcome: Option<String>,
    /// When Outline reported it deleted (a tombstone; its documents are tombstoned with it).
    pub deleted_at: Option<String>,
}

impl From<Collection> for CollectionView {
    fn from(c: Collection) -> Self {
        CollectionView {
            id: c.id,
            outline_id: c.outline_id,
            connection_id: c.connection_id,
            name: c.name,
            updated_at: c.updated_at.map(rfc3339),
            awaiting_clean_pass: c.awaiting_clean_pass,
            last_clean_pass_at: c.last_clean_pass_at.map(rfc3339),
            last_outcome: c.last_outcome,
            deleted_at: c.deleted_at.map(rfc3339),
        }
    }
}

/// A mirrored document as listed: ids, title and dates, never its text.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentView {
    pub id: Uuid,
    /// Outline's id of the document.
    pub outline_id: String,
    pub connection_id: Uuid,
    /// The collection it is in (its `id` here, not Outline's).
    pub collection_id: Uuid,
    /// Outline's id of its parent document, when nested.
    pub parent_outline_id: Option<String>,
    /// Null once it is deleted.
    pub title: Option<String>,
    /// Outline's `updatedAt` of the version kept; null for a document known only by its
    /// deletion.
    pub updated_at: Option<String>,
    pub published_at: Option<String>,
    pub archived_at: Option<String>,
    /// When Outline reported it deleted (a tombstone: title and text cleared).
    pub deleted_at: Option<String>,
}

impl From<Summary> for DocumentView {
    fn from(d: Summary) -> Self {
        DocumentView {
            id: d.id,
            outline_id: d.outline_id,
            connection_id: d.connection_id,
            collection_id: d.collection_id,
            parent_outline_id: d.parent_outline_id,
            title: d.title,
            updated_at: d.updated_at.map(rfc3339),
            published_at: d.published_at.map(rfc3339),
            archived_at: d.archived_at.map(rfc3339),
            deleted_at: d.deleted_at.map(rfc3339),
        }
    }
}

/// One mirrored document with its text.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentTextView {
    #[serde(flatten)]
    pub document: DocumentView,
    /// Its Markdown as Outline last reported it; null once it is deleted, or when no read
    /// carried it yet.
    pub text: Option<String>,
}

impl From<View> for DocumentTextView {
    fn from(v: View) -> Self {
        DocumentTextView {
            document: v.summary.into(),
            text: v.text,
        }
    }
}

/// Which documents a page lists.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DocumentFilter {
    /// Only the documents of this collection (its `id` here, not Outline's).
    pub collection_id: Option<Uuid>,
}

/// The path parameters naming a document in its workspace.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct DocumentPath {
    /// The workspace's id.
    pub workspace_id: Uuid,
    /// The document's id (not Outline's).
    pub document_id: Uuid,
}

/// List the workspace's Outline collections
///
/// Every collection its Outline connections read, deleted ones included, with where each one's
/// reconcile stands.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/outline/collections",
    operation_id = "listOutlineCollections", params(WorkspacePath),
    responses((status = 200, description = "The workspace's collections.", body = Vec<CollectionView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token.", body = ErrorBody)))]
pub async fn collections(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
) -> Result<Json<Vec<CollectionView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let rows = collection::in_workspace(state.db.get_postgres_connection_pool(), workspace_id)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// List the workspace's Outline documents
///
/// A page of the documents its Outline connections read, deleted ones included (without their
/// title), in `id` order; only one collection's with `collection_id`. Never their text.
#[utoipa::path(get, path = "/workspaces/{workspace_id}/outline/documents",
    operation_id = "listOutlineDocuments", params(WorkspacePath, DocumentFilter, KeysetPage),
    responses((status = 200, description = "A page of documents, by id.", body = Vec<DocumentView>),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such workspace reachable with this token, or no such collection in it.", body = ErrorBody)))]
pub async fn documents(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams(workspace_id): PathParams<Uuid>,
    QueryParams(filter): QueryParams<DocumentFilter>,
    QueryParams(page): QueryParams<KeysetPage>,
) -> Result<Json<Vec<DocumentView>>, ApiError> {
    find_reachable(&state.db, &caller, workspace_id, false).await?;
    let pool = state.db.get_postgres_connection_pool();
    if let Some(id) = filter.collection_id {
        // Another workspace's collection answers like one that exists nowhere.
        collection::find_in_workspace(pool, workspace_id, id)
            .await
            .map_err(ApiError::internal)?
            .ok_or_else(|| ApiError::not_found("collection"))?;
    }
    let limit = i64::try_from(page.limit()).map_err(ApiError::internal)?;
    let rows = document::page(pool, workspace_id, filter.collection_id, page.after, limit)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// Get an Outline document with its text
#[utoipa::path(get, path = "/workspaces/{workspace_id}/outline/documents/{document_id}",
    operation_id = "getOutlineDocument", params(DocumentPath),
    responses((status = 200, description = "The document and its text.", body = DocumentTextView),
              (status = 400, response = BadRequest), (status = 401, response = Unauthorized),
              (status = 404, description = "No such document in a workspace this token reaches.", body = ErrorBody)))]
pub async fn document(
    State(state): State<AppState>,
    Caller(caller): Caller,
    PathParams((workspace_id, document_id)): PathParams<(Uuid, Uuid)>,
) -> Result<Json<DocumentTextView>, ApiError> {
    // The one answer for a document the caller cannot reach, whether it exists elsewhere or not.
    let no_document = || ApiError::not_found("document");
    if !caller.reaches(workspace_id) {
        return Err(no_document());
    }
    let view = document::find_in_workspace(
        state.db.get_postgres_connection_pool(),
        workspace_id,
        document_id,
    )
    .await
    .map_err(ApiError::internal)?
    .ok_or_else(no_document)?;
    Ok(Json(view.into()))
}
