//! The classes of a vendor's failed answer, named the same way for every vendor: each vendor
//! client sorts its errors into one, and job reasons, listing faults and activity name it.
//! Credentials a vendor refused are their own classes, because no retry with the same
//! credentials can succeed.

use std::fmt;

/// What kind of failure a vendor's answer was.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VendorErrorClass {
    /// The credentials were refused (HTTP 401): invalid, expired or revoked.
    BadCredentials,
    /// The credentials are valid but lack a permission (HTTP 403), named when the vendor says.
    Forbidden {
        /// The permission the vendor asked for (e.g. `issues=read`), when it said.
        permission: Option<String>,
    },
    /// The vendor's primary rate limit is spent.
    RateLimited,
    /// A secondary (abuse) rate limit still in force after the bounded retries.
    SecondaryRateLimit,
    /// The vendor failed (HTTP 5xx) after the retries.
    ServerError,
    /// No answer in time.
    Timeout,
    /// A GraphQL error of this `type` (e.g. `SERVICE_UNAVAILABLE`) left no usable data.
    GraphqlError(String),
    /// The object is gone, or not visible to these credentials.
    NotFound,
    /// The job's own quota budget is spent; nothing was sent.
    BudgetExhausted,
    /// The vendor could not be reached (connect, TLS, a broken body).
    Unreachable,
    /// The answer did not have the contract's shape, or another status we do not act on.
    InvalidResponse,
    /// One scope is out of the connection's reach now (a bot removed from one channel), while
    /// the credentials still reach the others: never a refusal of the credentials.
    ScopeLost,
}

impl VendorErrorClass {
    /// Whether the vendor refused the connection's credentials: every later read with them
    /// fails the same way until they are replaced.
    pub fn refuses_credentials(&self) -> bool {
        matches!(
            self,
            VendorErrorClass::BadCredentials | VendorErrorClass::Forbidden { .. }
        )
    }

    /// The class's name alone (a bounded metric label).
    pub fn name(&self) -> &'static str {
        match self {
            VendorErrorClass::BadCredentials => "bad_credentials",
            VendorErrorClass::Forbidden { .. } => "forbidden",
            VendorErrorClass::RateLimited => "rate_limited",
            VendorErrorClass::SecondaryRateLimit => "secondary_rate_limit",
            VendorErrorClass::ServerError => "server_error",
            VendorErrorClass::Timeout => "timeout",
            VendorErrorClass::GraphqlError(_) => "graphql_error",
            VendorErrorClass::NotFound => "not_found",
            VendorErrorClass::BudgetExhausted => "budget_exhausted",
            VendorErrorClass::Unreachable => "unreachable",
            VendorErrorClass::InvalidResponse => "invalid_response",
            VendorErrorClass::ScopeLost => "scope_lost",
        }
    }
}

/// The name, with what the vendor said of it: `forbidden: issues=read`,
/// `graphql_error: SERVICE_UNAVAILABLE`.
impl fmt::Display for VendorErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            VendorErrorClass::Forbidden {
                permission: Some(permission),
            } => write!(f, ": {permission}"),
            VendorErrorClass::GraphqlError(kind) => write!(f, ": {kind}"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::VendorErrorClass as C;

    #[test]
    fn each_class_is_named_with_what_the_vendor_said() {
        let named = [
            (C::BadCredentials, "bad_credentials"),
            (C::Forbidden { permission: None }, "forbidden"),
            (
                C::Forbidden {
                    permission: Some("issues=read".into()),
                },
                "forbidden: issues=read",
            ),
            (C::RateLimited, "rate_limited"),
            (C::SecondaryRateLimit, "secondary_rate_limit"),
            (C::ServerError, "server_error"),
            (C::Timeout, "timeout"),
            (C::ScopeLost, "scope_lost"),
            (
                C::GraphqlError("SERVICE_UNAVAILABLE".into()),
                "graphql_error: SERVICE_UNAVAILABLE",
            ),
        ];
        for (class, name) in named {
            assert_eq!(class.to_string(), name);
        }
    }

    #[test]
    fn only_refused_credentials_refuse_credentials() {
        assert!(C::BadCredentials.refuses_credentials());
        assert!(C::Forbidden { permission: None }.refuses_credentials());
        for other in [
            C::RateLimited,
            C::SecondaryRateLimit,
            C::ServerError,
            C::Timeout,
            C::GraphqlError("FORBIDDEN".into()),
            C::NotFound,
            C::BudgetExhausted,
            C::Unreachable,
            C::InvalidResponse,
        ] {
            assert!(!other.refuses_credentials(), "{other}");
        }
    }
}
