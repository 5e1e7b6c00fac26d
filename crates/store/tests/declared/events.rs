//! A vendor that is not a forge records its changes through the generic ledger, naming its own
//! scope (a channel) and audience, without any repository: a second report of the same change
//! is one row and one message per workspace, and a workspace outside the audience hears nothing.

use anyhow::Result;
use store::contracts::{IntegrationEventMessage, ItemRef};
use store::events::{self, EventSubject, IntegrationEvent, Recipient, Recorded};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::World;

fn edited(channel: Uuid, message: Uuid, connection: Uuid) -> IntegrationEvent {
    let mut detail = serde_json::Map::new();
    detail.insert("edited_ts".into(), "1700000000.000200".into());
    IntegrationEvent {
        subject: EventSubject {
            kind: "channel",
            id: channel,
        },
        item: ItemRef {
            kind: "message".into(),
            id: message,
        },
        event_type: "chat.message.edited".into(),
        source_key: "edit:1700000000.000200".into(),
        occurred_at: OffsetDateTime::from_unix_timestamp(1_700_000_000).ok(),
        connection_id: Some(connection),
        detail,
    }
}

#[tokio::test]
async fn a_change_reported_twice_is_one_row_and_one_message_per_workspace() -> Result<()> {
    let w = World::new("slack").await?;
    let (first, connection) = w.connection("slack", "active").await?;
    let (second, _) = w.connection("slack", "active").await?;
    let (outsider, _) = w.connection("slack", "active").await?;
    let event = edited(Uuid::now_v7(), Uuid::now_v7(), connection);

    for attempt in 0..2 {
        let audience = [Recipient::new(first), Recipient::new(second)];
        let mut txn = w.pool.begin().await?;
        let recorded = events::record(&mut txn, &event, &audience).await?;
        txn.commit().await?;
        match attempt {
            0 => assert!(matches!(recorded, Recorded::New { published: 2, .. })),
            _ => assert_eq!(recorded, Recorded::Absorbed, "a second report is absorbed"),
        }
    }

    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM integration_event")
        .fetch_one(&w.pool)
        .await?;
    assert_eq!(rows, 1);
    let (kind, workspaces): (String, Vec<Uuid>) =
        sqlx::query_as("SELECT subject_kind, workspace_ids FROM integration_event")
            .fetch_one(&w.pool)
            .await?;
    assert_eq!(
        (kind.as_str(), workspaces),
        ("channel", vec![first, second])
    );

    let outbox: Vec<(String, serde_json::Value, Vec<u8>)> =
        sqlx::query_as("SELECT subject, headers, payload FROM outbox ORDER BY subject")
            .fetch_all(&w.pool)
            .await?;
    let mut subjects: Vec<String> = outbox.iter().map(|(s, _, _)| s.clone()).collect();
    let mut expected: Vec<String> = [first, second]
        .iter()
        .map(|ws| lifecycle_core::subject::events(&ws.to_string(), "chat.message.edited"))
        .collect();
    subjects.sort();
    expected.sort();
    assert_eq!(
        subjects, expected,
        "one message per workspace of the audience"
    );
    assert!(
        !subjects.iter().any(|s| s.contains(&outsider.to_string())),
        "a workspace outside the audience hears nothing"
    );
    for (_, headers, payload) in &outbox {
        let message: IntegrationEventMessage = serde_json::from_slice(payload)?;
        assert_eq!(message.item, event.item);
        assert_eq!(message.source_key, event.source_key);
        assert_eq!(message.detail["channel_id"], event.subject.id.to_string());
        assert_eq!(message.detail["edited_ts"], "1700000000.000200");
        assert_eq!(message.occurred_at.as_deref(), Some("2023-11-14T22:13:20Z"));
        // Its copy is the connection's alone: erased with it, never tied to a repository.
        assert_eq!(headers["Forgesync-Connection"], connection.to_string());
        assert!(headers.get("Forgesync-Repository").is_none());
    }
    Ok(())
}
