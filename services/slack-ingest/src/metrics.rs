//! slack-ingest's own metrics.

/// Declares the metrics with their help, once per process.
pub fn register() {
    metrics::describe_counter!(
        "slack_messages_dropped_total",
        "Slack messages not kept, by reason (not_consented, pending, paused, before_consent, \
         unknown_channel, other_team, malformed_ts, future_ts); their deliveries are erased"
    );
    metrics::describe_counter!(
        "slack_messages_other_total",
        "Slack messages of subtypes the mirror does not keep (joins, topics, ...): acknowledged"
    );
    // Every series starts at zero, so a rate reads from the first scrape and a dashboard shows
    // "none dropped" rather than "no data". The labels are bounded.
    for reason in DROP_REASONS {
        metrics::counter!("slack_messages_dropped_total", "reason" => *reason).absolute(0);
    }
    metrics::counter!("slack_messages_other_total", "subtype" => "other").absolute(0);
}

/// Every reason a message is dropped for.
const DROP_REASONS: &[&str] = &[
    "not_consented",
    "pending",
    "paused",
    "before_consent",
    "unknown_channel",
    "other_team",
    "malformed_ts",
    "future_ts",
];

/// Counts a message not kept.
pub fn dropped(reason: &'static str) {
    metrics::counter!("slack_messages_dropped_total", "reason" => reason).increment(1);
}

/// Counts a message of a subtype not kept, returning its label: one of the subtypes Slack
/// documents, else `other` (so what a payload names stays bounded).
pub fn other(subtype: Option<&str>) -> &'static str {
    const KNOWN: &[&str] = &[
        "channel_join",
        "channel_leave",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "channel_archive",
        "channel_unarchive",
        "group_join",
        "group_leave",
        "group_topic",
        "group_purpose",
        "group_name",
        "group_archive",
        "group_unarchive",
        "me_message",
        "pinned_item",
        "unpinned_item",
        "reminder_add",
        "ekm_access_denied",
    ];
    let label = subtype
        .and_then(|s| KNOWN.iter().find(|k| **k == s).copied())
        .unwrap_or("other");
    metrics::counter!("slack_messages_other_total", "subtype" => label).increment(1);
    label
}

#[cfg(test)]
mod tests {
    use lifecycle_core::slack::Drop;

    use super::DROP_REASONS;

    #[test]
    fn every_drop_reason_starts_at_zero() {
        let reasons = [
            Drop::UnknownChannel,
            Drop::NotConsented,
            Drop::Pending,
            Drop::Paused,
            Drop::BeforeConsent,
        ]
        .map(Drop::as_str);
        for reason in reasons
            .into_iter()
            .chain([slack_mirror::admission::OTHER_TEAM.label])
        {
            assert!(DROP_REASONS.contains(&reason), "{reason}");
        }
    }
}
