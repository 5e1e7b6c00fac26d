//! GitLab review threads written by Note Hooks before one mapping of notes existed were keyed by
//! the bare discussion hex; the sync keys them by the discussion's global id. One discussion could
//! so be two threads of one merge request. Every bare-hex GitLab thread takes the global id; where
//! the global-id thread exists already, the hex thread's comments move to it (its path fills a
//! missing one) and the hex thread goes. Replies then refer again to the first comment of their
//! merged thread. Only threads of GitLab projects are read: a GitHub thread id is never touched.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
CREATE TEMPORARY TABLE m0040_gitlab_pull_request ON COMMIT DROP AS
SELECT p.id
  FROM pull_request p
  JOIN repository r ON r.id = p.repository_id
  JOIN provider_instance i ON i.id = r.provider_instance_id
 WHERE i.kind = 'gitlab';

-- Each bare-hex GitLab thread beside its global-id twin, when both exist.
CREATE TEMPORARY TABLE m0040_twin ON COMMIT DROP AS
SELECT h.id AS hex_id, g.id AS gid_id, h.path AS hex_path
  FROM review_thread h
  JOIN review_thread g
    ON g.pull_request_id = h.pull_request_id
   AND g.node_id = 'gid://gitlab/Discussion/' || h.node_id
 WHERE h.node_id ~ '^[0-9a-f]{40}$'
   AND h.pull_request_id IN (SELECT id FROM m0040_gitlab_pull_request);

UPDATE review_comment c SET thread_id = t.gid_id
  FROM m0040_twin t
 WHERE c.thread_id = t.hex_id;

UPDATE review_thread g SET path = t.hex_path
  FROM m0040_twin t
 WHERE g.id = t.gid_id AND g.path IS NULL AND t.hex_path IS NOT NULL;

DELETE FROM review_thread h USING m0040_twin t WHERE h.id = t.hex_id;

UPDATE review_thread SET node_id = 'gid://gitlab/Discussion/' || node_id
 WHERE node_id ~ '^[0-9a-f]{40}$'
   AND pull_request_id IN (SELECT id FROM m0040_gitlab_pull_request);

-- A merged thread's replies refer to its first comment; the first refers to none.
UPDATE review_comment c
   SET in_reply_to = CASE WHEN c.native_id = f.first THEN NULL ELSE f.first END
  FROM (SELECT DISTINCT ON (thread_id) thread_id, native_id AS first
          FROM review_comment
         WHERE thread_id IN (SELECT gid_id FROM m0040_twin)
         ORDER BY thread_id, upstream_created_at, native_id) f
 WHERE c.thread_id = f.thread_id
   AND c.in_reply_to IS DISTINCT FROM (CASE WHEN c.native_id = f.first THEN NULL ELSE f.first END);
"#;
