//! The one rustls crypto provider (ring) for the whole process.

use std::sync::Once;

static INSTALL: Once = Once::new();

/// Installs `rustls::crypto::ring::default_provider()` as the process default.
///
/// Idempotent: call it first thing in every `main` and every test. If another provider was
/// installed before (by a dependency), that one is kept.
pub fn install_crypto_provider() {
    INSTALL.call_once(|| {
        // An Err means a provider is already installed; either way there is one now.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installing_twice_is_harmless() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
