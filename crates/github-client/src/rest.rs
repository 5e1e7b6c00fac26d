//! The few REST shapes the contract uses (GitHub publishes no GraphQL for installations).

use serde::Deserialize;

/// A repository as REST returns it (`/installation/repositories`, `/repositories/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RestRepository {
    /// Native id.
    pub id: u64,
    /// GraphQL node id.
    pub node_id: String,
    /// Name.
    pub name: String,
    /// `owner/name`.
    pub full_name: String,
    /// Owner.
    pub owner: RestOwner,
}

/// A repository's owner as REST returns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RestOwner {
    /// Login.
    pub login: String,
}

/// One page of `GET /installation/repositories`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationRepositoriesPage {
    /// How many repositories GitHub says the installation can reach.
    pub total_count: u64,
    /// This page.
    pub repositories: Vec<RestRepository>,
    /// The `page` of `rel="next"` in the `Link` header; `None` on the last page.
    pub next_page: Option<u32>,
}

#[derive(Deserialize)]
pub(crate) struct InstallationRepositoriesBody {
    pub total_count: u64,
    pub repositories: Vec<RestRepository>,
}

#[derive(Deserialize)]
pub(crate) struct AccessTokenBody {
    pub token: String,
    pub expires_at: String,
}

#[derive(Deserialize)]
pub(crate) struct MessageBody {
    pub message: String,
}

/// The `page` number of the `rel="next"` link of a `Link` header.
pub(crate) fn next_page(link: &str) -> Option<u32> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"");
        if !is_next {
            return None;
        }
        let url = target.trim().trim_start_matches('<').trim_end_matches('>');
        let query = url.split_once('?')?.1;
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix("page="))
            .and_then(|page| page.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_page_comes_from_the_next_link_only() {
        let link = r#"<https://api.github.com/installation/repositories?per_page=100&page=1>; rel="prev", <https://api.github.com/installation/repositories?per_page=100&page=3>; rel="next", <https://api.github.com/installation/repositories?per_page=100&page=9>; rel="last""#;
        assert_eq!(next_page(link), Some(3));
        let last = r#"<https://api.github.com/installation/repositories?page=2>; rel="prev""#;
        assert_eq!(next_page(last), None);
        assert_eq!(next_page(""), None);
    }
}
