//! Notes reconciliation: every live mirrored issue and merge request's notes and discussions read by REST and applied without tombstones.
