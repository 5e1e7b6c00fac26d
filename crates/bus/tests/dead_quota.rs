//! Dead messages are a quota per workspace: a tenant whose every delivery fails fills only its
//! own share, displacing its own oldest, and another workspace's dead messages stay.

use anyhow::Result;
use bus::dead::{self, DeadMessage, KEPT_PER_WORKSPACE};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

fn dead_of(workspace: Uuid, n: usize) -> DeadMessage {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(store::headers::WORKSPACE, workspace.to_string().as_str());
    DeadMessage {
        stream: "WEBHOOKS_GITHUB".into(),
        consumer: "github-sync-webhooks".into(),
        subject: "github.acme.widgets.issues".into(),
        headers: Some(headers),
        payload: format!("{{\"n\": {n}}}").into_bytes(),
        reason: "permanent: malformed".into(),
        attempts: 1,
    }
}

async fn kept(db: &sea_orm::DatabaseConnection, workspace: Uuid) -> Result<Vec<i64>> {
    let rows: Vec<(i64,)> = sqlx::query_as(
        "SELECT (convert_from(payload, 'UTF8')::jsonb ->> 'n')::bigint FROM dead_message
          WHERE headers ->> 'Forgesync-Workspace' = $1 ORDER BY 1",
    )
    .bind(workspace.to_string())
    .fetch_all(db.get_postgres_connection_pool())
    .await?;
    Ok(rows.into_iter().map(|(n,)| n).collect())
}

#[tokio::test]
async fn a_workspace_flooding_dead_messages_displaces_only_its_own_oldest() -> Result<()> {
    let db = testkit::TestDb::new().await?;
    let (victim, flooder) = (Uuid::now_v7(), Uuid::now_v7());
    for n in 0..5 {
        dead::record(&db.db, dead_of(victim, n)).await?;
    }
    // The flooder's quota, filled at once (as many failing deliveries would fill it).
    db.db
        .execute_unprepared(&format!(
            "INSERT INTO dead_message (id, stream, consumer, subject, headers, payload, reason, attempts, created_at)
             SELECT gen_random_uuid(), 'WEBHOOKS_GITHUB', 'c', 's',
                    jsonb_build_object('Forgesync-Workspace', '{flooder}'),
                    convert_to(jsonb_build_object('n', n)::text, 'UTF8'), 'r', 1,
                    now() - make_interval(secs => {KEPT_PER_WORKSPACE} - n)
               FROM generate_series(0, {KEPT_PER_WORKSPACE} - 1) AS n"
        ))
        .await?;
    let top = KEPT_PER_WORKSPACE as usize;
    for n in top..top + 3 {
        dead::record(&db.db, dead_of(flooder, n)).await?;
    }
    let flooded = kept(&db.db, flooder).await?;
    assert_eq!(flooded.len(), top, "the flooder keeps its quota");
    assert_eq!(flooded[0], 3, "its three oldest were dropped");
    assert_eq!(
        *flooded.last().unwrap(),
        (top + 2) as i64,
        "its newest are kept"
    );
    assert_eq!(kept(&db.db, victim).await?, vec![0, 1, 2, 3, 4]);
    Ok(())
}
