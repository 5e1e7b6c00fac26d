//! A registration whose resource provider repair removed (with proof) is `removed`: it keeps its
//! vendor id and marker for the record, and no capture or discovery treats it as held again.

/// Applied once, as is; written so that applying it again changes nothing.
pub(crate) const UP: &str = r#"
DO $$
DECLARE c record;
BEGIN
    -- The state checks of m0021 (named by Postgres) and of an earlier run of this migration.
    FOR c IN SELECT conname FROM pg_constraint
              WHERE conrelid = 'provider_registration'::regclass AND contype = 'c'
                AND pg_get_constraintdef(oid) LIKE '%state%'
    LOOP
        EXECUTE format('ALTER TABLE provider_registration DROP CONSTRAINT %I', c.conname);
    END LOOP;
END $$;
ALTER TABLE provider_registration
    ADD CONSTRAINT provider_registration_state_known
    CHECK (state IN ('requested', 'created', 'adopted', 'failed', 'removed'));
ALTER TABLE provider_registration
    ADD CONSTRAINT provider_registration_vendor_id_known
    CHECK ((state IN ('created', 'adopted', 'removed')) = (vendor_id IS NOT NULL));
ALTER TABLE provider_registration
    ADD CONSTRAINT provider_registration_failure_known
    CHECK ((state = 'failed') = (failure IS NOT NULL));
"#;
