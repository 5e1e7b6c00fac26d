//! GitLab head checks: the check state a merge request's `headPipeline` reports.

use crate::checks::CheckState;
use crate::partial::Field;

/// The check state of a GitLab `headPipeline` field; `None` records nothing.
pub fn gitlab_pipeline_state(head_pipeline: Field<Option<&str>>) -> Option<CheckState> {
    match head_pipeline {
        // A failed headPipeline records no check state.
        Field::Absent | Field::Unknown => None,
        // Only null without an error means no pipeline.
        Field::Known(None) => Some(CheckState::NoPipeline),
        Field::Known(Some(status)) => Some(match status.to_ascii_lowercase().as_str() {
            "success" => CheckState::Success,
            "skipped" => CheckState::Skipped,
            "failed" | "canceled" | "canceling" => CheckState::Failure,
            _ => CheckState::Pending,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_pipeline_skipped_and_none_are_distinct() {
        assert_eq!(
            gitlab_pipeline_state(Field::Known(None)),
            Some(CheckState::NoPipeline)
        );
        assert_eq!(
            gitlab_pipeline_state(Field::Known(Some("SKIPPED"))),
            Some(CheckState::Skipped)
        );
        assert_eq!(
            gitlab_pipeline_state(Field::Known(Some("success"))),
            Some(CheckState::Success)
        );
        assert_eq!(
            gitlab_pipeline_state(Field::Known(Some("failed"))),
            Some(CheckState::Failure)
        );
        assert_eq!(
            gitlab_pipeline_state(Field::Known(Some("canceled"))),
            Some(CheckState::Failure)
        );
        assert_eq!(
            gitlab_pipeline_state(Field::Known(Some("canceling"))),
            Some(CheckState::Failure)
        );
        assert_eq!(
            gitlab_pipeline_state(Field::Known(Some("running"))),
            Some(CheckState::Pending)
        );
        assert_ne!(CheckState::NoPipeline, CheckState::None);
        assert_ne!(CheckState::Skipped, CheckState::None);
    }

    #[test]
    fn failed_head_pipeline_records_no_state() {
        assert_eq!(gitlab_pipeline_state(Field::Unknown), None);
        assert_eq!(gitlab_pipeline_state(Field::Absent), None);
    }
}
