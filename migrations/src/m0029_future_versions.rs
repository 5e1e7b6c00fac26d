//! Rows dated in the future. Forward-only writes refuse every version older than the stored one,
//! so a row whose stored version lies past now (a forged delivery before vendor times were
//! bounded, or a vendor whose clock ran ahead) would never take a genuine update again. Such
//! versions are moved back to the epoch, which every genuine version passes, so the next sync
//! writes what the vendor holds; a watermark in the future is cleared, so the next listing reads
//! everything. Five minutes of skew are left alone, as the services allow them.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
UPDATE issue SET upstream_updated_at = 'epoch'
 WHERE upstream_updated_at > now() + interval '5 minutes';
UPDATE pull_request SET upstream_updated_at = 'epoch'
 WHERE upstream_updated_at > now() + interval '5 minutes';
UPDATE comment SET upstream_updated_at = 'epoch'
 WHERE upstream_updated_at > now() + interval '5 minutes';
UPDATE review SET upstream_updated_at = 'epoch'
 WHERE upstream_updated_at > now() + interval '5 minutes';
UPDATE review_thread SET upstream_updated_at = 'epoch'
 WHERE upstream_updated_at > now() + interval '5 minutes';
UPDATE review_comment SET upstream_updated_at = 'epoch'
 WHERE upstream_updated_at > now() + interval '5 minutes';
UPDATE listing_state SET watermark = NULL
 WHERE watermark > now() + interval '5 minutes';
"#;
