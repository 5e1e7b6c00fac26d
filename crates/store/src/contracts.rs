//! The cross-service message contracts: one serde type per message family, used by the producer
//! (through [`crate::outbox`]) and by the consumer (decoded by `bus::consumer`'s runner), so the
//! two cannot drift apart. Each type builds its own subject with `lifecycle_core::subject`.

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use uuid::Uuid;

use crate::entity::JobTrigger;
use crate::headers;
use crate::outbox::OutboxMessage;

/// A message family: its wire form (JSON), subject and headers.
pub trait Contract: Serialize + DeserializeOwned + Send + 'static {
    /// The logical subject this message is published on.
    fn subject(&self) -> String;
    /// Headers naming what the message concerns (workspace, connection).
    fn headers(&self) -> Vec<(&'static str, String)>;
    /// The `Nats-Msg-Id` when the message carries its own dedup key.
    fn msg_id(&self) -> Option<String> {
        None
    }
}

/// A decoded message as a consumer receives it: JSON contracts and raw vendor deliveries.
pub trait Incoming: Sized + Send + 'static {
    /// Decodes from the logical subject, the headers and the payload; an error is permanent.
    fn decode(
        subject: &str,
        header: &dyn Fn(&str) -> Option<String>,
        payload: &[u8],
    ) -> Result<Self, String>;
}

impl<T: Contract> Incoming for T {
    fn decode(
        subject: &str,
        _header: &dyn Fn(&str) -> Option<String>,
        payload: &[u8],
    ) -> Result<Self, String> {
        serde_json::from_slice(payload).map_err(|e| {
            format!(
                "message on {subject} is not a valid {}: {e}",
                short_name::<T>()
            )
        })
    }
}

fn short_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

/// `jobs.<kind>.<connectionId>.<type>`: a sync job was queued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobQueued {
    pub job_id: Uuid,
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub kind: String,
    #[serde(rename = "type")]
    pub job_type: String,
    pub trigger: JobTrigger,
}

impl Contract for JobQueued {
    fn subject(&self) -> String {
        lifecycle_core::subject::jobs(&self.kind, &self.connection_id.to_string(), &self.job_type)
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (headers::WORKSPACE, self.workspace_id.to_string()),
            (headers::CONNECTION, self.connection_id.to_string()),
        ]
    }
}

/// `lifecycle.<kind>.<connectionId>.<transition>`: a connection changed lifecycle state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleTransition {
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub kind: String,
    pub transition: String,
    pub before_status: String,
    pub status: String,
    pub version: i64,
    pub lifecycle_generation: i64,
    pub provider_instance_id: Uuid,
    pub actor: String,
    /// RFC 3339.
    pub at: String,
}

impl Contract for LifecycleTransition {
    fn subject(&self) -> String {
        lifecycle_core::subject::lifecycle(
            &self.kind,
            &self.connection_id.to_string(),
            &self.transition,
        )
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (headers::WORKSPACE, self.workspace_id.to_string()),
            (headers::CONNECTION, self.connection_id.to_string()),
        ]
    }
}

/// `lifecycle.workspace.<workspaceId>.purged`: a workspace's purge started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspacePurged {
    pub workspace_id: Uuid,
    /// Always [`WorkspacePurged::TRANSITION`].
    pub transition: String,
    pub actor: String,
    /// RFC 3339.
    pub at: String,
}

impl WorkspacePurged {
    /// The transition token of the subject and payload.
    pub const TRANSITION: &'static str = "purged";

    pub fn new(workspace_id: Uuid, actor: String, at: String) -> Self {
        WorkspacePurged {
            workspace_id,
            transition: Self::TRANSITION.to_owned(),
            actor,
            at,
        }
    }
}

impl Contract for WorkspacePurged {
    fn subject(&self) -> String {
        lifecycle_core::subject::lifecycle(
            "workspace",
            &self.workspace_id.to_string(),
            Self::TRANSITION,
        )
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![(headers::WORKSPACE, self.workspace_id.to_string())]
    }
}

/// `lifecycle.<kind>.<connectionId>.repositories_released`: a connection's monitors of these
/// repositories went because the repositories left its reach (removed from an installation, no
/// longer resolved by a PAT); the eraser applies the orphan guard to each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepositoriesReleased {
    pub connection_id: Uuid,
    pub workspace_id: Uuid,
    pub kind: String,
    /// The mirrored repositories the removed monitors were bound to.
    pub repository_ids: Vec<Uuid>,
}

