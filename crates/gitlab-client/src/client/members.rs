//! A group's members over REST (`GET /groups/{id}/members`, one member by user id), with
//! GitLab's paging headers: the organization tier's listing and a member hook's confirming read.

use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::{GitlabClient, MAX_PAGE_SIZE, decode_json};
use crate::error::Error;
use crate::rest::PageHeaders;

/// A group member as GitLab lists it (direct members only).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupMember {
    /// User id.
    pub id: u64,
    /// Username.
    pub username: String,
    /// GitLab's access level (10 guest ... 50 owner).
    pub access_level: i32,
}

/// One page of a group's members.
#[derive(Debug, Clone)]
pub struct GroupMembersPage {
    /// The members, in GitLab's order.
    pub members: Vec<GroupMember>,
    /// The paging headers as sent.
    pub headers: PageHeaders,
}

impl GitlabClient {
    /// One page of group `group_id`'s direct members.
    #[tracing::instrument(skip(self))]
    pub async fn group_members_page(
        &self,
        group_id: u64,
        page: u32,
        per_page: u32,
    ) -> Result<GroupMembersPage, Error> {
        let url = format!(
            "{}?page={}&per_page={}",
            self.api(&format!("groups/{group_id}/members")),
            page.max(1),
            per_page.clamp(1, MAX_PAGE_SIZE)
        );
        let (headers, body) = self
            .rest("GET group members", Method::GET, &url, None::<&()>)
            .await?;
        Ok(GroupMembersPage {
            members: decode_json("GET group members", &body)?,
            headers: PageHeaders::from_map(&headers),
        })
    }

    /// User `user_id`'s direct membership of group `group_id`; `None` when GitLab answers 404
    /// (not a member).
    #[tracing::instrument(skip(self))]
    pub async fn group_member(
        &self,
        group_id: u64,
        user_id: u64,
    ) -> Result<Option<GroupMember>, Error> {
        let url = self.api(&format!("groups/{group_id}/members/{user_id}"));
        self.rest_optional("GET group member", &url).await
    }
}
