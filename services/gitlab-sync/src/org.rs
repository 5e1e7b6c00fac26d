//! The organization tier of a GitLab connection: its root group is the organization (instance
//! and root group), its subgroups are teams, each with its direct members. Listed with the
//! connection's own token after every discovery (activation and each reconcile), and kept
//! between by Member Hooks ([`crate::webhooks::members`]). A members listing read whole
//! replaces what is stored; one that is not adds and updates only.

use gitlab_client::{GitlabClient, MAX_PAGE_SIZE};
use lifecycle_core::gitlab::paging::{OffsetListing, OffsetPageHeaders};
use scm_mirror::organization::{self, Member, MembersOf};
use sqlx::PgPool;
use store::entity::connection;
use time::OffsetDateTime;

use crate::activation::Discovery;

/// What one refresh of the tier did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// Groups whose members were listed (the organization and its teams).
    pub groups: usize,
    /// Membership rows written or removed.
    pub changed: u64,
    /// Teams whose subgroup a complete discovery no longer found, removed.
    pub teams_removed: u64,
    /// Why a listing was not whole (the first reason); nothing was removed from it.
    pub incomplete: Option<String>,
}

/// A group's direct members, every page; `Err` with the reason when the listing was not read
/// whole (the members read so far are still returned).
async fn list_members(
    client: &GitlabClient,
    group_id: u64,
    page_cap: u32,
) -> (Vec<Member>, Result<(), String>) {
    let mut rule = OffsetListing::new(page_cap.max(1));
    let mut members = Vec::new();
    let mut failure = None;
    while let Some(page) = rule.next_page() {
        match client
            .group_members_page(group_id, page, MAX_PAGE_SIZE)
            .await
        {
            Ok(listed) => {
                let h = &listed.headers;
                rule.accept_page(
                    OffsetPageHeaders::parse(
                        h.page.as_deref(),
                        h.next_page.as_deref(),
                        h.total.as_deref(),
                    ),
                    listed.members.iter().map(|m| m.id),
                );
                members.extend(listed.members.into_iter().filter_map(|m| {
                    Some(Member {
                        user_native_id: i64::try_from(m.id).ok()?,
                        username: m.username,
                        access_level: m.access_level,
                    })
                }));
            }
            Err(e) => {
                rule.record_failed_page();
                failure = Some(format!(
                    "page {page} of group {group_id}'s members failed: {e}"
                ));
            }
        }
    }
    let whole = match rule.finish() {
        Ok(_) => Ok(()),
        Err(gap) => Err(failure
            .unwrap_or_else(|| format!("group {group_id}'s members were not listed whole: {gap}"))),
    };
    (members, whole)
}

/// Binds the connection's organization (its root group, as discovery found its id) and lists
/// the members of it and of each subgroup discovery found. With `remove_vanished` (a
/// reconcile's complete discovery), a team whose subgroup discovery no longer found goes with
/// its members. `Err` when the root group's id is unknown (nothing is bound then).
pub async fn refresh(
    pool: &PgPool,
    conn: &connection::Model,
    client: &GitlabClient,
    root_group: &str,
    d: &Discovery,
    page_cap: u32,
    remove_vanished: bool,
) -> anyhow::Result<Result<Refreshed, String>> {
    let Some(root_id) = d.group_id else {
        return Ok(Err(
            "the connected group's id was not shown by discovery; the organization is not bound"
                .to_owned(),
        ));
    };
    let mut tx = pool.begin().await?;
    let org = organization::bind(
        &mut tx,
        conn.id,
        conn.workspace_id,
        conn.provider_instance_id,
        root_id as i64,
        root_group,
    )
    .await?;
    tx.commit().await?;
    let mut groups = vec![(MembersOf::Organization(org), root_id)];
    for (path, id) in &d.subgroup_ids {
        let mut tx = pool.begin().await?;
        let team = organization::team(&mut tx, org, *id as i64, path).await?;
        tx.commit().await?;
        groups.push((MembersOf::Team(team), *id));
    }
    let mut done = Refreshed::default();
    // Fail closed: only a reconcile's complete discovery proves a subgroup is gone.
    if remove_vanished {
        let found: Vec<i64> = d.subgroup_ids.values().map(|id| *id as i64).collect();
        let mut tx = pool.begin().await?;
        done.teams_removed = organization::retain_teams(&mut tx, org, &found).await?;
        tx.commit().await?;
    }
    for (of, group_id) in groups {
        // Dated by when it was asked: a member hook read after it wins.
        let read_at = OffsetDateTime::now_utc();
        let (members, whole) = list_members(client, group_id, page_cap).await;
        if let Err(reason) = &whole {
            done.incomplete.get_or_insert(reason.clone());
        }
        let mut tx = pool.begin().await?;
        done.changed +=
            organization::apply_listing(&mut tx, of, &members, whole.is_ok(), read_at).await?;
        tx.commit().await?;
        done.groups += 1;
    }
    Ok(Ok(done))
}