impl RepositoriesReleased {
    /// The transition token of the subject.
    pub const TRANSITION: &'static str = "repositories_released";
}

impl Contract for RepositoriesReleased {
    fn subject(&self) -> String {
        lifecycle_core::subject::lifecycle(
            &self.kind,
            &self.connection_id.to_string(),
            Self::TRANSITION,
        )
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (headers::WORKSPACE, self.workspace_id.to_string()),
            (headers::CONNECTION, self.connection_id.to_string()),
        ]
    }
}

/// The item an [`ItemEvent`] is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemRef {
    /// `issue` or `pull_request`.
    pub kind: String,
    pub id: Uuid,
}

/// `events.<workspaceId>.<type>`: a lifecycle change of an issue or pull request, per workspace,
/// as a consumer reads it: the forge case of [`IntegrationEventMessage`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemEvent {
    /// The activity entry's id; also the message's dedup key.
    pub id: Uuid,
    #[serde(rename = "type")]
    pub event_type: String,
    pub workspace_id: Uuid,
    pub item: ItemRef,
    pub repository_id: Uuid,
    pub source_key: String,
    /// RFC 3339.
    pub version: String,
    /// RFC 3339.
    pub occurred_at: Option<String>,
    /// `webhook` or `sync`.
    pub origin: String,
}

impl Contract for ItemEvent {
    fn subject(&self) -> String {
        lifecycle_core::subject::events(&self.workspace_id.to_string(), &self.event_type)
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            (headers::WORKSPACE, self.workspace_id.to_string()),
            (headers::REPOSITORY, self.repository_id.to_string()),
        ]
    }
    fn msg_id(&self) -> Option<String> {
        Some(self.id.to_string())
    }
}

/// `events.<workspaceId>.<type>`: a change any vendor reports, per workspace it fans out to
/// ([`crate::events::record`] writes it). The generic fields are named here; the vendor's scope
/// travels as `<kind>_id` (`repository_id`, `channel_id`) and its own fields beside them
/// (`detail`), so a forge item's message reads exactly as an [`ItemEvent`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntegrationEventMessage {
    /// This workspace's copy; also the message's dedup key.
    pub id: Uuid,
    #[serde(rename = "type")]
    pub event_type: String,
    pub workspace_id: Uuid,
    pub item: ItemRef,
    pub source_key: String,
    /// RFC 3339.
    pub occurred_at: Option<String>,
    /// The scope as `<kind>_id` and the vendor's own fields.
    #[serde(flatten)]
    pub detail: serde_json::Map<String, serde_json::Value>,
    /// The connection whose copy it is alone (headers only, for erasure).
    #[serde(skip)]
    pub connection_id: Option<Uuid>,
    /// The mirrored repository it is about (headers only, for erasure with the repository).
    #[serde(skip)]
    pub repository_id: Option<Uuid>,
}

impl Contract for IntegrationEventMessage {
    fn subject(&self) -> String {
        lifecycle_core::subject::events(&self.workspace_id.to_string(), &self.event_type)
    }
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![(headers::WORKSPACE, self.workspace_id.to_string())];
        if let Some(id) = self.connection_id {
            headers.push((headers::CONNECTION, id.to_string()));
        }
        if let Some(id) = self.repository_id {
            headers.push((headers::REPOSITORY, id.to_string()));
        }
        headers
    }
    fn msg_id(&self) -> Option<String> {
        Some(self.id.to_string())
    }
}

/// A vendor webhook delivery as ingress publishes it: the vendor's body (inline, or by reference
/// to its stored copy) with headers naming the connection, the delivery and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookDelivery {
    /// The vendor's event name (the header, else the subject's last token).
    pub event: String,
    pub workspace_id: Option<Uuid>,
    pub connection_id: Option<Uuid>,
    pub delivery_id: Option<Uuid>,
    /// The stored body to read instead of the payload.
    pub body_ref: Option<Uuid>,
    /// The inbound message this one replays.
    pub replay_of: Option<Uuid>,
    /// The inline body (empty when carried by reference).
    pub body: Vec<u8>,
}

