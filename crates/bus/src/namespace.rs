//! A namespace isolates streams and subjects: production uses none; each test gets its own, so
//! tests share one NATS server and run in parallel.

/// Prefix for stream names (`<NS>_LIFECYCLE`) and subjects (`<ns>.lifecycle.>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespace(Option<String>);

impl Namespace {
    /// No namespace: the subjects and streams as docs/architecture.md names them.
    pub fn root() -> Self {
        Namespace(None)
    }

    /// A namespace; it must be one subject token of letters, digits, `-` or `_`.
    pub fn new(prefix: &str) -> Result<Self, String> {
        if prefix.is_empty() {
            return Ok(Namespace(None));
        }
        if !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "namespace {prefix:?} may only hold letters, digits, '-' and '_'"
            ));
        }
        Ok(Namespace(Some(prefix.to_ascii_lowercase())))
    }

    /// The prefix, if any (what `FORGESYNC_NATS_PREFIX` holds).
    pub fn prefix(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// The full subject for a logical subject.
    pub fn subject(&self, logical: &str) -> String {
        match &self.0 {
            Some(p) => format!("{p}.{logical}"),
            None => logical.to_owned(),
        }
    }

    /// The logical subject of a full one (`None` when it is outside this namespace).
    pub fn strip<'a>(&self, full: &'a str) -> Option<&'a str> {
        match &self.0 {
            Some(p) => full.strip_prefix(p.as_str())?.strip_prefix('.'),
            None => Some(full),
        }
    }

    /// The full stream (or consumer) name for a logical one.
    pub fn name(&self, logical: &str) -> String {
        match &self.0 {
            Some(p) => format!("{}_{logical}", p.to_ascii_uppercase().replace('-', "_")),
            None => logical.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Namespace;

    #[test]
    fn namespaced_subjects_round_trip() {
        let ns = Namespace::new("t1a").unwrap();
        assert_eq!(
            ns.subject("lifecycle.github.c.activated"),
            "t1a.lifecycle.github.c.activated"
        );
        assert_eq!(ns.strip("t1a.lifecycle.x"), Some("lifecycle.x"));
        assert_eq!(ns.strip("t1b.lifecycle.x"), None);
        assert_eq!(ns.name("LIFECYCLE"), "T1A_LIFECYCLE");
        assert_eq!(Namespace::root().subject("jobs.a"), "jobs.a");
        assert!(Namespace::new("a.b").is_err());
    }
}
