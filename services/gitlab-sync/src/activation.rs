//! Activation of a GitLab connection, in order: discovery of its groups' projects, the durable consumer, the group hook, then the INITIAL job; renames and moves by native id.