impl WebhookDelivery {
    /// The outbox message carrying this delivery on `subject`, deduplicated on `msg_id`.
    pub fn outbox_message(&self, subject: String, msg_id: String) -> OutboxMessage {
        let mut message = OutboxMessage::bytes(subject, self.body.clone())
            .msg_id(msg_id)
            .header(headers::EVENT, self.event.clone());
        let ids = [
            (headers::WORKSPACE, self.workspace_id),
            (headers::CONNECTION, self.connection_id),
            (headers::DELIVERY, self.delivery_id),
            (headers::BODY_REF, self.body_ref),
            (headers::REPLAY_OF, self.replay_of),
        ];
        for (name, id) in ids {
            if let Some(id) = id {
                message = message.header(name, id.to_string());
            }
        }
        message
    }
}

impl Incoming for WebhookDelivery {
    fn decode(
        subject: &str,
        header: &dyn Fn(&str) -> Option<String>,
        payload: &[u8],
    ) -> Result<Self, String> {
        let uuid = |name: &str| header(name).and_then(|v| v.parse::<Uuid>().ok());
        Ok(WebhookDelivery {
            event: header(headers::EVENT)
                .or_else(|| subject.rsplit('.').next().map(str::to_owned))
                .unwrap_or_default(),
            workspace_id: uuid(headers::WORKSPACE),
            connection_id: uuid(headers::CONNECTION),
            delivery_id: uuid(headers::DELIVERY),
            body_ref: uuid(headers::BODY_REF),
            replay_of: uuid(headers::REPLAY_OF),
            body: payload.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_queued_keeps_its_wire_names_and_subject() {
        let m = JobQueued {
            job_id: Uuid::nil(),
            connection_id: Uuid::nil(),
            workspace_id: Uuid::nil(),
            kind: "github".into(),
            job_type: "INITIAL".into(),
            trigger: JobTrigger::Lifecycle,
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["type"], "INITIAL");
        assert_eq!(v["trigger"], "lifecycle");
        assert_eq!(m.subject(), format!("jobs.github.{}.initial", Uuid::nil()));
        let none = |_: &str| None;
        assert_eq!(
            JobQueued::decode("x", &none, &serde_json::to_vec(&m).unwrap()).unwrap(),
            m
        );
        assert!(JobQueued::decode("x", &none, b"{\"job_id\": 1}").is_err());
    }

    #[test]
    fn a_forge_integration_event_reads_exactly_as_an_item_event() {
        let item = ItemEvent {
            id: Uuid::now_v7(),
            event_type: "scm.pull_request.merged".into(),
            workspace_id: Uuid::now_v7(),
            item: ItemRef {
                kind: "pull_request".into(),
                id: Uuid::now_v7(),
            },
            repository_id: Uuid::now_v7(),
            source_key: "merge:2023-11-14T22:13:20Z".into(),
            version: "2023-11-14T22:13:30Z".into(),
            occurred_at: None,
            origin: "webhook".into(),
        };
        let mut detail = serde_json::Map::new();
        detail.insert(
            "repository_id".into(),
            item.repository_id.to_string().into(),
        );
        detail.insert("version".into(), item.version.clone().into());
        detail.insert("origin".into(), item.origin.clone().into());
        let generic = IntegrationEventMessage {
            id: item.id,
            event_type: item.event_type.clone(),
            workspace_id: item.workspace_id,
            item: item.item.clone(),
            source_key: item.source_key.clone(),
            occurred_at: None,
            detail,
            connection_id: None,
            repository_id: Some(item.repository_id),
        };
        // Unchanged for consumers: the same payload, subject, headers and dedup key.
        assert_eq!(
            serde_json::to_value(&generic).unwrap(),
            serde_json::to_value(&item).unwrap()
        );
        let read: ItemEvent =
            serde_json::from_slice(&serde_json::to_vec(&generic).unwrap()).unwrap();
        assert_eq!(read, item);
        assert_eq!(generic.subject(), item.subject());
        assert_eq!(generic.headers(), item.headers());
        assert_eq!(generic.msg_id(), item.msg_id());
    }

    #[test]
    fn a_webhook_delivery_reads_back_as_it_was_written() {
        let sent = WebhookDelivery {
            event: "push".into(),
            workspace_id: Some(Uuid::now_v7()),
            connection_id: Some(Uuid::now_v7()),
            delivery_id: Some(Uuid::now_v7()),
            body_ref: None,
            replay_of: Some(Uuid::now_v7()),
            body: b"{}".to_vec(),
        };
        let m = sent.outbox_message("github.a.b.push".into(), "k".into());
        assert_eq!(m.msg_id.as_deref(), Some("k"));
        let header = |n: &str| m.headers.get(n).cloned();
        let got = WebhookDelivery::decode(&m.subject, &header, &m.payload).unwrap();
        assert_eq!(got, sent);
    }
}
