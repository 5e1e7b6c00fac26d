//! Connection secrets at rest: AES-256-GCM under a key from the environment, bound to the row
//! (connection id and secret name are the associated data, so a ciphertext cannot be moved to
//! another row). Plaintext never leaves this module except to the caller that asked for it.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait, sea_query::OnConflict};
use uuid::Uuid;

use crate::entity::connection_secret;

/// Why a secret could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("FORGESYNC_SECRET_KEY must be 32 bytes encoded as base64 ({0})")]
    BadKey(String),
    #[error("secret {name:?} was sealed under key {key_id:?}, which is not configured")]
    UnknownKey { name: String, key_id: String },
    #[error("secret {0:?} failed authentication: wrong key or tampered ciphertext")]
    Tampered(String),
    #[error("no random bytes available for a nonce: {0}")]
    Random(String),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// The sealing key. Debug output never shows key material.
#[derive(Clone)]
pub struct SecretKey {
    id: String,
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl SecretKey {
    /// Parses a base64 32-byte key. The key id is a short digest-free label derived from its
    /// position in rotation (`k1` for now), stored beside each ciphertext.
    pub fn from_base64(id: impl Into<String>, encoded: &str) -> Result<Self, SecretError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| SecretError::BadKey(e.to_string()))?;
        let cipher = Aes256Gcm::new_from_slice(&bytes)
            .map_err(|_| SecretError::BadKey(format!("got {} bytes", bytes.len())))?;
        Ok(SecretKey {
            id: id.into(),
            cipher,
        })
    }

    /// The label stored with each ciphertext.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn aad(connection_id: Uuid, name: &str) -> Vec<u8> {
        let mut aad = connection_id.as_bytes().to_vec();
        aad.extend_from_slice(name.as_bytes());
        aad
    }

    /// Encrypts `plaintext` for `(connection_id, name)`; returns (nonce, ciphertext).
    pub fn seal(
        &self,
        connection_id: Uuid,
        name: &str,
        plaintext: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), SecretError> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).map_err(|e| SecretError::Random(e.to_string()))?;
        let aad = Self::aad(connection_id, name);
        let ciphertext = self
            .cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Tampered(name.to_owned()))?;
        Ok((nonce.to_vec(), ciphertext))
    }

    /// Decrypts a ciphertext sealed by [`SecretKey::seal`] for the same row.
    pub fn open(
        &self,
        connection_id: Uuid,
        name: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<Vec<u8>, SecretError> {
        let nonce: [u8; 12] = nonce
            .try_into()
            .map_err(|_| SecretError::Tampered(name.to_owned()))?;
        let aad = Self::aad(connection_id, name);
        self.cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| SecretError::Tampered(name.to_owned()))
    }
}

/// Stores (or replaces) one secret of a connection.
pub async fn put<C: ConnectionTrait>(
    db: &C,
    key: &SecretKey,
    connection_id: Uuid,
    name: &str,
    plaintext: &[u8],
) -> Result<(), SecretError> {
    let (nonce, ciphertext) = key.seal(connection_id, name, plaintext)?;
    connection_secret::Entity::insert(connection_secret::ActiveModel {
        connection_id: Set(connection_id),
        name: Set(name.to_owned()),
        key_id: Set(key.id().to_owned()),
        nonce: Set(nonce),
        ciphertext: Set(ciphertext),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::columns([
            connection_secret::Column::ConnectionId,
            connection_secret::Column::Name,
        ])
        .update_columns([
            connection_secret::Column::KeyId,
            connection_secret::Column::Nonce,
            connection_secret::Column::Ciphertext,
        ])
        .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    Ok(())
}

/// Reads and decrypts one secret; `None` when the connection has no secret of that name.
pub async fn get<C: ConnectionTrait>(
    db: &C,
    key: &SecretKey,
    connection_id: Uuid,
    name: &str,
) -> Result<Option<Vec<u8>>, SecretError> {
    let Some(row) = connection_secret::Entity::find_by_id((connection_id, name.to_owned()))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    if row.key_id != key.id() {
        return Err(SecretError::UnknownKey {
            name: name.to_owned(),
            key_id: row.key_id,
        });
    }
    key.open(connection_id, name, &row.nonce, &row.ciphertext)
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SecretKey {
        SecretKey::from_base64(
            "k1",
            &base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
        )
        .unwrap()
    }

    #[test]
    fn sealed_secret_opens_only_for_its_row() {
        let k = key();
        let conn = Uuid::now_v7();
        let (nonce, ct) = k.seal(conn, "token", b"ghp_secret").unwrap();
        assert!(!ct.windows(10).any(|w| w == b"ghp_secret"));
        assert_eq!(k.open(conn, "token", &nonce, &ct).unwrap(), b"ghp_secret");
        assert!(matches!(
            k.open(conn, "other", &nonce, &ct),
            Err(SecretError::Tampered(_))
        ));
        assert!(matches!(
            k.open(Uuid::now_v7(), "token", &nonce, &ct),
            Err(SecretError::Tampered(_))
        ));
    }

    #[test]
    fn bad_keys_are_named() {
        let err = SecretKey::from_base64("k1", "c2hvcnQ=").unwrap_err();
        assert!(err.to_string().contains("FORGESYNC_SECRET_KEY"));
        assert!(!format!("{:?}", key()).contains("7"));
    }
}
