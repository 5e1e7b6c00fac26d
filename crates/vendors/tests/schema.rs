//! The schema check over the real migrations: the declarations account for every table, and a
//! table added without a declaration is found.

use anyhow::Result;
use store::erasure::{ContentTable, Erasable, ErasableTable, Selector};
use testkit::TestDb;
use vendors::schema::{Finding, check};

fn render(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn every_table_of_a_connection_or_workspace_is_declared_or_retained() -> Result<()> {
    let db = TestDb::new().await?;
    let findings = check(&db.db, vendors::holders()).await?;
    assert!(findings.is_empty(), "{}", render(&findings));
    Ok(())
}

#[tokio::test]
async fn a_content_table_nobody_declares_fails_the_check() -> Result<()> {
    let db = TestDb::new().await?;
    let pool = db.db.get_postgres_connection_pool();
    sqlx::query(
        "CREATE TABLE scratch_message (id uuid PRIMARY KEY, connection_id uuid, text text)",
    )
    .execute(pool)
    .await?;
    // A content column on a table that carries no tenant id is found too.
    sqlx::query("CREATE TABLE scratch_page (id uuid PRIMARY KEY, title text)")
        .execute(pool)
        .await?;
    let findings = check(&db.db, vendors::holders()).await?;
    assert_eq!(
        findings,
        vec![
            Finding::Unregistered {
                table: "scratch_message".into()
            },
            Finding::Unregistered {
                table: "scratch_page".into()
            },
            Finding::UndeclaredContent {
                table: "scratch_message".into(),
                column: "text".into()
            },
            Finding::UndeclaredContent {
                table: "scratch_page".into(),
                column: "title".into()
            },
        ],
        "{}",
        render(&findings)
    );

    // Registering the table without declaring its content still fails on the column.
    static SCRATCH: Erasable = Erasable {
        holder: "scratch",
        order: 50,
        kinds: &[],
        tables: &[ErasableTable {
            table: "scratch_message",
            selector: Selector::Connection("connection_id = $1"),
        }],
        content: &[ContentTable {
            table: "scratch_message",
            columns: &["text", "edited_text"],
        }],
        streams: &[],
        repository_streams: &[],
        connection_subjects: store::erasure::no_subjects,
        workspace_subjects: store::erasure::no_workspace_subjects,
    };
    let mut holders = vendors::holders().to_vec();
    holders.push(&SCRATCH);
    let findings = check(&db.db, &holders).await?;
    assert_eq!(
        findings,
        vec![
            Finding::Unregistered {
                table: "scratch_page".into()
            },
            Finding::UndeclaredContent {
                table: "scratch_page".into(),
                column: "title".into()
            },
            Finding::Missing {
                holder: "scratch".into(),
                table: "scratch_message".into(),
                column: Some("edited_text".into())
            },
        ],
        "{}",
        render(&findings)
    );
    Ok(())
}
